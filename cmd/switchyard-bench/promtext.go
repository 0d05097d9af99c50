package main

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// histogram is one series of a Prometheus histogram as exposed in text:
// cumulative bucket counts by upper bound, the sum and the count.
type histogram struct {
	Bounds []float64 // ascending, +Inf last
	Counts []float64 // cumulative
	Sum    float64
	Count  float64
}

// parseHistogram finds the histogram name whose labels include every
// label="value" pair in match.
func parseHistogram(exposition []byte, name string, match ...string) (histogram, bool) {
	var h histogram
	found := false
	type bucket struct{ le, n float64 }
	var buckets []bucket
	for line := range strings.SplitSeq(string(exposition), "\n") {
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		var kind string
		switch {
		case strings.HasPrefix(rest, "_bucket{"):
			kind = "bucket"
		case strings.HasPrefix(rest, "_sum"):
			kind = "sum"
		case strings.HasPrefix(rest, "_count"):
			kind = "count"
		default:
			continue
		}
		open, close := strings.IndexByte(rest, '{'), strings.LastIndexByte(rest, '}')
		labels := ""
		if open >= 0 && close > open {
			labels = rest[open+1 : close]
		}
		ok := true
		for _, m := range match {
			if !strings.Contains(labels, m) {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		after := rest[len("_"+kind):]
		if close >= 0 {
			after = rest[close+1:]
		}
		fields := strings.Fields(after)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		found = true
		switch kind {
		case "sum":
			h.Sum = v
		case "count":
			h.Count = v
		case "bucket":
			i := strings.Index(labels, `le="`)
			if i < 0 {
				continue
			}
			raw := labels[i+4:]
			raw = raw[:strings.IndexByte(raw, '"')]
			le, err := strconv.ParseFloat(raw, 64)
			if raw == "+Inf" {
				le, err = math.Inf(1), nil
			}
			if err == nil {
				buckets = append(buckets, bucket{le, v})
			}
		}
	}
	slices.SortFunc(buckets, func(a, b bucket) int {
		switch {
		case a.le < b.le:
			return -1
		case a.le > b.le:
			return 1
		}
		return 0
	})
	for _, b := range buckets {
		h.Bounds = append(h.Bounds, b.le)
		h.Counts = append(h.Counts, b.n)
	}
	return h, found
}

// histogramDelta is what a histogram gained over a run.
type histogramDelta struct {
	Count  float64 `json:"count"`
	MeanMS float64 `json:"mean_ms"`
	// P50 and P99 as the upper bound of the bucket the quantile falls in:
	// an upper limit, as coarse as the buckets.
	P50UpperMS float64 `json:"p50_upper_ms"`
	P99UpperMS float64 `json:"p99_upper_ms"`
}

// MarshalJSON writes a quantile beyond the last finite bucket (+Inf) as
// null, which encoding/json would refuse.
func (d histogramDelta) MarshalJSON() ([]byte, error) {
	f := func(v float64) any {
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return nil
		}
		return v
	}
	return json.Marshal(map[string]any{"count": d.Count, "mean_ms": f(d.MeanMS), "p50_upper_ms": f(d.P50UpperMS), "p99_upper_ms": f(d.P99UpperMS)})
}

// delta subtracts before from after (the same series, read twice).
func (after histogram) delta(before histogram) histogramDelta {
	d := histogramDelta{Count: after.Count - before.Count}
	if d.Count <= 0 {
		return histogramDelta{}
	}
	d.MeanMS = (after.Sum - before.Sum) / d.Count * 1000
	counts := make([]float64, len(after.Counts))
	for i := range after.Counts {
		counts[i] = after.Counts[i]
		if i < len(before.Counts) && len(before.Bounds) == len(after.Bounds) {
			counts[i] -= before.Counts[i]
		}
	}
	upper := func(q float64) float64 {
		want := q * d.Count
		for i, c := range counts {
			if c >= want {
				return after.Bounds[i] * 1000
			}
		}
		return math.Inf(1)
	}
	d.P50UpperMS, d.P99UpperMS = upper(0.5), upper(0.99)
	return d
}

// scrape reads a /metrics page.
func scrape(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}
