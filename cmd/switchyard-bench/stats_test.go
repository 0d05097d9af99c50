package main

import (
	"math"
	"testing"
	"time"
)

func msd(v ...float64) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x * float64(time.Millisecond))
	}
	return out
}

func TestPercentileNearestRank(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond // 1 … 100 ms
	}
	for _, tc := range []struct {
		name   string
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one value", msd(7), 0.99, 7 * time.Millisecond},
		{"median of odd count", msd(1, 2, 3, 4, 5), 0.5, 3 * time.Millisecond},
		{"median of even count is the lower middle", msd(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		{"p99 of 100 values is the 99th", hundred, 0.99, 99 * time.Millisecond},
		{"p50 of 100 values is the 50th", hundred, 0.50, 50 * time.Millisecond},
		{"p999 of 100 values is the largest", hundred, 0.999, 100 * time.Millisecond},
		{"q 0 is the smallest", hundred, 0, time.Millisecond},
		{"q 1 is the largest", hundred, 1, 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentile(tc.sorted, tc.q); got != tc.want {
				t.Errorf("Percentile(q=%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
}

func TestSummarizeSortsAndDescribes(t *testing.T) {
	s := Summarize(msd(5, 1, 4, 2, 3))
	want := Summary{Count: 5, MeanMS: 3, P50MS: 3, P90MS: 5, P99MS: 5, P999MS: 5, MaxMS: 5}
	if s != want {
		t.Errorf("Summarize = %+v, want %+v", s, want)
	}
	if z := Summarize(nil); z != (Summary{}) {
		t.Errorf("Summarize(nil) = %+v, want zero", z)
	}
}

func TestSpreadOf(t *testing.T) {
	for _, tc := range []struct {
		name          string
		in            []float64
		med, min, max float64
		n             int
	}{
		{"odd", []float64{3, 1, 2}, 2, 1, 3, 3},
		{"even takes the mean of the middle two", []float64{4, 1, 2, 3}, 2.5, 1, 4, 4},
		{"NaN left out", []float64{math.NaN(), 5, 1}, 3, 1, 5, 2},
		{"one", []float64{-0.5}, -0.5, -0.5, -0.5, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := SpreadOf(tc.in)
			if s.Median != tc.med || s.Min != tc.min || s.Max != tc.max || s.N != tc.n {
				t.Errorf("SpreadOf(%v) = %+v", tc.in, s)
			}
		})
	}
	if s := SpreadOf([]float64{math.NaN()}); !math.IsNaN(s.Median) || s.N != 0 {
		t.Errorf("SpreadOf(NaN) = %+v, want NaN median and N 0", s)
	}
}

func TestRatioAndAdded(t *testing.T) {
	if r := Ratio(3, 1.5, 0.01); r != 2 {
		t.Errorf("Ratio(3, 1.5) = %v, want 2", r)
	}
	for _, b := range []float64{0, 0.005, -1, math.NaN()} {
		if r := Ratio(1, b, 0.01); !math.IsNaN(r) {
			t.Errorf("Ratio(1, %v) = %v, want NaN: nothing to compare with", b, r)
		}
	}
	got := Added([]float64{11, 12, 13}, []float64{10, 10})
	if len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Errorf("Added pairs by index over the shorter: got %v", got)
	}
}

func TestLowerBy(t *testing.T) {
	if v := lowerBy(70, 100); math.Abs(v-0.3) > 1e-9 {
		t.Errorf("lowerBy(70, 100) = %v, want 0.3", v)
	}
	if v := lowerBy(1, 0); !math.IsNaN(v) {
		t.Errorf("lowerBy(1, 0) = %v, want NaN", v)
	}
}
