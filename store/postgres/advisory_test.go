package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// TestAdvisoryLockExcludesAndFences: a session-level advisory lock excludes a
// second session, and each grant takes a fresh token from the lease row.
func TestAdvisoryLockExcludesAndFences(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	ctx := ctxFor(t)
	a, err := st.TryAdvisoryLock(ctx, "cron", "node-a", postgres.AdvisoryOptions{Metadata: "addr=a"})
	if err != nil {
		t.Fatalf("TryAdvisoryLock: %v", err)
	}
	if a.Token() != 1 || a.Term().Holder != "node-a" {
		t.Fatalf("first advisory lock term %v, want node-a with token 1", a.Term())
	}
	if _, err := st.TryAdvisoryLock(ctx, "cron", "node-b", postgres.AdvisoryOptions{}); !errors.Is(err, store.ErrHeld) {
		t.Fatalf("second session's TryAdvisoryLock: %v, want ErrHeld", err)
	}
	rec, err := st.Get(ctx, "cron")
	if err != nil || rec.Holder != "node-a" || rec.Token != 1 || rec.Live() || rec.Metadata != "addr=a" {
		t.Fatalf("lease row while the advisory lock is held = %+v, %v; want node-a, token 1, not a live lease", rec, err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("second Release: %v (want the first result again)", err)
	}
	if a.Context().Err() == nil {
		t.Fatalf("context not ended after Release")
	}
	b, err := st.TryAdvisoryLock(ctx, "cron", "node-b", postgres.AdvisoryOptions{})
	if err != nil || b.Token() != 2 {
		t.Fatalf("TryAdvisoryLock after release = %v, %v; want token 2", b, err)
	}
	defer b.Release(ctx)
	if rec, err := st.Get(ctx, "cron"); err != nil || rec.Holder != "node-b" || rec.Token != 2 {
		t.Fatalf("lease row = %+v, %v; want node-b with token 2", rec, err)
	}
}

// TestAdvisoryLockLostWithItsConnection: the server drops the lock with the
// session. A rival gets it at once with a higher token; the old holder's
// context is cancelled at its next ping; and a fenced resource refuses the
// old holder's token after the rival's write.
func TestAdvisoryLockLostWithItsConnection(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	admin := adminConn(t)
	ctx := ctxFor(t)
	if _, err := admin.Exec(ctx, `CREATE TABLE `+schema+`.resource (id int PRIMARY KEY, last_token bigint NOT NULL, last_holder text NOT NULL, value text);
		INSERT INTO `+schema+`.resource VALUES (1, 0, '', '')`); err != nil {
		t.Fatal(err)
	}
	// The direct form of fence/README.md: the term (token, holder) is checked
	// in the statement that writes.
	fencedWrite := func(term store.Term, value string) int64 {
		tag, err := admin.Exec(ctx, `UPDATE `+schema+`.resource SET last_token = $1, last_holder = $2, value = $3
			WHERE id = 1 AND (last_token < $1 OR (last_token = $1 AND last_holder = $2))`, term.Token, term.Holder, value)
		if err != nil {
			t.Fatal(err)
		}
		return tag.RowsAffected()
	}

	a, err := st.TryAdvisoryLock(ctx, "cron", "node-a", postgres.AdvisoryOptions{CheckInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	if fencedWrite(a.Term(), "a") != 1 {
		t.Fatal("node-a's first fenced write was refused")
	}
	// node-b blocks in pg_advisory_lock.
	type result struct {
		l   *postgres.AdvisoryLock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := st.AdvisoryLock(ctx, "cron", "node-b", postgres.AdvisoryOptions{})
		got <- result{l, err}
	}()
	waitBlocked(t, admin, "pg_advisory_lock")
	var ok bool
	if err := admin.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, int32(a.PID())).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate node-a's session: %v %v", ok, err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("node-b's AdvisoryLock: %v", r.err)
	}
	defer r.l.Release(ctx)
	if r.l.Token() != a.Token()+1 {
		t.Fatalf("node-b's token %d, want %d", r.l.Token(), a.Token()+1)
	}
	if fencedWrite(r.l.Term(), "b") != 1 {
		t.Fatal("node-b's fenced write was refused")
	}
	select {
	case <-a.Context().Done():
	case <-ctx.Done():
		t.Fatal("node-a's context was not cancelled after its connection died")
	}
	if cause := context.Cause(a.Context()); !errors.Is(cause, postgres.ErrAdvisoryLost) {
		t.Fatalf("node-a's cause %v, want ErrAdvisoryLost", cause)
	}
	// node-a, still believing, writes with its token: refused.
	if fencedWrite(a.Term(), "stale a") != 0 {
		t.Fatal("the resource accepted node-a's stale token after node-b's write")
	}
	if err := a.Release(ctx); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("node-a's Release after its connection died: %v, want ErrNotHeld", err)
	}
}

// TestAdvisoryLockCancelled: a wait cancelled by its context leaves no lock
// behind: when AdvisoryLock returns, no other session waits for the lock
// (an abandoned backend still queued in pg_advisory_lock would be granted
// the lock when the holder lets go, and keep it until it noticed its closed
// socket: the once-in-thirty failure of the last step), and the next
// session takes it at once.
func TestAdvisoryLockCancelled(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	admin := adminConn(t)
	ctx := ctxFor(t)
	a, err := st.TryAdvisoryLock(ctx, "cron", "node-a", postgres.AdvisoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := st.AdvisoryLock(wctx, "cron", "node-b", postgres.AdvisoryOptions{})
		done <- err
	}()
	waitBlocked(t, admin, "pg_advisory_lock")
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled AdvisoryLock returned a lock")
	}
	key := postgres.AdvisoryKey(`"`+schema+`"."leader_lease"`, "cron")
	var others int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
		AND classid = (($1::int8 >> 32) & 4294967295)::oid AND objid = ($1::int8 & 4294967295)::oid AND pid <> $2`, key, int32(a.PID())).Scan(&others); err != nil {
		t.Fatal(err)
	}
	if others != 0 {
		t.Fatalf("after the cancelled AdvisoryLock returned, %d other session(s) still hold or wait for the lock", others)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := st.TryAdvisoryLock(ctx, "cron", "node-c", postgres.AdvisoryOptions{})
	if err != nil {
		t.Fatalf("TryAdvisoryLock after the cancelled wait: %v (did the cancelled session keep the lock?)", err)
	}
	c.Release(ctx)
}

// TestAdvisoryLockRespectsLiveLease: the advisory variant does not take a
// token from under a live lease term of the same name.
func TestAdvisoryLockRespectsLiveLease(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	ctx := ctxFor(t)
	held, err := st.Acquire(ctx, "cron", "lease-holder", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.TryAdvisoryLock(ctx, "cron", "node-a", postgres.AdvisoryOptions{}); !errors.Is(err, store.ErrHeld) {
		t.Fatalf("TryAdvisoryLock over a live lease: %v, want ErrHeld", err)
	}
	if g, err := st.Get(ctx, "cron"); err != nil || g.Term != held.Term || !g.Live() {
		t.Fatalf("the live lease was touched: %+v, %v", g, err)
	}
	if err := st.Release(ctx, held.Term); err != nil {
		t.Fatal(err)
	}
	a, err := st.TryAdvisoryLock(ctx, "cron", "node-a", postgres.AdvisoryOptions{})
	if err != nil || a.Token() != held.Token+1 {
		t.Fatalf("TryAdvisoryLock after the lease's release = %v, %v; want token %d", a, err, held.Token+1)
	}
	a.Release(ctx)
}

// TestAdvisoryKeyIgnoresHowTheTableIsNamed: two stores on one table, one
// naming it schema-qualified and one through search_path, take the same
// advisory lock and exclude each other; a store on another schema's table
// takes a different one. (Before the key was derived from the canonical
// name, the second store got the "same" lock with the next token.)
func TestAdvisoryKeyIgnoresHowTheTableIsNamed(t *testing.T) {
	schema := migrated(t)
	other := migrated(t)
	ctx := ctxFor(t)
	qualified := openStore(t, schema, postgres.Options{})
	viaPath, err := postgres.Open(ctx, withParams(t, testDSN(t), "pool_max_conns", "2", "search_path", schema), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer viaPath.Close()
	if viaPath.Table() == qualified.Table() {
		t.Fatalf("both stores quote the table as %s; the test needs two spellings", viaPath.Table())
	}
	a, err := qualified.TryAdvisoryLock(ctx, "cron", "node-a", postgres.AdvisoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	if b, err := viaPath.TryAdvisoryLock(ctx, "cron", "node-b", postgres.AdvisoryOptions{}); !errors.Is(err, store.ErrHeld) {
		if b != nil {
			b.Release(ctx)
			t.Fatalf("the store naming the table through search_path took the lock too (tokens %d and %d)", a.Token(), b.Token())
		}
		t.Fatalf("TryAdvisoryLock through search_path: %v, want ErrHeld", err)
	}
	c, err := openStore(t, other, postgres.Options{}).TryAdvisoryLock(ctx, "cron", "node-c", postgres.AdvisoryOptions{})
	if err != nil {
		t.Fatalf("a lock of the same name on another table: %v, want its own lock", err)
	}
	c.Release(ctx)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := viaPath.TryAdvisoryLock(ctx, "cron", "node-b", postgres.AdvisoryOptions{})
	if err != nil || b.Token() != a.Token()+1 {
		t.Fatalf("after release, through search_path = %v, %v; want token %d", b, err, a.Token()+1)
	}
	b.Release(ctx)
}
