package main

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the q-th quantile (0 ≤ q ≤ 1) of sorted by the
// nearest-rank method: the smallest value with at least q of the sample at
// or below it. It is exact, never interpolated, so that a p99 is a latency
// some request really had. An empty sample gives 0.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if q <= 0 {
		return sorted[0]
	}
	rank := int(math.Ceil(q * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// Summary describes one sample of latencies.
type Summary struct {
	Count  int     `json:"count"`
	MeanMS float64 `json:"mean_ms"`
	P50MS  float64 `json:"p50_ms"`
	P90MS  float64 `json:"p90_ms"`
	P99MS  float64 `json:"p99_ms"`
	P999MS float64 `json:"p999_ms"`
	MaxMS  float64 `json:"max_ms"`
}

// Summarize sorts lat in place and describes it.
func Summarize(lat []time.Duration) Summary {
	slices.Sort(lat)
	s := Summary{Count: len(lat)}
	if len(lat) == 0 {
		return s
	}
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	s.MeanMS = ms(sum / time.Duration(len(lat)))
	s.P50MS = ms(Percentile(lat, 0.50))
	s.P90MS = ms(Percentile(lat, 0.90))
	s.P99MS = ms(Percentile(lat, 0.99))
	s.P999MS = ms(Percentile(lat, 0.999))
	s.MaxMS = ms(lat[len(lat)-1])
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Spread is the median of repeated measurements with their range.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// SpreadOf returns the median of vs (the mean of the middle two for an even
// count) with the smallest and largest value. NaNs are left out; with
// nothing left, every field is NaN and N is 0.
func SpreadOf(vs []float64) Spread {
	xs := make([]float64, 0, len(vs))
	for _, v := range vs {
		if !math.IsNaN(v) {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 {
		return Spread{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	slices.Sort(xs)
	n := len(xs)
	med := xs[n/2]
	if n%2 == 0 {
		med = (xs[n/2-1] + xs[n/2]) / 2
	}
	return Spread{Median: med, Min: xs[0], Max: xs[n-1], N: n}
}

// Ratio is a/b, or NaN when b is too close to zero (or negative) for the
// ratio to mean anything: an added latency at or below the measurement's
// noise has no multiple.
func Ratio(a, b, floor float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) || b < floor {
		return math.NaN()
	}
	return a / b
}

// Added returns arm − base for each repetition paired by index; the arms
// of one repetition run back to back at the same rate, so pairing them
// cancels what drifts between repetitions.
func Added(arm, base []float64) []float64 {
	n := min(len(arm), len(base))
	out := make([]float64, n)
	for i := range n {
		out[i] = arm[i] - base[i]
	}
	return out
}
