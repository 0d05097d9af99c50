package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/report.golden")

// loadRun makes a LoadRun with the given percentiles.
func loadRun(armName string, rate, rep int, p50, p99 float64, errs int) LoadRun {
	n := rate * 5
	return LoadRun{Arm: armName, Rate: rate, Rep: rep, Requests: n, OK: n - errs, Errors: errs, AchievedRate: float64(rate),
		Latency: Summary{Count: n - errs, P50MS: p50, P99MS: p99}}
}

// point builds the runs of one rate: three repetitions per arm, nginx
// adding nginx ms and Switchyard sy ms to direct's 60/62 ms.
func point(rate int, nginx, sy float64, syErrs int) OverheadPoint {
	p := OverheadPoint{UpstreamLatencyMS: 60, Rate: rate}
	for rep := 1; rep <= 3; rep++ {
		jitter := float64(rep) * 0.01
		p.Runs = append(p.Runs,
			loadRun(ArmDirect, rate, rep, 60+jitter, 62+jitter, 0),
			loadRun(ArmNginx, rate, rep, 60+jitter+nginx, 62+jitter+2*nginx, 0),
			loadRun(ArmSwitchyard, rate, rep, 60+jitter+sy, 62+jitter+2*sy, syErrs))
	}
	summarizePoint(&p)
	return p
}

func TestSummarizePoint(t *testing.T) {
	p := point(1000, 0.1, 0.4, 0)
	sy := p.Arms[ArmSwitchyard]
	if math.Abs(sy.AddedP50MS.Median-0.4) > 1e-9 || math.Abs(sy.AddedP99MS.Median-0.8) > 1e-9 || sy.AddedP50MS.N != 3 {
		t.Errorf("added = %+v / %+v", sy.AddedP50MS, sy.AddedP99MS)
	}
	if math.Abs(p.RatioP50-4) > 1e-9 || math.Abs(p.RatioP99-4) > 1e-9 {
		t.Errorf("ratio = %v / %v, want 4", p.RatioP50, p.RatioP99)
	}
	if !sy.Sustained || !p.Arms[ArmNginx].Sustained || !p.Arms[ArmDirect].Sustained {
		t.Error("every arm sustained 1000 rps with small added latency and no errors")
	}
	slow := point(4000, 0.1, 3, 0) // added p99 6 ms
	if slow.Arms[ArmSwitchyard].Sustained {
		t.Error("an added p99 of 6 ms counts as sustained")
	}
	failing := point(2000, 0.1, 0.2, 100) // 1 % errors
	if failing.Arms[ArmSwitchyard].Sustained || failing.Arms[ArmSwitchyard].ErrorShare != 100.0*3/30000 {
		t.Errorf("1 %% errors: sustained %v, share %v", failing.Arms[ArmSwitchyard].Sustained, failing.Arms[ArmSwitchyard].ErrorShare)
	}
	noisy := point(500, 0.001, 0.3, 0) // nginx's added latency is noise
	if !math.IsNaN(noisy.RatioP50) {
		t.Errorf("a ratio against %v ms was taken: %v", 0.001, noisy.RatioP50)
	}
}

func TestComputeSustained(t *testing.T) {
	points := []OverheadPoint{point(500, 0.1, 0.4, 0), point(1000, 0.1, 3, 0), point(2000, 0.1, 0.4, 0)}
	got := map[string]SustainedRate{}
	for _, s := range computeSustained(points) {
		got[s.Arm] = s
	}
	if got[ArmSwitchyard].Rate != 500 || got[ArmSwitchyard].AtTop {
		t.Errorf("Switchyard = %+v: it failed at 1000, so 2000 does not count", got[ArmSwitchyard])
	}
	if got[ArmNginx].Rate != 2000 || !got[ArmNginx].AtTop {
		t.Errorf("nginx = %+v, want 2000 at the top of the rates measured", got[ArmNginx])
	}
}

// sampleReport is a small report with every section, for the targets and
// the golden rendering.
func sampleReport() *Report {
	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	r := &Report{
		Schema: 1, Started: start, Finished: start.Add(90 * time.Second), Command: "switchyard-bench --reps 3",
		RawJSON: "bench/results/20250102T030405Z.json",
		Machine: Machine{CPU: "Test CPU", Cores: 2, MemoryGiB: 8, Kernel: "6.1.0", OS: "Test OS", Go: "go1.26.8", Nginx: "nginx/1.22.1",
			Postgres: "15.2", Redis: "7.0.15", LoadAvgStart: "0.10 0.20 0.30", LoadAvgEnd: "1.00 0.90 0.80", FileLimit: 20000, CPUMHz: 2600},
		Settings: Settings{Rates: []int{500, 2000}, LatenciesMS: []float64{60}, Reps: 3, DurationS: 5, WarmupS: 1, ResponseTokens: 16,
			StreamRate: 100, StreamSeconds: 5, Streams: []int{1000}, ProfileRate: 2000, Seed: 1},
		Phases:   []Phase{{Name: PhaseOverhead, Seconds: 60, LoadAvg: "1.00 0.50 0.20", Finished: true}},
		Overhead: []OverheadPoint{point(500, 0.1, 0.3, 0), point(2000, 0.2, 0.9, 0)},
		Streaming: &StreamingResult{EngineTTFTMS: 50, EngineTPS: 100, Tokens: 32, Rate: 100, Runs: []StreamRun{
			{Arm: ArmDirect, Rep: 1, Streams: 500, TTFT: Summary{Count: 500, P50MS: 51, P99MS: 53}, Gap: Summary{Count: 15500, MeanMS: 10, P50MS: 10, P99MS: 12}},
			{Arm: ArmSwitchyard, Rep: 1, Streams: 500, TTFT: Summary{Count: 500, P50MS: 51.6, P99MS: 54}, Gap: Summary{Count: 15500, MeanMS: 10, P50MS: 10, P99MS: 12.5}},
		}},
		Heap: []HeapPoint{{Wanted: 1000, Open: 1000, BaselineLiveMiB: 10, LiveMiB: 40, LivePerStreamKB: 30.7, BaselineInuseMiB: 12, InuseMiB: 45, InusePerStreamKB: 33.8,
			StackPerStreamKB: 16, GoroutinesPer: 4, RSSPerStreamKB: 45, OpenSeconds: 0.6, FileLimit: 20000},
			{Wanted: 10000, Open: 9744, BaselineLiveMiB: 9.62, LiveMiB: 349.38, LivePerStreamKB: 35.7, LiveExact: true, BaselineInuseMiB: 12, InuseMiB: 400, InusePerStreamKB: 40.8,
				StackPerStreamKB: 16, GoroutinesPer: 4, RSSPerStreamKB: 50, OpenSeconds: 5, FileLimit: 20000, Note: "only 9744 streams fit"}},
		Routing: &RoutingResult{Nodes: routingCluster()[:2], Tokens: 64, CapacityRPS: 11.59, Load: 0.6, RateRPS: 6.96, QueueTimeoutMS: 2000,
			CloudTTFTMS: 400, CloudTPS: 50, WarmupS: 10, DurationS: 40, Runs: []RoutingRun{
				{Arm: ArmSwitchyard, Pattern: PatternSteady, Rate: 6.96, Requests: 280, TTFT: Summary{P50MS: 55, P90MS: 120}, EndToEnd: Summary{P50MS: 700, P90MS: 1000, P99MS: 1800},
					QueueWait: Summary{P99MS: 300}, Spilled: 0.05, ByServer: map[string]int{"fast-1": 266, "cloud": 14}, TimeoutMS: 30000},
				{Arm: ArmNginxLC, Pattern: PatternSteady, Rate: 6.96, Requests: 280, Failed: 3, TTFT: Summary{P50MS: 52, P90MS: 900}, EndToEnd: Summary{P50MS: 690, P90MS: 2000, P99MS: 30000},
					QueueWait: Summary{P99MS: 30000}, ByServer: map[string]int{"fast-1": 277}, TimeoutMS: 30000},
			}},
		GoBench: []GoBench{{Package: "github.com/switchyard-ai/switchyard/scheduler", Name: "BenchmarkPick10", Iterations: 1000, NsPerOp: 260, BytesPerOp: 1}},
		Profile: &ProfileResult{PerfRate: 2000, PerfSeconds: 8, PerfSamples: 8000,
			PerfGroups:  []ProfileEntry{{Share: 0.5, Symbol: "kernel: network stack and other syscalls"}, {Share: 0.1, Symbol: "encoding/json"}},
			PerfTop:     []ProfileEntry{{Share: 0.2, Symbol: "[k] tcp_sendmsg"}},
			HotPathNsOp: 46000, HarnessNsOp: 7500, HotPathAlloc: 120,
			PprofCum: []ProfileEntry{{Share: 0.9, Symbol: "github.com/switchyard-ai/switchyard/gateway/openai.(*Handler).serveCall"}},
			PprofTop: []ProfileEntry{{Share: 0.1, Symbol: "runtime.mallocgc"}}},
		Ablation: &AblationResult{Rate: 500, RedisDelayMS: 5, EffectiveDelayMS: 5.3, UpstreamMS: 60,
			RoundTripsP50: map[string]float64{ArmLimits: 2.1, ArmNoLimits: 1.0}},
		Notes:  []string{"Reduced or changed run: rates [500 2000] (the full matrix: [500 1000 2000 4000])."},
		Errors: map[string]string{},
	}
	abl := OverheadPoint{Rate: 500}
	for rep := 1; rep <= 3; rep++ {
		abl.Runs = append(abl.Runs, loadRun(ArmDirect, 500, rep, 60, 62, 0), loadRun(ArmLimits, 500, rep, 60.8, 63, 0), loadRun(ArmLimitsDelayed, 500, rep, 72, 75, 0))
	}
	summarizePoint(&abl)
	r.Ablation.Arms = abl.Arms
	r.derive()
	return r
}

func TestEvaluateTargets(t *testing.T) {
	r := sampleReport()
	byName := map[string]Target{}
	for _, tg := range r.Targets {
		byName[tg.Name] = tg
	}
	for _, tc := range []struct {
		name, status, miss string
	}{
		// Switchyard adds 2 × 0.9 ms at p99 at 2000 rps in the sample.
		{"added p99 at 2000 rps, upstream 60ms", statusMissed, "by 0.80 ms"},
		// 0.3/0.1 = 3× at 500 rps, 0.9/0.2 = 4.5× at 2000 rps.
		{"added latency vs nginx's, upstream 60ms", statusMissed, "by 2.5× at worst (4.5× against 2×)"},
		{"highest sustained rate, upstream 60ms", statusMet, ""},
		{"added time to first token", statusMet, ""},
		{"heap per open stream, 1000 streams", statusMet, ""},
		{"heap per open stream, 10000 streams", statusMissed, "by 3.7 KiB"},
		{"routing p90 end-to-end vs nginx least_conn, steady", statusMet, ""},
		{"routing p99 end-to-end vs nginx least_conn, steady", statusMet, ""},
		{"routing queue-wait p99, steady", statusMet, ""},
	} {
		got, ok := byName[tc.name]
		if !ok || got.Status != tc.status || got.Miss != tc.miss {
			t.Errorf("target %q = %+v, want %s %s", tc.name, got, tc.status, tc.miss)
		}
	}
	if _, ok := byName["routing p90 end-to-end vs nginx least_conn, bursty"]; ok {
		t.Error("a target was evaluated for a pattern that did not run")
	}
	if got := byName["added latency vs nginx's, upstream 60ms"].Measured; got != "at 500 rps 3.0× (p50), 3.0× (p99); worst 4.5× (p99 at 2000 rps)" {
		t.Errorf("ratio measured = %q", got)
	}
	if got := byName["highest sustained rate, upstream 60ms"].Measured; got != "Switchyard ≥ 2000 rps, nginx ≥ 2000 rps: 100 %" {
		t.Errorf("sustained measured = %q", got)
	}
}

func TestReportJSONWritesNaNAsNull(t *testing.T) {
	r := sampleReport()
	r.Overhead[0].RatioP50 = math.NaN()
	// A saturated run: its overhead's p99 lies beyond the last bucket.
	r.Overhead[1].Runs[2].InProcOverhead = &histogramDelta{Count: 10, MeanMS: 500, P50UpperMS: 250, P99UpperMS: math.Inf(1)}
	summarizePoint(&r.Overhead[1])
	if got := renderMarkdown(r); !strings.Contains(got, "∞") {
		t.Error("an overhead above the last bucket is not shown as ∞")
	}
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatalf("the report does not encode: %v", err)
	}
	if !bytes.Contains(raw, []byte(`"ratio_to_nginx_p50":null`)) {
		t.Error("a NaN ratio is not written as null")
	}
	var back struct {
		Overhead []struct {
			Arms map[string]ArmAtRate `json:"arms"`
		} `json:"overhead"`
	}
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Overhead[1].Arms[ArmSwitchyard].AddedP50MS.Median; math.Abs(got-0.9) > 1e-9 {
		t.Errorf("round trip of a spread: %v", got)
	}
	b, _ := json.Marshal(SpreadOf(nil))
	var s2 Spread
	if err := json.Unmarshal(b, &s2); err != nil || !math.IsNaN(s2.Median) {
		t.Errorf("an empty spread does not round-trip: %s → %+v (%v)", b, s2, err)
	}
}

func TestRerenderFromRawJSON(t *testing.T) {
	r := sampleReport()
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "run.json"), filepath.Join(dir, "BENCHMARKS.md")
	if err := os.WriteFile(in, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rerender(in, out); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(out)
	r.RawJSON = filepath.ToSlash(in)
	if want := renderMarkdown(r); string(got) != want {
		t.Errorf("the report rendered again from its JSON differs:\n%s", firstDiff(want, string(got)))
	}
	// The JSON written back holds the same measurements.
	again, _ := os.ReadFile(in)
	var back Report
	if err := json.Unmarshal(again, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Overhead) != len(r.Overhead) || back.Overhead[1].Runs[2].Latency != r.Overhead[1].Runs[2].Latency || len(back.Targets) != len(r.Targets) {
		t.Error("the JSON written back lost measurements")
	}
}

// TestRenderGolden pins the report's layout: run with -update after a
// deliberate change and review the diff of testdata/report.golden.
func TestRenderGolden(t *testing.T) {
	got := renderMarkdown(sampleReport())
	path := filepath.Join("testdata", "report.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestRenderGolden -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("the rendered report differs from %s; run with -update and review the diff.\n%s", path, firstDiff(string(want), got))
	}
	for _, want := range []string{"| 2000 | switchyard |", "Highest rate sustained:", "## Routing quality", "| steady | nginx least_conn | 280 | 3 |", "≥ 30000", "only 9744 streams fit"} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return "line " + strconv.Itoa(i+1) + ":\n- " + x + "\n+ " + y
		}
	}
	return ""
}
