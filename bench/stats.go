package bench

import (
	"math"
	"sort"
	"time"
)

// Stats summarise one variant's samples.
type Stats struct {
	N      int     `json:"n"`
	Min    float64 `json:"min_ms"`
	Median float64 `json:"median_ms"`
	P90    float64 `json:"p90_ms"`
	Max    float64 `json:"max_ms"`
}

// summarize computes Stats over samples in milliseconds.
func summarize(samples []float64) Stats {
	if len(samples) == 0 {
		return Stats{}
	}
	s := append([]float64(nil), samples...)
	sort.Float64s(s)
	return Stats{N: len(s), Min: s[0], Median: quantile(s, 0.5), P90: quantile(s, 0.9), Max: s[len(s)-1]}
}

// quantile is the q-quantile of sorted s, interpolated linearly between ranks.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	frac := pos - float64(lo)
	return sorted[lo]*(1-frac) + sorted[hi]*frac
}

func median(s []float64) float64 {
	c := append([]float64(nil), s...)
	sort.Float64s(c)
	return quantile(c, 0.5)
}

// pairRatio is the median over rounds of a[i]/b[i]: both were measured in the same
// round, one right after the other, so a load change between rounds cancels out.
func pairRatio(a, b []float64) float64 {
	var r []float64
	for i := range a {
		if i < len(b) && b[i] > 0 && !math.IsNaN(a[i]) && !math.IsNaN(b[i]) {
			r = append(r, a[i]/b[i])
		}
	}
	if len(r) == 0 {
		return math.NaN()
	}
	return median(r)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
