package postgres_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// TestGrantRecordMatchesGet: the acquire statement reports a grant from
// fewer expressions than Get's (grantCols, not recordCols). Every field but
// the time remaining must be what Get reads from the row right after, and the
// time remaining no more than Get's plus the time between the two, on each
// way a grant is made: a new row, a released row, the holder's own live term
// taken again with a shorter ttl (its expiry is kept, so more than the new
// ttl remains), a grant whose epoch the guard lifts above the high-water
// mark, and a Transfer.
func TestGrantRecordMatchesGet(t *testing.T) {
	schema := migrated(t)
	st := openStore(t, schema, postgres.Options{})
	admin := adminConn(t)
	ctx := ctxFor(t)
	check := func(what string, got store.Record, sent time.Time) {
		t.Helper()
		g, err := st.Get(ctx, got.Name)
		if err != nil {
			t.Fatalf("%s: get: %v", what, err)
		}
		if got.Term != g.Term || got.TTL != g.TTL || got.Metadata != g.Metadata {
			t.Errorf("%s: acquire reported %v ttl %v metadata %q, get read %v ttl %v metadata %q", what, got.Term, got.TTL, got.Metadata, g.Term, g.TTL, g.Metadata)
		}
		if d := got.Remaining - g.Remaining; d < 0 || d > time.Since(sent) {
			t.Errorf("%s: remaining %v reported, %v read %v later", what, got.Remaining, g.Remaining, time.Since(sent))
		}
	}
	acq := func(what, name, holder string, ttl time.Duration, meta string) store.Record {
		t.Helper()
		sent := time.Now()
		rec, err := st.Acquire(ctx, name, holder, ttl, meta)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		check(what, rec, sent)
		return rec
	}
	a := acq("new row", "g", "node-a", time.Minute, "meta-a")
	if err := st.Release(ctx, a.Term); err != nil {
		t.Fatal(err)
	}
	b := acq("released row", "g", "node-b", 30*time.Second, "")
	again := acq("own live term, shorter ttl", "g", "node-b", 10*time.Second, "again")
	if again.Remaining <= 10*time.Second || again.TTL != 10*time.Second {
		t.Errorf("own term taken again with a 10 s ttl: remaining %v, ttl %v; want the 30 s expiry kept and ttl 10 s", again.Remaining, again.TTL)
	}
	if err := st.Release(ctx, again.Term); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `UPDATE `+schema+`.leader_lease_epochs SET epoch = epoch + 100 WHERE name = 'g'`); err != nil {
		t.Fatal(err)
	}
	lifted := acq("epoch lifted by the guard", "g", "node-c", time.Minute, "lifted")
	if lifted.Token <= b.Token+100 {
		t.Errorf("token %d after the high-water mark was raised past %d", lifted.Token, b.Token+100)
	}
	tr, ok := store.Store(st).(store.Transferer)
	if !ok {
		t.Fatal("the store is not a store.Transferer")
	}
	sent := time.Now()
	to, err := tr.Transfer(ctx, lifted.Term, "node-d", 20*time.Second, "handed")
	if err != nil {
		t.Fatal(err)
	}
	check("transfer", to, sent)
}
