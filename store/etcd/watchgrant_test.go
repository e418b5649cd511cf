package etcd

import (
	"testing"

	"github.com/leasehold/leasehold/store/etcd/internal/etcdapi"
)

// TestPlaceProofRules: the bookkeeping behind the grant on the watch's event
// (watchgrant.go), without a server. A place at revision 10, read at
// revision 20 with keys a and b below it, is proven lowest only by a watch
// that reports every change after 20 and has applied none after it, once
// that watch has seen a and b deleted after 20 and nothing happen to the
// place's own key; a proof serves one grant, and a watch that ends keeps
// the proofs it completed and drops the rest. Each case fails if its rule
// is dropped (TestQueueLowestOnlyWhenNothingIsBelow has the same rules
// against a server, with controls by hand).
func TestPlaceProofRules(t *testing.T) {
	const name, pfx = "job", "p/job/"
	id := placeID{name, "w"}
	pl := place{holder: "w", key: pfx + "w", rev: 10}
	v := queueView{contenders: []mvccKV{{key: []byte(pfx + "a"), create: 5}, {key: []byte(pfx + "b"), create: 7}, {key: []byte(pfx + "w"), create: 10}, {key: []byte(pfx + "later"), create: 15}}}
	del := func(key string, rev int64) etcdapi.Event {
		return etcdapi.Event{Key: []byte(pfx + key), Delete: true, Revision: rev}
	}
	put := func(key string, rev int64) etcdapi.Event {
		return etcdapi.Event{Key: []byte(pfx + key), Revision: rev}
	}
	for _, c := range []struct {
		what   string
		from   int64           // the watch's
		before []etcdapi.Event // applied before the read's proof starts
		evs    []etcdapi.Event // applied after
		end    bool            // the watch ends before the grant
		want   bool            // proven lowest
	}{
		{what: "both below deleted", from: 18, evs: []etcdapi.Event{del("a", 21), del("b", 22)}, want: true},
		{what: "one below deleted", from: 18, evs: []etcdapi.Event{del("a", 21)}},
		{what: "a key after the place deleted", from: 18, evs: []etcdapi.Event{del("a", 21), del("later", 22)}},
		{what: "a put of a key below", from: 18, evs: []etcdapi.Event{del("a", 21), put("b", 22)}},
		{what: "a deletion at or before the read", from: 18, evs: []etcdapi.Event{del("a", 21), del("b", 20)}},
		{what: "the place's key put", from: 18, evs: []etcdapi.Event{put("w", 21), del("a", 22), del("b", 23)}},
		{what: "the place's key deleted after the proof", from: 18, evs: []etcdapi.Event{del("a", 21), del("b", 22), del("w", 23)}},
		{what: "a watch made after the read", from: 21, evs: []etcdapi.Event{del("a", 22), del("b", 23)}},
		{what: "a watch that applied a change after the read", from: 18, before: []etcdapi.Event{put("x", 21)}, evs: []etcdapi.Event{del("a", 22), del("b", 23)}},
		{what: "a watch that applied changes up to the read", from: 18, before: []etcdapi.Event{put("x", 19), put("y", 20)}, evs: []etcdapi.Event{del("a", 22), del("b", 23)}, want: true},
		{what: "proven, then the watch ended", from: 18, evs: []etcdapi.Event{del("a", 21), del("b", 22)}, end: true, want: true},
		{what: "pending when the watch ended", from: 18, evs: []etcdapi.Event{del("a", 21)}, end: true},
	} {
		s := &Store{}
		w := s.addWatch(name, c.from)
		s.followEvents(w, c.before)
		s.followBelow(name, id, pl, 20, v)
		s.followEvents(w, c.evs)
		if c.end {
			s.endWatch(name, w)
			s.followEvents(w, []etcdapi.Event{del("b", 30)}) // a late response: nothing left to follow
		}
		if got := s.provenLowest(id, pl.rev); got != c.want {
			t.Errorf("%s: proven lowest = %v, want %v", c.what, got, c.want)
		}
		if c.want && s.provenLowest(id, pl.rev) {
			t.Errorf("%s: the proof served a second grant", c.what)
		}
	}
}
