package main

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Report is everything one run measured; it is written as the raw JSON
// and rendered as BENCHMARKS.md.
type Report struct {
	Schema   int       `json:"schema"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Command  string    `json:"command"`
	Machine  Machine   `json:"machine"`
	Settings Settings  `json:"settings"`
	RawJSON  string    `json:"-"` // the raw JSON's path, for the report
	Phases   []Phase   `json:"phases"`
	Notes    []string  `json:"notes,omitempty"`
	// Analysis is what the figures say where a target was missed; it is
	// derived from the rest and recomputed when a report is rendered again.
	Analysis  []string           `json:"analysis,omitempty"`
	Targets   []Target           `json:"targets"`
	Overhead  []OverheadPoint    `json:"overhead,omitempty"`
	Sustained []SustainedRate    `json:"sustained,omitempty"`
	Ablation  *AblationResult    `json:"ablation,omitempty"`
	Streaming *StreamingResult   `json:"streaming,omitempty"`
	Heap      []HeapPoint        `json:"heap,omitempty"`
	Profile   *ProfileResult     `json:"profile,omitempty"`
	Routing   *RoutingResult     `json:"routing,omitempty"`
	GoBench   []GoBench          `json:"go_bench,omitempty"`
	Errors    map[string]string  `json:"errors,omitempty"` // phase → why it failed
	Arms      map[string]ArmNote `json:"arms,omitempty"`
}

// ArmNote says how an arm reached the upstream.
type ArmNote struct {
	Path string `json:"path"`
}

// Phase is how long a phase took.
type Phase struct {
	Name     string  `json:"name"`
	Seconds  float64 `json:"seconds"`
	LoadAvg  string  `json:"load_average_after"`
	Finished bool    `json:"finished"`
}

// Settings are the run's parameters as the report states them.
type Settings struct {
	Rates          []int     `json:"rates"`
	LatenciesMS    []float64 `json:"upstream_latencies_ms"`
	Reps           int       `json:"reps"`
	DurationS      float64   `json:"duration_s"`
	WarmupS        float64   `json:"warmup_s"`
	ResponseTokens int       `json:"response_tokens"`
	StreamRate     int       `json:"stream_rate"`
	StreamSeconds  float64   `json:"stream_duration_s"`
	Streams        []int     `json:"streams"`
	ProfileRate    int       `json:"profile_rate"`
	Seed           uint64    `json:"seed"`
}

// SustainedRate is the highest rate an arm sustained at one upstream
// latency; AtTop is set when that is the highest rate measured, so the
// real limit may lie above it.
type SustainedRate struct {
	UpstreamLatencyMS float64 `json:"upstream_latency_ms"`
	Arm               string  `json:"arm"`
	Rate              int     `json:"rate"`
	AtTop             bool    `json:"at_top"`
}

// Target is one of the goals the issue sets, with what was measured.
// They are recorded, never asserted.
type Target struct {
	Name     string `json:"name"`
	Goal     string `json:"goal"`
	Measured string `json:"measured"`
	// Status is "met", "missed" or "not measured".
	Status string `json:"status"`
	Miss   string `json:"miss,omitempty"` // by how much
}

const (
	statusMet         = "met"
	statusMissed      = "missed"
	statusNotMeasured = "not measured"
)

// MarshalJSON writes NaN (a ratio with nothing to divide by, a spread of
// no values) as null, which encoding/json would refuse.
func (s Spread) MarshalJSON() ([]byte, error) {
	f := func(v float64) any {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return v
	}
	return json.Marshal(struct {
		Median any `json:"median"`
		Min    any `json:"min"`
		Max    any `json:"max"`
		N      int `json:"n"`
	}{f(s.Median), f(s.Min), f(s.Max), s.N})
}

// UnmarshalJSON reads what MarshalJSON wrote, null as NaN.
func (s *Spread) UnmarshalJSON(b []byte) error {
	var v struct {
		Median, Min, Max *float64
		N                int
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	g := func(p *float64) float64 {
		if p == nil {
			return math.NaN()
		}
		return *p
	}
	*s = Spread{Median: g(v.Median), Min: g(v.Min), Max: g(v.Max), N: v.N}
	return nil
}

// MarshalJSON writes NaN ratios as null.
func (p OverheadPoint) MarshalJSON() ([]byte, error) {
	type plain OverheadPoint
	nan := func(v float64) *float64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return &v
	}
	return json.Marshal(struct {
		plain
		RatioP50 *float64 `json:"ratio_to_nginx_p50"`
		RatioP99 *float64 `json:"ratio_to_nginx_p99"`
	}{plain(p), nan(p.RatioP50), nan(p.RatioP99)})
}

// derive computes everything the report states from its measurements:
// the sustained rates, the targets and the analysis.
func (r *Report) derive() {
	for i := range r.Overhead {
		summarizePoint(&r.Overhead[i])
	}
	if r.Streaming != nil {
		summarizeStreaming(r.Streaming)
	}
	r.Sustained = computeSustained(r.Overhead)
	r.Targets = evaluateTargets(r)
	r.Analysis = analysis(r)
}

// evaluateTargets compares the report's figures with the goals.
func evaluateTargets(r *Report) []Target {
	var ts []Target
	const targetRate = 2000
	for _, lat := range latencies(r.Overhead) {
		t := Target{Name: fmt.Sprintf("added p99 at %d rps, upstream %s", targetRate, fmtLatency(lat)), Goal: "≤ 1 ms, every feature on"}
		if p, ok := pointAt(r.Overhead, lat, targetRate); ok {
			a := p.Arms[ArmSwitchyard]
			v := a.AddedP99MS.Median
			t.Measured = fmt.Sprintf("%s ms (p50 %s ms)", fmtF(v, 2), fmtF(a.AddedP50MS.Median, 2))
			t.Status, t.Miss = judge(v <= 1, fmt.Sprintf("by %s ms", fmtF(v-1, 2)))
		} else {
			t.Status = statusNotMeasured
		}
		ts = append(ts, t)
	}
	for _, lat := range latencies(r.Overhead) {
		t := Target{Name: "added latency vs nginx's, upstream " + fmtLatency(lat), Goal: "≤ 2× nginx's added latency (p50 and p99), at every rate nginx sustains"}
		worst, worstAt, worstQ, n := math.Inf(-1), 0, "", 0
		lowest := ""
		for _, p := range r.Overhead {
			if p.UpstreamLatencyMS != lat || !p.Arms[ArmNginx].Sustained {
				continue
			}
			if lowest == "" {
				lowest = fmt.Sprintf("at %d rps %s× (p50), %s× (p99)", p.Rate, fmtF(p.RatioP50, 1), fmtF(p.RatioP99, 1))
			}
			for _, q := range []struct {
				name string
				v    float64
			}{{"p50", p.RatioP50}, {"p99", p.RatioP99}} {
				if math.IsNaN(q.v) {
					continue
				}
				n++
				if q.v > worst {
					worst, worstAt, worstQ = q.v, p.Rate, q.name
				}
			}
		}
		if n == 0 {
			t.Status = statusNotMeasured
			t.Measured = "no rate where nginx sustained and both added latencies were above noise"
		} else {
			t.Measured = fmt.Sprintf("%s; worst %s× (%s at %d rps)", lowest, fmtF(worst, 1), worstQ, worstAt)
			t.Status, t.Miss = judge(worst <= 2, fmt.Sprintf("by %s× at worst (%s× against 2×)", fmtF(worst-2, 1), fmtF(worst, 1)))
		}
		ts = append(ts, t)
	}
	for _, lat := range latencies(r.Overhead) {
		t := Target{Name: "highest sustained rate, upstream " + fmtLatency(lat), Goal: "≥ 50 % of nginx's"}
		sy, okS := sustainedOf(r.Sustained, lat, ArmSwitchyard)
		ng, okN := sustainedOf(r.Sustained, lat, ArmNginx)
		switch {
		case !okS || !okN:
			t.Status = statusNotMeasured
		case ng.Rate == 0:
			t.Status = statusNotMeasured
			t.Measured = fmt.Sprintf("Switchyard %d rps; nginx sustained none of the rates", sy.Rate)
		default:
			share := float64(sy.Rate) / float64(ng.Rate)
			t.Measured = fmt.Sprintf("Switchyard %s rps, nginx %s rps: %.0f %%", atLeast(sy), atLeast(ng), 100*share)
			t.Status, t.Miss = judge(share >= 0.5, "by "+points(100*(0.5-share)))
			if ng.AtTop && share >= 0.5 && !sy.AtTop {
				t.Measured += " (nginx's limit lies above the rates measured)"
			}
		}
		ts = append(ts, t)
	}
	if s := r.Streaming; s != nil {
		a := s.Arms[ArmSwitchyard]
		t := Target{Name: "added time to first token", Goal: "≤ 1 ms"}
		v := a.AddedTTFTP50MS.Median
		t.Measured = fmt.Sprintf("p50 %s ms, p99 %s ms", fmtF(v, 2), fmtF(a.AddedTTFTP99MS.Median, 2))
		t.Status, t.Miss = judge(v <= 1, fmt.Sprintf("by %s ms at p50", fmtF(v-1, 2)))
		ts = append(ts, t)
	}
	for _, h := range r.Heap {
		t := Target{Name: fmt.Sprintf("heap per open stream, %d streams", h.Wanted), Goal: "≤ 32 KiB"}
		if h.Open == 0 {
			t.Status, t.Measured = statusNotMeasured, "no stream could be held open"
		} else {
			t.Measured = fmt.Sprintf("live %s KiB, in use %s KiB (%d streams open)", fmtF(h.LivePerStreamKB, 1), fmtF(h.InusePerStreamKB, 1), h.Open)
			t.Status, t.Miss = judge(h.LivePerStreamKB <= 32, fmt.Sprintf("by %s KiB", fmtF(h.LivePerStreamKB-32, 1)))
		}
		ts = append(ts, t)
	}
	if rt := r.Routing; rt != nil {
		for _, pattern := range []string{PatternSteady, PatternBursty} {
			sy, ok1 := rt.find(ArmSwitchyard, pattern)
			lc, ok2 := rt.find(ArmNginxLC, pattern)
			if !ok1 {
				continue
			}
			if ok2 {
				gain := lowerBy(sy.EndToEnd.P90MS, lc.EndToEnd.P90MS)
				t := Target{Name: "routing p90 end-to-end vs nginx least_conn, " + pattern, Goal: "≥ 30 % lower"}
				t.Measured = fmt.Sprintf("%s ms vs %s ms: %s %% lower", fmtF(sy.EndToEnd.P90MS, 0), fmtF(lc.EndToEnd.P90MS, 0), fmtF(100*gain, 0))
				t.Status, t.Miss = judge(gain >= 0.3, "by "+points(100*(0.3-gain)))
				ts = append(ts, t)
				t = Target{Name: "routing p99 end-to-end vs nginx least_conn, " + pattern, Goal: "no worse"}
				t.Measured = fmt.Sprintf("%s ms vs %s ms", fmtF(sy.EndToEnd.P99MS, 0), fmtF(lc.EndToEnd.P99MS, 0))
				t.Status, t.Miss = judge(sy.EndToEnd.P99MS <= lc.EndToEnd.P99MS, fmt.Sprintf("by %s ms", fmtF(sy.EndToEnd.P99MS-lc.EndToEnd.P99MS, 0)))
				ts = append(ts, t)
			}
			t := Target{Name: "routing queue-wait p99, " + pattern, Goal: fmt.Sprintf("within queue_timeout_ms (%.0f ms)", rt.QueueTimeoutMS)}
			t.Measured = fmt.Sprintf("%s ms", fmtF(sy.QueueWait.P99MS, 0))
			t.Status, t.Miss = judge(sy.QueueWait.P99MS <= rt.QueueTimeoutMS, fmt.Sprintf("by %s ms", fmtF(sy.QueueWait.P99MS-rt.QueueTimeoutMS, 0)))
			ts = append(ts, t)
		}
	}
	return ts
}

func judge(ok bool, miss string) (string, string) {
	if ok {
		return statusMet, ""
	}
	return statusMissed, miss
}

func atLeast(s SustainedRate) string {
	if s.AtTop {
		return fmt.Sprintf("≥ %d", s.Rate)
	}
	return fmt.Sprint(s.Rate)
}

func latencies(points []OverheadPoint) []float64 {
	var out []float64
	for _, p := range points {
		if !slices.Contains(out, p.UpstreamLatencyMS) {
			out = append(out, p.UpstreamLatencyMS)
		}
	}
	return out
}

func pointAt(points []OverheadPoint, lat float64, rate int) (OverheadPoint, bool) {
	for _, p := range points {
		if p.UpstreamLatencyMS == lat && p.Rate == rate {
			return p, true
		}
	}
	return OverheadPoint{}, false
}

func sustainedOf(ss []SustainedRate, lat float64, armName string) (SustainedRate, bool) {
	for _, s := range ss {
		if s.UpstreamLatencyMS == lat && s.Arm == armName {
			return s, true
		}
	}
	return SustainedRate{}, false
}

// computeSustained finds each arm's highest sustained rate per latency.
func computeSustained(points []OverheadPoint) []SustainedRate {
	var out []SustainedRate
	for _, lat := range latencies(points) {
		var at []OverheadPoint
		for _, p := range points {
			if p.UpstreamLatencyMS == lat {
				at = append(at, p)
			}
		}
		slices.SortFunc(at, func(a, b OverheadPoint) int { return a.Rate - b.Rate })
		if len(at) == 0 {
			continue
		}
		top := at[len(at)-1].Rate
		for _, armName := range []string{ArmDirect, ArmNginx, ArmSwitchyard} {
			if _, ok := at[0].Arms[armName]; !ok {
				continue
			}
			r := highestSustained(at, armName)
			out = append(out, SustainedRate{UpstreamLatencyMS: lat, Arm: armName, Rate: r, AtTop: r == top})
		}
	}
	return out
}

// points is a difference of percentages, in percentage points.
func points(v float64) string {
	s := fmtF(v, 0)
	if s == "1" {
		return "1 percentage point"
	}
	return s + " percentage points"
}

// fmtF formats v with d decimals; NaN as "n/a" and +Inf (a quantile
// above a histogram's last bucket) as "∞".
func fmtF(v float64, d int) string {
	switch {
	case math.IsInf(v, 1):
		return "∞"
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "n/a"
	}
	out := fmt.Sprintf("%.*f", d, v)
	if strings.Trim(out, "-0.") == "" {
		out = strings.TrimPrefix(out, "-") // no "-0.00"
	}
	return out
}

// fmtSpread is "median [min–max]", or the median alone for one value.
func fmtSpread(s Spread, d int) string {
	if s.N == 0 || math.IsNaN(s.Median) {
		return "n/a"
	}
	if s.N == 1 || s.Min == s.Max {
		return fmtF(s.Median, d)
	}
	return fmt.Sprintf("%s [%s–%s]", fmtF(s.Median, d), fmtF(s.Min, d), fmtF(s.Max, d))
}

func fmtLatency(ms float64) string {
	return time.Duration(ms * float64(time.Millisecond)).String()
}

// fmtCensored formats a latency that may have reached the timeout at
// which failed requests were counted.
func fmtCensored(v, timeout float64) string {
	if timeout > 0 && v >= timeout {
		return "≥ " + fmtF(v, 0)
	}
	return fmtF(v, 0)
}

func pct(v float64) string { return fmtF(100*v, 1) + " %" }
