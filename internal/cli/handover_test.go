package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// TestHandoverOutcome: what `leasehold handover` prints once the holder
// stepped down. Another holder than the named successor is named (a
// ZooKeeper reservation once lost to a third node printed only "did not
// take over within 2s", after 51 ms).
func TestHandoverOutcome(t *testing.T) {
	live := func(holder string, token int64, meta string) store.Record {
		return store.Record{Term: store.Term{Name: "job", Holder: holder, Token: token}, Remaining: time.Second, TTL: time.Second, Metadata: meta}
	}
	reservation := live("b-1", 11, "leasehold-handover-reserved from=job/a-1/10")
	if !leasehold.IsReservation(reservation) {
		t.Fatalf("the test's reservation record is not one: %+v", reservation)
	}
	cases := []struct {
		what string
		to   string
		res  leasehold.HandoverResult
		want string
	}{
		{"successor took over", "b-1", leasehold.HandoverResult{Next: live("b-1", 12, ""), TookOver: true, TookOverAfter: 40 * time.Millisecond},
			"job: b-1 took over with token 12 after 40ms"},
		{"another node took over", "b-1", leasehold.HandoverResult{Next: live("c-1", 12, "")},
			"job: b-1 did not take over within 2s; c-1 took over with token 12"},
		{"successor late, reservation live", "b-1", leasehold.HandoverResult{Next: reservation},
			"job: b-1 did not take over within 2s; its reservation expires on its own, then any node may take the lease"},
		{"successor late, lease free", "b-1", leasehold.HandoverResult{Next: store.Record{Term: store.Term{Name: "job", Token: 11}}},
			"job: b-1 did not take over within 2s"},
		{"no successor named, held", "", leasehold.HandoverResult{Next: live("c-1", 12, "")},
			"job: now held by c-1 with token 12"},
		{"no successor named, free", "", leasehold.HandoverResult{Next: store.Record{Term: store.Term{Name: "job", Token: 10}}},
			"job: free (last token 10)"},
	}
	for _, c := range cases {
		got := handoverOutcome("job", c.to, 2*time.Second, c.res)
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: printed %q, want %q", c.what, got, c.want)
		}
	}
}
