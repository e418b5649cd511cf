package main

import (
	"bytes"
	mrand "math/rand/v2"
	"strings"
	"testing"
)

// spreadOf is n samples evenly from lo to hi.
func spreadOf(n int, lo, hi float64) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = lo + (hi-lo)*float64(i)/float64(n-1)
	}
	return xs
}

// TestRatioTargetSpread: a check whose ratio of p50s is far from its limit
// is decided; one whose samples scatter across the limit is within the
// run's spread, whichever side its p50s fell on; the interval is the same
// every time for the same samples.
func TestRatioTargetSpread(t *testing.T) {
	floor := spreadOf(20, 0.95, 1.05)
	cases := []struct {
		name       string
		rt         ratioTarget
		withSpread bool
	}{
		{"far below the limit", ratioTarget{num: spreadOf(20, 1.15, 1.25), den: floor, limit: 1.5}, false},
		{"far above the limit", ratioTarget{num: spreadOf(20, 1.9, 2.1), den: floor, limit: 1.5}, false},
		{"scattered across, p50 below", ratioTarget{num: spreadOf(20, 1.0, 1.9), den: floor, limit: 1.5}, true},
		{"scattered across, p50 above", ratioTarget{num: spreadOf(20, 1.1, 2.0), den: floor, limit: 1.5}, true},
		{"against a peer far slower", ratioTarget{num: spreadOf(20, 3, 3.2), den: floor, limit: 1}, false},
		{"against a peer far faster", ratioTarget{num: spreadOf(20, 0.5, 0.6), den: floor, limit: 1}, false},
		{"against a peer level with it", ratioTarget{num: spreadOf(20, 0.9, 1.12), den: floor, limit: 1}, true},
	}
	for _, c := range cases {
		spread := c.rt.spread(c.name)
		if (spread != "") != c.withSpread {
			t.Errorf("%s: spread %q; want one: %v", c.name, spread, c.withSpread)
		}
		if again := c.rt.spread(c.name); again != spread {
			t.Errorf("%s: the interval changed on a second look at the same samples: %q then %q", c.name, spread, again)
		}
	}
}

// TestReportCountsSpread: the report's summary counts the checks within the
// run's spread apart from the rest, and marks each of them.
func TestReportCountsSpread(t *testing.T) {
	floor := spreadOf(20, 0.95, 1.05)
	r := &Results{Samples: map[string]map[string][]float64{
		scHandoff: {
			"redis/" + floorName:      floor,
			"redis/leasehold":         spreadOf(20, 1.15, 1.25), // met, decided
			"redis/leasehold (fair)":  spreadOf(20, 1.1, 2.0),   // missed, within spread
			"redis/leasehold elector": spreadOf(20, 1.9, 2.1),   // missed, decided
			"redis/redislock":         spreadOf(20, 50, 60),
		},
	}}
	var out bytes.Buffer
	report(&out, r, options{})
	text := out.String()
	if !strings.Contains(text, "4 of 6 targets met") {
		t.Fatalf("no summary of 4 of 6 targets met:\n%s", text)
	}
	if !strings.Contains(text, "1 of the 6 are within the run's spread (0 met, 1 missed at the p50s)") {
		t.Errorf("summary does not count the one check within the run's spread:\n%s", text)
	}
	marked := 0
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, "within the run's spread: leasehold / floor") {
			marked++
			if !strings.Contains(line, "redis leasehold (fair)") {
				t.Errorf("marked the wrong check: %s", line)
			}
		}
	}
	if marked != 1 {
		t.Errorf("%d checks marked within the run's spread, want 1:\n%s", marked, text)
	}
}

// TestSortKeysOrdersEveryKey: rows come out in one order whatever order
// they went in, stores that storeOrder does not name included (their
// libraries share names: mysql/leasehold, nats/leasehold, ...).
func TestSortKeysOrdersEveryKey(t *testing.T) {
	keys := []string{"zookeeper/leasehold", "mysql/leasehold", "nats/leasehold", "redis/leasehold",
		"mysql/" + floorName, "nats/" + floorName, "zookeeper/zk.Lock", "mysql/GET_LOCK", "postgres/leasehold"}
	want := append([]string(nil), keys...)
	sortKeys(want)
	for i := range 50 {
		got := append([]string(nil), keys...)
		mrand.Shuffle(len(got), func(a, b int) { got[a], got[b] = got[b], got[a] })
		sortKeys(got)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("shuffle %d sorted to %v, another to %v", i, got, want)
		}
	}
}
