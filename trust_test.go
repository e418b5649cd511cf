package leasehold

import (
	"testing"
	"time"
)

// The one copy of the safety arithmetic, pinned. Default timings: lease 15s,
// renew deadline 10s, renew every 5s, retry every 2s; WindDown 1s here.
func TestTrustTable(t *testing.T) {
	tm := Timings{WindDown: time.Second}.WithDefaults()
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type step struct {
		op   string // "renewed" or "failed"
		sent time.Duration
	}
	cases := []struct {
		name          string
		steps         []step
		safeUntil     time.Duration
		nextRenew     time.Duration
		trustedAt     time.Duration // trusted just before
		untrustedFrom time.Duration // and not from here on
	}{
		{"granted: safeUntil from the send time", nil, 10 * time.Second, 5 * time.Second, 8*time.Second + 999*time.Millisecond, 9 * time.Second},
		{"renewed: counts from the renewal's send time", []step{{"renewed", 5 * time.Second}}, 15 * time.Second, 10 * time.Second, 13 * time.Second, 14 * time.Second},
		{"a late answer to an earlier renewal never shortens it", []step{{"renewed", 6 * time.Second}, {"renewed", 5 * time.Second}}, 16 * time.Second, 10 * time.Second, 14 * time.Second, 15 * time.Second},
		{"failed: retried a retry period after it was sent, safeUntil unchanged", []step{{"failed", 5 * time.Second}}, 10 * time.Second, 7 * time.Second, 8 * time.Second, 9 * time.Second},
		{"failed then renewed", []step{{"failed", 5 * time.Second}, {"renewed", 7 * time.Second}}, 17 * time.Second, 12 * time.Second, 15 * time.Second, 16 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := granted(tm, t0, tm.LeaseDuration)
			for _, s := range c.steps {
				switch s.op {
				case "renewed":
					tr.renewed(tm, at(s.sent))
				case "failed":
					tr.renewFailed(tm, at(s.sent))
				}
			}
			if got := tr.safeUntil.Sub(t0); got != c.safeUntil {
				t.Errorf("safeUntil = +%v, want +%v", got, c.safeUntil)
			}
			if got := tr.nextRenew.Sub(t0); got != c.nextRenew {
				t.Errorf("nextRenew = +%v, want +%v", got, c.nextRenew)
			}
			if got := tr.cancelAt(tm).Sub(t0); got != c.safeUntil-tm.WindDown {
				t.Errorf("cancelAt = +%v, want safeUntil - WindDown = +%v", got, c.safeUntil-tm.WindDown)
			}
			if !tr.trusted(tm, at(c.trustedAt)) {
				t.Errorf("not trusted at +%v", c.trustedAt)
			}
			if tr.trusted(tm, at(c.untrustedFrom)) {
				t.Errorf("still trusted at +%v (cancelAt)", c.untrustedFrom)
			}
		})
	}
}

// The hold cap (Config.MaxHold) ends trust at the acquire's send time plus
// MaxHold, whatever renewals say; without it, renewals extend trust.
func TestTrustHoldCap(t *testing.T) {
	tm := Timings{WindDown: time.Second}.WithDefaults()
	t0 := time.Unix(1000, 0)
	tr := granted(tm, t0, tm.LeaseDuration)
	tr.capHold(t0, 12*time.Second)
	if got := tr.cancelAt(tm).Sub(t0); got != 9*time.Second || tr.holdCapped(tm) {
		t.Fatalf("before any renewal: cancelAt +%v capped %v, want +9s (safeUntil - WindDown), not capped", got, tr.holdCapped(tm))
	}
	tr.renewed(tm, t0.Add(5*time.Second))
	if got := tr.cancelAt(tm).Sub(t0); got != 12*time.Second || !tr.holdCapped(tm) {
		t.Fatalf("after a renewal: cancelAt +%v capped %v, want +12s (the cap)", got, tr.holdCapped(tm))
	}
	if tr.trusted(tm, t0.Add(12*time.Second)) || !tr.trusted(tm, t0.Add(12*time.Second-time.Nanosecond)) {
		t.Error("trust does not end exactly at the cap")
	}
	// Negative control: no cap, and the same renewal extends trust past it.
	free := granted(tm, t0, tm.LeaseDuration)
	free.capHold(t0, 0)
	free.renewed(tm, t0.Add(5*time.Second))
	if got := free.cancelAt(tm).Sub(t0); got != 14*time.Second || free.holdCapped(tm) {
		t.Fatalf("without a cap: cancelAt +%v, want +14s", got)
	}
}

// A grant the store says is shorter than LeaseDuration (store.Record.Remaining)
// loses its shortfall from safeUntil and from the next renewal, counted from
// the send time; one longer than LeaseDuration gains nothing; one shorter
// than the margin LeaseDuration - RenewDeadline is not trusted at all.
func TestTrustShortGrant(t *testing.T) {
	tm := Timings{WindDown: time.Second}.WithDefaults()
	t0 := time.Unix(1000, 0)
	cases := []struct {
		remaining            time.Duration
		safeUntil, nextRenew time.Duration
	}{
		{tm.LeaseDuration, 10 * time.Second, 5 * time.Second},             // the full lease: as before
		{tm.LeaseDuration + time.Hour, 10 * time.Second, 5 * time.Second}, // never counts from the answer
		{13 * time.Second, 8 * time.Second, 3 * time.Second},              // 2 s short
		{8 * time.Second, 3 * time.Second, 0},                             // renew at once
		{5 * time.Second, 0, 0},                                           // within the margin: no trust
		{0, 0, 0},
	}
	for _, c := range cases {
		tr := granted(tm, t0, c.remaining)
		if got := tr.safeUntil.Sub(t0); got != c.safeUntil {
			t.Errorf("remaining %v: safeUntil = +%v, want +%v", c.remaining, got, c.safeUntil)
		}
		if got := tr.nextRenew.Sub(t0); got != c.nextRenew {
			t.Errorf("remaining %v: nextRenew = +%v, want +%v", c.remaining, got, c.nextRenew)
		}
		if c.safeUntil == 0 && tr.trusted(tm, t0) {
			t.Errorf("remaining %v: trusted at the send time", c.remaining)
		}
	}
}
