package leasestats

import (
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// WriteText writes a family's labels in the order Family.Labels gives, and
// Prometheus writes them sorted by name: every family's labels are sorted.
func TestFamilyLabelsSorted(t *testing.T) {
	for _, f := range Families {
		if !sort.StringsAreSorted(f.Labels) || f.Labels[0] != "lease" {
			t.Errorf("%s: labels %q, want them sorted, lease first", f.Name, f.Labels)
		}
	}
	if len(Families) != StoreErrors+1 {
		t.Errorf("%d families, want %d (one per index constant)", len(Families), StoreErrors+1)
	}
}

// A renewal latency is counted in the first bucket whose bound is at or
// above it, as Prometheus' histograms count; one above every bound only in
// the count (the implicit +Inf bucket). The buckets are cumulative.
func TestRenewLatencyBuckets(t *testing.T) {
	s := New(nil, []float64{0.001, 0.01})
	term := store.Term{Name: "a", Holder: "h", Token: 1}
	for _, d := range []time.Duration{time.Millisecond, 2 * time.Millisecond, time.Second} {
		s.Observe(leasehold.Event{Kind: leasehold.EventRenewed, Name: "a", Term: term, Latency: d})
	}
	h := s.Samples()[RenewLatency][0]
	if want := []uint64{1, 2}; !slices.Equal(h.Counts, want) || h.Count != 3 || h.Sum != 1.003 {
		t.Errorf("histogram: buckets %v count %d sum %v; want %v, 3, 1.003", h.Counts, h.Count, h.Sum, want)
	}
}

// A lease's series exist from Track on, at 0, and come sorted by lease.
func TestSamplesSortedAndTracked(t *testing.T) {
	s := New(nil, nil)
	for _, n := range []string{"b", "c", "a"} {
		s.Track(n)
	}
	all := s.Samples()
	for i, ss := range all {
		var leases []string
		for _, x := range ss {
			leases = append(leases, x.Labels[0])
		}
		want := []string{"a", "b", "c"}
		switch i {
		case TermsEnded:
			want = repeatEach(want, len(Reasons))
		case AcquireAttempts:
			want = repeatEach(want, len(Results))
		case StoreErrors:
			want = repeatEach(want, len(Ops))
		}
		if !slices.Equal(leases, want) {
			t.Errorf("%s: leases %q, want %q", Families[i].Name, leases, want)
		}
	}
	if v := all[AcquireAttempts][0]; v.Value != 0 || v.Labels[1] != "error" {
		t.Errorf("first acquire attempts series of a: %+v, want result error (sorted) at 0", v)
	}
}

func repeatEach(xs []string, n int) []string {
	var out []string
	for _, x := range xs {
		for range n {
			out = append(out, x)
		}
	}
	return out
}
