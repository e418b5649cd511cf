package postgres_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// raisingBodies replaces the bodies of the four lease functions of schema
// with ones that raise an error naming the function, keeping each
// signature and result type, so that a call that goes through a function
// says so.
func raisingBodies(t *testing.T, schema string) {
	t.Helper()
	r := strings.NewReplacer("{s}", schema)
	if _, err := adminConn(t).Exec(ctxFor(t), r.Replace(`
CREATE OR REPLACE FUNCTION {s}.leader_lease_acquire(text, text, float8, text, text)
RETURNS TABLE (lh_name text, lh_holder text, lh_epoch bigint, lh_remaining float8, lh_ttl float8, lh_metadata text)
LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'test: leader_lease_acquire ran'; END $$;
CREATE OR REPLACE FUNCTION {s}.leader_lease_acqfair(text, text, float8, text, text)
RETURNS TABLE (lh_name text, lh_holder text, lh_epoch bigint, lh_remaining float8, lh_ttl float8, lh_metadata text)
LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'test: leader_lease_acqfair ran'; END $$;
CREATE OR REPLACE FUNCTION {s}.leader_lease_renew(text, text, bigint, float8, text)
RETURNS TABLE (lh_name text, lh_holder text, lh_epoch bigint, lh_remaining float8, lh_ttl float8, lh_metadata text)
LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'test: leader_lease_renew ran'; END $$;
CREATE OR REPLACE FUNCTION {s}.leader_lease_release(text, text, bigint, text)
RETURNS SETOF bigint
LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'test: leader_lease_release ran'; END $$;`)); err != nil {
		t.Fatalf("replace the lease functions' bodies: %v", err)
	}
}

func dropLeaseFunctions(t testing.TB, schema string) {
	t.Helper()
	if _, err := adminConn(t).Exec(ctxFor(t), strings.NewReplacer("{s}", schema).Replace(`
DROP FUNCTION {s}.leader_lease_acquire(text, text, float8, text, text);
DROP FUNCTION {s}.leader_lease_acqfair(text, text, float8, text, text);
DROP FUNCTION {s}.leader_lease_renew(text, text, bigint, float8, text);
DROP FUNCTION {s}.leader_lease_release(text, text, bigint, text);`)); err != nil {
		t.Fatalf("drop the lease functions: %v", err)
	}
}

// cycle runs what the lease functions carry on st: an acquire, a rival
// refused, a renewal, a release, a second grant with a higher token, and
// the fair acquire (AcquireUnqueued): refused while a rival's place is
// queued, without spending a token, and granted once the place has left.
func cycle(t *testing.T, st *postgres.Store, name string) {
	t.Helper()
	ctx := ctxFor(t)
	a, err := st.Acquire(ctx, name, "node-a", time.Minute, "meta-a")
	if err != nil {
		t.Fatalf("acquire %s: %v", name, err)
	}
	if a.Holder != "node-a" || a.Metadata != "meta-a" || a.TTL != time.Minute || a.Remaining <= 0 || a.Remaining > time.Minute {
		t.Fatalf("acquire %s = %+v; want node-a's term with its metadata, a one-minute TTL and time left", name, a)
	}
	if rec, err := st.Acquire(ctx, name, "node-b", time.Minute, ""); !errors.Is(err, store.ErrHeld) || rec.Term != a.Term {
		t.Fatalf("a rival's acquire of %s = %+v, %v; want ErrHeld naming %v", name, rec, err, a.Term)
	}
	r, err := st.Renew(ctx, a.Term, 2*time.Minute)
	if err != nil || r.Term != a.Term || r.TTL != 2*time.Minute || r.Metadata != "meta-a" || r.Remaining <= time.Minute {
		t.Fatalf("renew %v = %+v, %v; want the same term, two minutes, its metadata", a.Term, r, err)
	}
	if err := st.Release(ctx, a.Term); err != nil {
		t.Fatalf("release %v: %v", a.Term, err)
	}
	if err := st.Release(ctx, a.Term); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("release %v again = %v; want ErrNotHeld", a.Term, err)
	}
	if _, err := st.Renew(ctx, a.Term, time.Minute); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("renew of the released %v = %v; want ErrNotHeld", a.Term, err)
	}
	b, err := st.Acquire(ctx, name, "node-b", time.Minute, "")
	if err != nil || b.Token <= a.Token {
		t.Fatalf("node-b's acquire of %s after the release = %+v, %v; want a token above %d", name, b, err, a.Token)
	}
	if rec, err := st.AcquireUnqueued(ctx, name, "node-a", time.Minute, ""); !errors.Is(err, store.ErrHeld) || rec.Term != b.Term {
		t.Fatalf("a rival's fair acquire of %s = %+v, %v; want ErrHeld naming %v", name, rec, err, b.Term)
	}
	if err := st.Release(ctx, b.Term); err != nil {
		t.Fatalf("release %v: %v", b.Term, err)
	}
	if _, err := st.Enqueue(ctx, name, "node-c", time.Minute); err != nil {
		t.Fatalf("enqueue node-c for %s: %v", name, err)
	}
	if rec, err := st.AcquireUnqueued(ctx, name, "node-a", time.Minute, ""); !errors.Is(err, store.ErrQueued) {
		t.Fatalf("a fair acquire of %s with node-c's place queued = %+v, %v; want ErrQueued", name, rec, err)
	}
	if err := st.Dequeue(ctx, name, "node-c"); err != nil {
		t.Fatalf("dequeue node-c from %s: %v", name, err)
	}
	c, err := st.AcquireUnqueued(ctx, name, "node-a", time.Minute, "meta-c")
	if err != nil || c.Token != b.Token+1 || c.Holder != "node-a" || c.Metadata != "meta-c" || c.TTL != time.Minute {
		t.Fatalf("a fair acquire of %s with the queue empty = %+v, %v; want node-a's term with token %d (none spent on the refusal)", name, c, err, b.Token+1)
	}
}

// TestLeaseFunctionsCarryTheCycle: on a migrated schema, acquire, renew and
// release go through the lease functions (each replaced by one that raises
// is what the store then reports), and a store whose functions are gone (a
// database migrated by an earlier version) sends the statements themselves,
// with the same answers; Migrate puts the functions back, and the control:
// with them back, a store opened afterwards calls them again.
func TestLeaseFunctionsCarryTheCycle(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	ctx := ctxFor(t)
	cycle(t, st, "through-functions")
	held, err := st.Acquire(ctx, "held", "node-a", time.Minute, "")
	if err != nil {
		t.Fatal(err)
	}

	raisingBodies(t, schema)
	if _, err := st.Acquire(ctx, "other", "node-a", time.Minute, ""); err == nil || !strings.Contains(err.Error(), "leader_lease_acquire ran") {
		t.Fatalf("acquire with the acquire function raising = %v; want its error", err)
	}
	if _, err := st.AcquireUnqueued(ctx, "other", "node-a", time.Minute, ""); err == nil || !strings.Contains(err.Error(), "leader_lease_acqfair ran") {
		t.Fatalf("fair acquire with the fair acquire function raising = %v; want its error", err)
	}
	if _, err := st.Renew(ctx, held.Term, time.Minute); err == nil || !strings.Contains(err.Error(), "leader_lease_renew ran") {
		t.Fatalf("renew with the renew function raising = %v; want its error", err)
	}
	if err := st.Release(ctx, held.Term); err == nil || !strings.Contains(err.Error(), "leader_lease_release ran") {
		t.Fatalf("release with the release function raising = %v; want its error", err)
	}

	dropLeaseFunctions(t, schema)
	if err := st.Release(ctx, held.Term); err != nil {
		t.Fatalf("release with the functions dropped: %v; want the statement itself to release the term", err)
	}
	cycle(t, st, "without-functions")
	cycle(t, openStore(t, schema, postgres.Options{}), "without-functions-new-store")

	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := adminConn(t).QueryRow(ctx, `SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = $1 AND p.proname IN ('leader_lease_acquire', 'leader_lease_acqfair', 'leader_lease_renew', 'leader_lease_release')
		AND obj_description(p.oid, 'pg_proc') LIKE 'leasehold lease functions %'`, schema).Scan(&n); err != nil || n != 4 {
		t.Fatalf("lease functions after Migrate: %d, %v; want all 4, marked", n, err)
	}
	again := openStore(t, schema, postgres.Options{})
	raisingBodies(t, schema)
	if _, err := again.Acquire(ctx, "again", "node-a", time.Minute, ""); err == nil || !strings.Contains(err.Error(), "leader_lease_acquire ran") {
		t.Fatalf("acquire on a store opened after Migrate put the functions back = %v; want the function's error (it is called)", err)
	}
}

// TestLeaseFunctionsNotAllowed: a role that may write the lease table but
// may not execute the lease functions (EXECUTE revoked from PUBLIC) still
// runs the whole cycle, with the statements themselves.
func TestLeaseFunctionsNotAllowed(t *testing.T) {
	role, roleDSN := leaseRole(t)
	schema := migrated(t)
	grantLeasePrivileges(t, schema, role)
	if _, err := adminConn(t).Exec(ctxFor(t), strings.NewReplacer("{s}", schema).Replace(`
REVOKE EXECUTE ON FUNCTION {s}.leader_lease_acquire(text, text, float8, text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {s}.leader_lease_acqfair(text, text, float8, text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {s}.leader_lease_renew(text, text, bigint, float8, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {s}.leader_lease_release(text, text, bigint, text) FROM PUBLIC;`)); err != nil {
		t.Fatal(err)
	}
	var pe *pgconn.PgError
	if _, err := roleConn(t, roleDSN).Exec(ctxFor(t), `SELECT * FROM `+schema+`.leader_lease_acquire('x', 'y', 1000000, '', '`+postgres.LeaseFunctionsVersion+`')`); !errors.As(err, &pe) || pe.Code != "42501" {
		t.Fatalf("the role's own call of the acquire function after EXECUTE was revoked = %v; want permission denied, else the test proves nothing", err)
	}
	st, err := postgres.Open(ctxFor(t), withParams(t, roleDSN, "pool_max_conns", "2"), postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cycle(t, st, "not-allowed")
}

// TestLeaseFunctionsOfAnotherVersion: a lease function whose body is another
// version's (a rolling upgrade, where a process of another version migrated
// last) refuses this version's call before it runs anything, and the store
// sends its own statement instead. The other version's body here raises,
// so that running it would show; the control: the same body under this
// version's mark does run (and raises).
func TestLeaseFunctionsOfAnotherVersion(t *testing.T) {
	schema := migrated(t)
	ctx := ctxFor(t)
	admin := adminConn(t)
	var def string
	if err := admin.QueryRow(ctx, `SELECT pg_get_functiondef(($1 || '.leader_lease_acquire(text, text, float8, text, text)')::regprocedure)`, schema).Scan(&def); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(def, postgres.LeaseFunctionsVersion) || !strings.Contains(def, "RETURN QUERY") {
		t.Fatalf("the acquire function's definition names neither this version %s nor its statement:\n%s", postgres.LeaseFunctionsVersion, def)
	}
	stale := strings.Replace(def, "RETURN QUERY", "RAISE EXCEPTION 'test: a stale acquire ran'; RETURN QUERY", 1)
	if _, err := admin.Exec(ctx, strings.ReplaceAll(stale, postgres.LeaseFunctionsVersion, "0123456789ab")); err != nil {
		t.Fatal(err)
	}
	st := openStore(t, schema, postgres.Options{})
	cycle(t, st, "other-version")

	if _, err := admin.Exec(ctx, stale); err != nil {
		t.Fatal(err)
	}
	control := openStore(t, schema, postgres.Options{})
	if _, err := control.Acquire(ctx, "control", "node-a", time.Minute, ""); err == nil || !strings.Contains(err.Error(), "a stale acquire ran") {
		t.Fatalf("acquire through a function of this version with the raising body = %v; want its error (the control)", err)
	}
}

// TestLeaseFunctionsVersion: the version the calls name is the digest of
// the statements the lease functions wrap and of their template, so that a
// change to either cannot ship under the old version (whose functions would
// then run statements other than this build's). The control is the digest
// itself: it changes with any byte of them.
func TestLeaseFunctionsVersion(t *testing.T) {
	if got, want := postgres.LeaseFunctionsVersion, postgres.LeaseFunctionsDigest(); got != want {
		t.Fatalf("leaseFunctionsVersion is %q, but the lease statements and their template digest to %q: set it to that", got, want)
	}
}
