package main

import (
	"fmt"
	"math"
	"strings"
)

// renderMarkdown writes BENCHMARKS.md from a report. Every number in it
// comes from r; the prose around them only says how they were measured.
func renderMarkdown(r *Report) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# Benchmarks\n\n")
	w("Every figure in this file was measured by one run of `scripts/bench.sh` (the `switchyard-bench` tool) ")
	w("on the machine described below, and written here by the tool itself; the raw figures are in `%s`. ", r.RawJSON)
	w("Run `scripts/bench.sh` to measure them again on your own hardware.\n\n")
	w("Run started %s and took %.1f minutes: `%s` (paths and service addresses left out).\n\n", r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Finished.Sub(r.Started).Minutes(), r.Command)

	renderMachine(w, r)
	renderTargets(w, r)
	renderOverhead(w, r)
	renderAblation(w, r)
	renderStreaming(w, r)
	renderHeap(w, r)
	renderProfile(w, r)
	renderRouting(w, r)
	renderGoBench(w, r)
	renderNotes(w, r)
	return b.String()
}

type writer func(format string, a ...any)

func renderMachine(w writer, r *Report) {
	m := r.Machine
	w("## Machine\n\n| | |\n|---|---|\n")
	cpu := fmt.Sprintf("%s, %d cores", m.CPU, m.Cores)
	if m.CPUMHz > 0 {
		cpu += fmt.Sprintf(" at %.0f MHz", m.CPUMHz)
	}
	w("| CPU | %s |\n", cpu)
	w("| memory | %.0f GiB |\n", m.MemoryGiB)
	w("| OS, kernel | %s, Linux %s |\n", orDash(m.OS), orDash(m.Kernel))
	w("| Go | %s |\n", orDash(m.Go))
	w("| code measured | %s |\n", orDash(m.Revision))
	w("| nginx | %s |\n", orDash(m.Nginx))
	w("| Postgres, Redis | %s, %s |\n", orDash(m.Postgres), orDash(m.Redis))
	w("| open-file limit | %d |\n", m.FileLimit)
	w("| load average (1, 5, 15 min) | %s at the start, %s at the end |\n\n", orDash(m.LoadAvgStart), orDash(m.LoadAvgEnd))
	w("The load generator, the simulated engines, nginx, the gateway, Postgres and Redis all run on these %d cores, ", m.Cores)
	w("so every arm's figures include the others' competition for them; the arms run back to back, never at once. ")
	w("The load average shows how much else the machine was doing.\n\n")
	if len(r.Phases) > 0 {
		w("| phase | minutes | load average after |\n|---|---|---|\n")
		for _, p := range r.Phases {
			done := ""
			if !p.Finished {
				done = " (did not finish)"
			}
			w("| %s%s | %.1f | %s |\n", p.Name, done, p.Seconds/60, p.LoadAvg)
		}
		w("\n")
	}
}

func renderTargets(w writer, r *Report) {
	w("## Targets\n\nRecorded, never asserted by a test.\n\n| target | goal | measured | status |\n|---|---|---|---|\n")
	for _, t := range r.Targets {
		st := t.Status
		if t.Miss != "" {
			st += " " + t.Miss
		}
		w("| %s | %s | %s | %s |\n", t.Name, t.Goal, orDash(t.Measured), st)
	}
	if len(r.Targets) == 0 {
		w("| (no phase that measures a target ran) | | | |\n")
	}
	w("\n")
}

func renderOverhead(w writer, r *Report) {
	if len(r.Overhead) == 0 {
		return
	}
	s := r.Settings
	w("## Overhead: added latency\n\n")
	w("Open-loop load (vegeta, as a library) at fixed rates against one simulated engine (`simengine --latency`) that answers a short chat completion ")
	w("(%d output tokens, not streamed) after a fixed delay. Three arms, measured in the same run at the same rate, one after the other: ", s.ResponseTokens)
	w("**direct** to the engine; **nginx** `proxy_pass` with keep-alive upstream connections (the floor for one HTTP proxy hop); ")
	w("**Switchyard** `serve` with authentication (a client key), tenant limits and budgets checked in Redis, metering to Postgres, metrics and its one log line per request all on.\n\n")
	w("Each rate: a %gs warm-up per arm, then %d repetitions of %gs per arm (the arms' order rotates between repetitions). ", s.WarmupS, s.Reps, s.DurationS)
	w("Latency percentiles are over successful requests; *added* = the arm's percentile − direct's percentile in the same repetition; ")
	w("each cell is the median over repetitions with [min–max]. Ratio = Switchyard's added ÷ nginx's added (medians; n/a when nginx's is below %.2f ms). ", ratioFloorMS)
	w("A rate is *sustained* when the added p99 is below %.0f ms, errors are at most %.1f %% and at least %.0f %% of the rate was sent.\n\n", SustainedAddedP99MS, 100*sustainedErrorShare, 100*sustainedRateShare)
	for _, lat := range latencies(r.Overhead) {
		w("### Upstream latency %s\n\n", fmtLatency(lat))
		w("| rate | arm | p50 ms | p99 ms | added p50 ms | added p99 ms | errors | sent/s | sustained |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, p := range r.Overhead {
			if p.UpstreamLatencyMS != lat {
				continue
			}
			for _, name := range []string{ArmDirect, ArmNginx, ArmSwitchyard} {
				a, ok := p.Arms[name]
				if !ok {
					continue
				}
				added50, added99 := fmtSpread(a.AddedP50MS, 2), fmtSpread(a.AddedP99MS, 2)
				if name == ArmDirect {
					added50, added99 = "—", "—"
				}
				w("| %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", p.Rate, name, fmtSpread(a.P50MS, 2), fmtSpread(a.P99MS, 2),
					added50, added99, fmtErrors(a), fmtSpread(a.Achieved, 0), yesNo(a.Sustained))
			}
		}
		w("\n| rate | Switchyard ÷ nginx, added p50 | added p99 |\n|---|---|---|\n")
		for _, p := range r.Overhead {
			if p.UpstreamLatencyMS == lat {
				w("| %d | %s | %s |\n", p.Rate, fmtRatio(p.RatioP50), fmtRatio(p.RatioP99))
			}
		}
		var parts []string
		for _, s := range r.Sustained {
			if s.UpstreamLatencyMS != lat {
				continue
			}
			rate := "none of the rates"
			if s.Rate > 0 {
				rate = atLeast(s) + " rps"
			}
			parts = append(parts, s.Arm+" "+rate)
		}
		w("\nHighest rate sustained: %s", strings.Join(parts, ", "))
		w(" (≥ means the highest rate measured, so the limit lies above it).\n\n")
		w("Resources over each run (CPU from `/proc/<pid>/stat`, RSS from `/proc/<pid>/status`; nginx = master and workers):\n\n")
		w("| rate | Switchyard CPU cores | Switchyard RSS MiB at the end | nginx CPU cores | in-process overhead, mean ms | in-process overhead p99 ≤ ms | engine connections closed per run: Switchyard | nginx |\n|---|---|---|---|---|---|---|---|\n")
		for _, p := range r.Overhead {
			if p.UpstreamLatencyMS != lat {
				continue
			}
			sy, ng := p.Proc[ArmSwitchyard], p.Proc[ArmNginx]
			a := p.Arms[ArmSwitchyard]
			w("| %d | %s | %s | %s | %s | %s | %s | %s |\n", p.Rate, fmtSpread(sy.CPUCores, 2), fmtF(sy.RSSMiB, 0),
				fmtSpread(ng.CPUCores, 2), fmtSpread(a.InProcMean, 3), fmtSpread(a.InProcP99, 3),
				fmtSpread(a.UpstreamClosed, 0), fmtSpread(p.Arms[ArmNginx].UpstreamClosed, 0))
		}
		w("\nEngine connections closed = sockets toward the engine left in TIME_WAIT by the run: a proxy that reuses its upstream connections closes none; ")
		w("one that opens more than it keeps idle closes (and later reopens) the rest.\n")
		w("\nThe in-process overhead is the gateway's own `switchyard_overhead_seconds` histogram over the runs (request time minus time blocked on the upstream); ")
		w("its p99 is the upper bound of the bucket it falls in. The difference between it and the added latency seen by the client is what the extra hop costs outside the handler: ")
		w("the client's and the gateway's sockets, the HTTP server, the connection to the upstream, and waiting for a CPU.\n\n")
	}
}

func fmtErrors(a ArmAtRate) string {
	if a.Errors == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", a.Errors, pct(a.ErrorShare))
}

func fmtRatio(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmtF(v, 1) + "×"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func renderAblation(w writer, r *Report) {
	a := r.Ablation
	if a == nil || len(a.Arms) == 0 {
		return
	}
	w("## What the tenant limits cost on the request path\n\n")
	w("A second gateway replica on the same database and Redis key prefix reaches Redis through a proxy that holds every command %s ms ", fmtF(a.RedisDelayMS, 1))
	w("(measured: a PING through it takes %s ms longer than without). ", fmtF(a.EffectiveDelayMS, 2))
	w("Both replicas serve a tenant with limits and budgets and a tenant without any, at %d rps (upstream latency %s), %d repetitions of %gs, arms rotated. ", a.Rate, fmtLatency(a.UpstreamMS), r.Settings.Reps, r.Settings.DurationS)
	w("How much the delay adds to a request's latency, divided by the measured delay, counts the Redis round trips the client waits for.\n\n")
	w("| arm | p50 ms | p99 ms | added p50 ms | added p99 ms | errors |\n|---|---|---|---|---|---|\n")
	for _, name := range []string{ArmDirect, ArmLimits, ArmNoLimits, ArmLimitsDelayed, ArmNoLimitsDelay} {
		x, ok := a.Arms[name]
		if !ok {
			continue
		}
		added50, added99 := fmtSpread(x.AddedP50MS, 2), fmtSpread(x.AddedP99MS, 2)
		if name == ArmDirect {
			added50, added99 = "—", "—"
		}
		w("| %s | %s | %s | %s | %s | %s |\n", name, fmtSpread(x.P50MS, 2), fmtSpread(x.P99MS, 2), added50, added99, fmtErrors(x))
	}
	w("\nRedis round trips a request waits for (Δ added p50 ÷ measured delay): limits on %s, limits off %s.\n\n",
		fmtLookup(a.RoundTripsP50, ArmLimits, 1), fmtLookup(a.RoundTripsP50, ArmNoLimits, 1))
}

func renderStreaming(w writer, r *Report) {
	s := r.Streaming
	if s == nil {
		return
	}
	w("## Streaming: time to first token and per-chunk delay\n\n")
	w("Streams started open loop at %d per second for %gs per repetition (%d repetitions), against the engine streaming %d tokens ", s.Rate, r.Settings.StreamSeconds, r.Settings.Reps, s.Tokens)
	w("after a time to first token of %.0f ms at %.0f tokens per second. The client times every event: ", s.EngineTTFTMS, s.EngineTPS)
	w("TTFT = request sent → first token event; gap = time between consecutive token events. Added = the arm's figure − direct's, paired by repetition; median [min–max].\n\n")
	w("| arm | TTFT p50 ms | TTFT p99 ms | added TTFT p50 ms | added TTFT p99 ms | gap p50 ms | gap p99 ms | added gap mean ms | added gap p99 ms | errors |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, name := range []string{ArmDirect, ArmNginx, ArmSwitchyard} {
		a, ok := s.Arms[name]
		if !ok {
			continue
		}
		add := func(sp Spread) string {
			if name == ArmDirect {
				return "—"
			}
			return fmtSpread(sp, 2)
		}
		w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", name, fmtSpread(a.TTFTP50MS, 2), fmtSpread(a.TTFTP99MS, 2),
			add(a.AddedTTFTP50MS), add(a.AddedTTFTP99MS), fmtSpread(a.GapP50MS, 2), fmtSpread(a.GapP99MS, 2),
			add(a.AddedGapMeanMS), add(a.AddedGapP99MS), a.Errors)
	}
	w("\n")
}

// liveDigits is how many decimals a live heap figure has: gctrace's are
// whole MiB.
func liveDigits(h HeapPoint) int {
	if h.LiveExact {
		return 1
	}
	return 0
}

func renderHeap(w writer, r *Report) {
	if len(r.Heap) == 0 {
		return
	}
	w("## Heap per open stream\n\n")
	w("N streams opened through the gateway (2 000 per second) against an engine that sends one chunk and then stalls every stream (`POST /sim/config` `stall_after`), held open together. ")
	w("The gateway's memory is read idle just before and with every stream open, each time after making it collect its garbage twice ")
	w("(it has no endpoint for that; the bench sends it requests with a 256 KiB body for an unknown model, one at a time, until two collections have run). ")
	w("*Live heap* = what the last collection found live: the gateway's `go_gc_heap_live_bytes` (or, where a gateway does not export it, the figure `GODEBUG=gctrace=1` prints, in whole MiB); ")
	w("*heap in use* = `go_memstats_heap_inuse_bytes` from its metrics port right after, which also holds garbage made since and free space in the spans in use. ")
	w("Per stream = (with streams − idle) ÷ streams held open. The target is judged on the live heap; goroutine stacks are not heap and are shown apart.\n\n")
	w("| streams wanted | held open | failed | live heap MiB, idle → open | live heap per stream KiB | heap in use MiB, idle → open | heap in use per stream KiB | stack per stream KiB | goroutines per stream | RSS per stream KiB | seconds to open |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, h := range r.Heap {
		w("| %d | %d | %d | %s → %s | %s | %s → %s | %s | %s | %s | %s | %s |\n", h.Wanted, h.Open, h.Failed,
			fmtF(h.BaselineLiveMiB, liveDigits(h)), fmtF(h.LiveMiB, liveDigits(h)), fmtF(h.LivePerStreamKB, 1),
			fmtF(h.BaselineInuseMiB, 1), fmtF(h.InuseMiB, 1), fmtF(h.InusePerStreamKB, 1),
			fmtF(h.StackPerStreamKB, 1), fmtF(h.GoroutinesPer, 1), fmtF(h.RSSPerStreamKB, 1), fmtF(h.OpenSeconds, 1))
	}
	for _, h := range r.Heap {
		if h.Note != "" {
			w("\n%d streams: %s\n", h.Wanted, h.Note)
		}
	}
	w("\n")
}

func renderProfile(w writer, r *Report) {
	p := r.Profile
	if p == nil {
		return
	}
	w("## Where the gateway's CPU goes\n\n")
	if len(p.PerfGroups) > 0 {
		w("`perf record -g` on the running gateway for %gs while the Switchyard arm ran at %d rps (upstream latency %s; %d samples). Self time, grouped by what it does:\n\n",
			p.PerfSeconds, p.PerfRate, fmtLatency(firstLatency(r)), p.PerfSamples)
		w("| area | share of the gateway's CPU |\n|---|---|\n")
		for _, g := range p.PerfGroups {
			w("| %s | %s |\n", g.Symbol, pct(g.Share))
		}
		if len(p.PerfDSO) > 0 {
			var parts []string
			for _, d := range p.PerfDSO {
				parts = append(parts, fmt.Sprintf("%s %s", d.Symbol, pct(d.Share)))
			}
			w("\nBy where the code lives: %s.\n", strings.Join(parts, ", "))
		}
		if len(p.PerfCum) > 0 {
			w("\nInclusive time (the function and what it calls) of the parts of the request path:\n\n| share | function |\n|---|---|\n")
			for _, e := range p.PerfCum {
				w("| %s | `%s` |\n", pct(e.Share), shortSymbol(e.Symbol))
			}
		}
		w("\nTop functions by self time:\n\n| share | function |\n|---|---|\n")
		for _, e := range p.PerfTop[:min(len(p.PerfTop), 15)] {
			w("| %s | `%s` |\n", pct(e.Share), e.Symbol)
		}
		w("\nWithout hardware counters (as in most virtual machines) perf samples on a timer, and a sample that falls while interrupts are off is charged to where they come back on: ")
		w("`finish_task_switch` and `_raw_spin_unlock_irqrestore` stand for context switches and wake-ups.\n\n")
	}
	if p.PerfNote != "" {
		w("CPU samples: %s\n\n", p.PerfNote)
	}
	if len(p.PprofCum) > 0 {
		w("pprof of `BenchmarkHotPath` (gateway/openai: one chat completion through the handler in process, upstream answered at once; %s ns/op, %s allocations/op; ",
			fmtF(p.HotPathNsOp, 0), fmtF(p.HotPathAlloc, 0))
		w("the harness alone, `BenchmarkHarnessOnly`, costs %s ns/op). Cumulative share of the pipeline's parts:\n\n", fmtF(p.HarnessNsOp, 0))
		w("| cumulative | function |\n|---|---|\n")
		for _, e := range p.PprofCum {
			w("| %s | `%s` |\n", pct(e.Share), shortSymbol(e.Symbol))
		}
		w("\nTop functions by self time:\n\n| flat | function |\n|---|---|\n")
		for _, e := range p.PprofTop[:min(len(p.PprofTop), 12)] {
			w("| %s | `%s` |\n", pct(e.Share), shortSymbol(e.Symbol))
		}
		w("\n")
	}
	if p.PprofNote != "" {
		w("pprof: %s\n\n", p.PprofNote)
	}
}

func shortSymbol(s string) string {
	return strings.TrimPrefix(s, "github.com/switchyard-ai/switchyard/")
}

func firstLatency(r *Report) float64 {
	if len(r.Settings.LatenciesMS) > 0 {
		return r.Settings.LatenciesMS[0]
	}
	return 0
}

func renderRouting(w writer, r *Report) {
	rt := r.Routing
	if rt == nil {
		return
	}
	w("## Routing quality on a mixed cluster\n\n")
	w("Six simulated engines (`simengine --flavor vllm`), each behind its own `switchyard-agent`, registered with the gateway as nodes of one local model ")
	w("(`queue_timeout_ms` %.0f, falling back to a cloud model served by another simulated engine: time to first token %.0f ms, %.0f tokens per second, no slot limit). ", rt.QueueTimeoutMS, rt.CloudTTFTMS, rt.CloudTPS)
	w("nginx runs in front of the same six engines (directly, no agent), once with its default round-robin and once with `least_conn`; it has no cloud to spill to.\n\n")
	w("| node | engine slots | slots the agent advertises | time to first token ms | tokens per second | capacity req/s |\n|---|---|---|---|---|---|\n")
	for _, n := range rt.Nodes {
		w("| %s | %d | %d | %.0f | %.0f | %.2f |\n", n.ID, n.EngineSlots, n.AgentSlots, n.TTFTMS, n.TPS, nodeCapacity(n, rt.Tokens))
	}
	w("\nEvery request streams %d tokens. A node's capacity = engine slots ÷ (time to first token + %d ÷ tokens per second); ", rt.Tokens, rt.Tokens)
	w("the cluster's = their sum = %.2f req/s, and the arrivals average %.0f %% of it: %.2f req/s. ", rt.CapacityRPS, 100*rt.Load, rt.RateRPS)
	w("*steady* = Poisson arrivals; *bursty* = Poisson at twice the mean rate for 2 s of every 10 s and 0.75× between (the same mean, peaks at %.0f %% of capacity). ", 200*rt.Load)
	w("Every arm replays the same arrivals: %gs not measured (the gateway learns the nodes' speeds), then %gs measured; the engines are drained between arms. ", rt.WarmupS, rt.DurationS)
	w("Queue wait = the client's time to first token − the serving engine's own time to first token (read from `X-Switchyard-Target` or nginx's `$upstream_addr`). ")
	w("A request that failed or got no answer within the timeout counts as that timeout in every percentile (shown as ≥).\n\n")
	w("| pattern | arm | requests | failed | TTFT p50 ms | TTFT p90 ms | end-to-end p50 ms | p90 ms | p99 ms | queue wait p99 ms | spilled to cloud | served by |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, run := range rt.Runs {
		to := run.TimeoutMS
		w("| %s | %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", run.Pattern, run.Arm, run.Requests, run.Failed,
			fmtCensored(run.TTFT.P50MS, to), fmtCensored(run.TTFT.P90MS, to), fmtCensored(run.EndToEnd.P50MS, to),
			fmtCensored(run.EndToEnd.P90MS, to), fmtCensored(run.EndToEnd.P99MS, to), fmtCensored(run.QueueWait.P99MS, to),
			pct(run.Spilled), servedBy(run.ByServer))
	}
	w("\n")
}

// servedBy lists how many requests each server took, by class.
func servedBy(m map[string]int) string {
	classes := map[string]int{}
	total := 0
	for k, v := range m {
		c, _, _ := strings.Cut(k, "-")
		classes[c] += v
		total += v
	}
	if total == 0 {
		return "—"
	}
	var parts []string
	for _, c := range []string{"fast", "medium", "slow", "cloud", "unknown"} {
		if v := classes[c]; v > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f %%", c, 100*float64(v)/float64(total)))
		}
	}
	return strings.Join(parts, ", ")
}

func renderGoBench(w writer, r *Report) {
	if len(r.GoBench) == 0 {
		return
	}
	w("## Benchmarks beside the code\n\n")
	w("`go test -run '^$' -bench '%s' -benchmem` on %s (Redis benchmarks on the same Redis):\n\n", goBenchPattern, strings.Join(goBenchPackages(), " "))
	w("| package | benchmark | ns/op | B/op | allocs/op |\n|---|---|---|---|---|\n")
	for _, g := range r.GoBench {
		w("| %s | %s | %s | %s | %s |\n", shortSymbol(g.Package), g.Name, fmtF(g.NsPerOp, 0), fmtF(g.BytesPerOp, 0), fmtF(g.AllocsPerOp, 0))
	}
	w("\n")
}

func renderNotes(w writer, r *Report) {
	if len(r.Notes) == 0 && len(r.Errors) == 0 && len(r.Analysis) == 0 {
		return
	}
	w("## Notes\n\n")
	for _, n := range r.Notes {
		w("- %s\n", n)
	}
	for _, n := range r.Analysis {
		w("- %s\n", n)
	}
	for _, k := range sortedKeys(r.Errors) {
		w("- The %s phase failed: %s\n", k, r.Errors[k])
	}
	w("\n")
}

func fmtLookup(m map[string]float64, k string, d int) string {
	v, ok := m[k]
	if !ok {
		return "n/a"
	}
	return fmtF(v, d)
}
