package main

import (
	"context"
	"math"
	"net/http"
	"strings"
	"time"
)

// SustainedAddedP99MS is the added p99 below which a rate counts as
// sustained, with (nearly) no errors and the rate really sent.
const (
	SustainedAddedP99MS = 5.0
	sustainedErrorShare = 0.001
	sustainedRateShare  = 0.95
	// ratioFloorMS: an added latency below this is noise, and no ratio is
	// taken against it.
	ratioFloorMS = 0.01
)

// OverheadPoint is every run at one upstream latency and rate.
type OverheadPoint struct {
	UpstreamLatencyMS float64                 `json:"upstream_latency_ms"`
	Rate              int                     `json:"rate"`
	Runs              []LoadRun               `json:"runs"`
	Arms              map[string]ArmAtRate    `json:"arms"`
	RatioP50          float64                 `json:"ratio_to_nginx_p50"` // Switchyard's added ÷ nginx's added, medians
	RatioP99          float64                 `json:"ratio_to_nginx_p99"`
	Proc              map[string]usageSummary `json:"proc,omitempty"`
}

// ArmAtRate summarises one arm's repetitions at a rate.
type ArmAtRate struct {
	P50MS      Spread  `json:"p50_ms"`
	P99MS      Spread  `json:"p99_ms"`
	AddedP50MS Spread  `json:"added_p50_ms"` // over direct, paired by repetition
	AddedP99MS Spread  `json:"added_p99_ms"`
	Requests   int     `json:"requests"`
	Errors     int     `json:"errors"`
	Achieved   Spread  `json:"achieved_rate"`
	Sustained  bool    `json:"sustained"`
	InProcP99  Spread  `json:"in_process_overhead_p99_upper_ms,omitempty"`
	InProcMean Spread  `json:"in_process_overhead_mean_ms,omitempty"`
	ErrorShare float64 `json:"error_share"`
	// UpstreamClosed is connections to the engine closed per run (median).
	UpstreamClosed Spread `json:"upstream_connections_closed"`
}

// usageSummary is a process's CPU and memory over an arm's repetitions.
type usageSummary struct {
	CPUCores Spread  `json:"cpu_cores"`
	RSSMiB   float64 `json:"rss_mib"` // the largest at the end of a run
	PeakMiB  float64 `json:"peak_rss_mib"`
}

// summarizePoint computes every arm's figures from the runs at one rate.
// Repetition i of an arm is paired with repetition i of the direct arm.
func summarizePoint(p *OverheadPoint) {
	byArm := map[string][]LoadRun{}
	for _, r := range p.Runs {
		byArm[r.Arm] = append(byArm[r.Arm], r)
	}
	field := func(runs []LoadRun, f func(LoadRun) float64) []float64 {
		out := make([]float64, len(runs))
		for i, r := range runs {
			out[i] = f(r)
		}
		return out
	}
	p50 := func(r LoadRun) float64 {
		if r.Latency.Count == 0 {
			return math.NaN()
		}
		return r.Latency.P50MS
	}
	p99 := func(r LoadRun) float64 {
		if r.Latency.Count == 0 {
			return math.NaN()
		}
		return r.Latency.P99MS
	}
	direct := byArm[ArmDirect]
	p.Arms = map[string]ArmAtRate{}
	p.Proc = map[string]usageSummary{}
	for name, runs := range byArm {
		a := ArmAtRate{
			P50MS:    SpreadOf(field(runs, p50)),
			P99MS:    SpreadOf(field(runs, p99)),
			Achieved: SpreadOf(field(runs, func(r LoadRun) float64 { return r.AchievedRate })),
		}
		for _, r := range runs {
			a.Requests += r.Requests
			a.Errors += r.Errors
		}
		if a.Requests > 0 {
			a.ErrorShare = float64(a.Errors) / float64(a.Requests)
		}
		if len(direct) > 0 {
			a.AddedP50MS = SpreadOf(Added(field(runs, p50), field(direct, p50)))
			a.AddedP99MS = SpreadOf(Added(field(runs, p99), field(direct, p99)))
		}
		added99 := a.AddedP99MS.Median
		if name == ArmDirect {
			added99 = 0
		}
		a.Sustained = !math.IsNaN(added99) && added99 < SustainedAddedP99MS &&
			a.ErrorShare <= sustainedErrorShare &&
			a.Achieved.Median >= sustainedRateShare*float64(p.Rate)
		a.UpstreamClosed = SpreadOf(field(runs, func(r LoadRun) float64 { return float64(r.UpstreamClosed) }))
		var inP99, inMean []float64
		var cpu []float64
		var us usageSummary
		for _, r := range runs {
			if r.InProcOverhead != nil && r.InProcOverhead.Count > 0 {
				inP99 = append(inP99, r.InProcOverhead.P99UpperMS)
				inMean = append(inMean, r.InProcOverhead.MeanMS)
			}
			if r.Proc != nil {
				cpu = append(cpu, r.Proc.CPUCores)
				us.RSSMiB = max(us.RSSMiB, r.Proc.RSSMiB)
				us.PeakMiB = max(us.PeakMiB, r.Proc.PeakMiB)
			}
		}
		if len(inP99) > 0 {
			a.InProcP99, a.InProcMean = SpreadOf(inP99), SpreadOf(inMean)
		}
		if len(cpu) > 0 {
			us.CPUCores = SpreadOf(cpu)
			p.Proc[name] = us
		}
		p.Arms[name] = a
	}
	sy, ng := p.Arms[ArmSwitchyard], p.Arms[ArmNginx]
	p.RatioP50 = Ratio(sy.AddedP50MS.Median, ng.AddedP50MS.Median, ratioFloorMS)
	p.RatioP99 = Ratio(sy.AddedP99MS.Median, ng.AddedP99MS.Median, ratioFloorMS)
	if _, ok := p.Arms[ArmNginx]; !ok {
		p.RatioP50, p.RatioP99 = math.NaN(), math.NaN()
	}
}

// highestSustained is the highest rate an arm sustained at that and every
// lower rate measured; 0 when it sustained none.
func highestSustained(points []OverheadPoint, arm string) int {
	best := 0
	for _, p := range points { // ascending rates
		a, ok := p.Arms[arm]
		if !ok || !a.Sustained {
			break
		}
		best = p.Rate
	}
	return best
}

// overheadSetup is what the overhead phase runs against.
type overheadSetup struct {
	sim     *engine
	simPort int
	gw      *gateway
	nginx   *proc // nil: no nginx arm
	arms    []arm
	model   string
	tokens  int
	verbose func(format string, a ...any)
}

func (s *overheadSetup) meterFor(a string) *meter {
	switch a {
	case ArmSwitchyard:
		return startMeter([]int{s.gw.pid()})
	case ArmNginx:
		if s.nginx != nil {
			return startMeter(append([]int{s.nginx.pid()}, childPIDs(s.nginx.pid())...))
		}
	}
	return nil
}

// run measures one arm once at rate.
func (s *overheadSetup) run(ctx context.Context, a arm, rate int, d time.Duration, body []byte) LoadRun {
	m := s.meterFor(a.Name)
	var before []byte
	if a.Name == ArmSwitchyard {
		before, _ = scrape(ctx, "http://"+s.gw.metrics+"/metrics")
	}
	tw := countTimeWait(s.simPort)
	r := attack(ctx, a, body, rate, d)
	r.UpstreamClosed = max(countTimeWait(s.simPort)-tw, 0)
	if m != nil {
		u := m.stop()
		r.Proc = &u
	}
	if a.Name == ArmSwitchyard {
		after, err := scrape(ctx, "http://"+s.gw.metrics+"/metrics")
		if err == nil {
			hb, _ := parseHistogram(before, "switchyard_overhead_seconds", `endpoint="chat/completions"`)
			ha, ok := parseHistogram(after, "switchyard_overhead_seconds", `endpoint="chat/completions"`)
			if ok {
				d := ha.delta(hb)
				r.InProcOverhead = &d
			}
		}
	}
	return r
}

// runOverhead measures every arm at every latency and rate: a warm-up per
// arm, then reps repetitions in which the arms run back to back, their
// order rotated so that none always runs first.
func (s *overheadSetup) runOverhead(ctx context.Context, cfg Config) ([]OverheadPoint, error) {
	body := chatBody(s.model, false, s.tokens)
	var points []OverheadPoint
	for _, lat := range cfg.Latencies {
		if err := s.sim.configure(ctx, map[string]any{"latency": lat.String(), "ttft": "0s", "tps": 0}); err != nil {
			return points, err
		}
		for _, rate := range cfg.Rates {
			p := OverheadPoint{UpstreamLatencyMS: ms(lat), Rate: rate}
			for _, a := range s.arms {
				if ctx.Err() != nil {
					return points, ctx.Err()
				}
				if cfg.Warmup > 0 {
					attack(ctx, a, body, rate, cfg.Warmup)
					settle(ctx)
				}
			}
			for rep := range cfg.Reps {
				for i := range s.arms {
					a := s.arms[(i+rep)%len(s.arms)]
					r := s.run(ctx, a, rate, cfg.Duration, body)
					r.Rep = rep + 1
					p.Runs = append(p.Runs, r)
					s.verbose("overhead latency=%v rate=%d rep=%d %-10s p50=%.2fms p99=%.2fms errors=%d sent=%.0f/s",
						lat, rate, rep+1, a.Name, r.Latency.P50MS, r.Latency.P99MS, r.Errors, r.AchievedRate)
					settle(ctx)
					if ctx.Err() != nil {
						return points, ctx.Err()
					}
				}
			}
			summarizePoint(&p)
			points = append(points, p)
		}
	}
	return points, nil
}

// settle lets connections and timers of the last run wind down so that
// they do not weigh on the next.
func settle(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(300 * time.Millisecond):
	}
}

// armsFor builds the arms that reach the simulated upstream.
func armsFor(sim *engine, nginxAddr string, gw *gateway) []arm {
	arms := []arm{{Name: ArmDirect, URL: sim.url + "/v1/chat/completions"}}
	if nginxAddr != "" {
		arms = append(arms, arm{Name: ArmNginx, URL: "http://" + nginxAddr + "/v1/chat/completions"})
	}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+gw.client)
	arms = append(arms, arm{Name: ArmSwitchyard, URL: "http://" + gw.http + "/v1/chat/completions", Header: h})
	return arms
}

func describeArms(arms []arm) string {
	names := make([]string, len(arms))
	for i, a := range arms {
		names[i] = a.Name
	}
	return strings.Join(names, ", ")
}
