package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"sort"
	"time"
)

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// msDuration is the inverse of ms.
func msDuration(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// quantile of xs (nearest rank on a sorted copy); NaN if empty.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[i]
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func maxOf(xs []float64) float64 {
	m := math.NaN()
	for _, x := range xs {
		if math.IsNaN(m) || x > m {
			m = x
		}
	}
	return m
}

// fmtMs prints a duration in milliseconds with 2-3 significant digits.
func fmtMs(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

func fmtRate(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v >= 10000:
		return fmt.Sprintf("%.1fk", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.2fk", v/1000)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

func fmtRatio(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	if v >= 100 {
		return fmt.Sprintf("%.0fx", v)
	}
	if v >= 10 {
		return fmt.Sprintf("%.1fx", v)
	}
	return fmt.Sprintf("%.2fx", v)
}

// bootstrapResamples is how many times ratioInterval resamples.
const bootstrapResamples = 2000

// ratioInterval is a 95 % percentile-bootstrap interval of median(num) /
// median(den): each sample set is drawn again with replacement, at its own
// size, bootstrapResamples times. The generator is seeded with seed, so a
// report drawn again from the same JSON (-from) prints the same interval.
// It says how far the ratio of two p50s could move if the run were made
// again on the same machine; with few samples (5 rounds of cycles) it is
// coarse. NaN if either set is empty.
func ratioInterval(num, den []float64, seed uint64) (lo, hi float64) {
	if len(num) == 0 || len(den) == 0 {
		return math.NaN(), math.NaN()
	}
	rng := mrand.New(mrand.NewPCG(seed, 0x6c65617365686f6c)) // "leasehol"
	a := make([]float64, len(num))
	b := make([]float64, len(den))
	ratios := make([]float64, bootstrapResamples)
	for i := range ratios {
		for j := range a {
			a[j] = num[rng.IntN(len(num))]
		}
		for j := range b {
			b[j] = den[rng.IntN(len(den))]
		}
		ratios[i] = median(a) / median(b)
	}
	return quantile(ratios, 0.025), quantile(ratios, 0.975)
}
