package main

import (
	"fmt"
	"math"
	"strings"
)

// analysis turns the figures into the closing notes: for every target
// missed, where the time or the requests went, from this run's own
// numbers. The proposals are the ones the figures point at; they are
// written as proposals, since the bench measures and does not change the
// gateway.
func analysis(r *Report) []string {
	var notes []string
	missed := map[string]bool{}
	for _, t := range r.Targets {
		if t.Status == statusMissed {
			missed[targetKind(t.Name)] = true
		}
	}
	if missed["overhead"] {
		notes = append(notes, overheadNote(r)...)
	}
	if missed["routing"] {
		notes = append(notes, routingNote(r)...)
	}
	if missed["heap"] {
		notes = append(notes, heapNote(r)...)
	}
	return notes
}

// heapNote says what a held stream keeps, where the heap per stream is
// above the target.
func heapNote(r *Report) []string {
	var worst HeapPoint
	for _, h := range r.Heap {
		if h.LivePerStreamKB > worst.LivePerStreamKB {
			worst = h
		}
	}
	if worst.Open == 0 {
		return nil
	}
	return []string{fmt.Sprintf(
		"A held stream keeps %s KiB of live heap in the gateway (at %d streams), plus %s KiB of goroutine stacks (%s goroutines: the server connection, the background read net/http starts while a handler runs, and the upstream transport's read and write loops). "+
			"Its buffers, about 14 KiB: the client connection's 4 KiB reader, 4 KiB writer and 2 KiB response buffer (net/http's, fixed), the upstream connection's 2 KiB reader and 1 KiB writer (gateway/upstream/upstream.go) and the SSE reader's 512 bytes (gateway/upstream/sse.go, readBufSize); "+
			"the rest is the request's own state (headers, the parsed request, the call's bookkeeping) and the transport's per-connection state.",
		fmtF(worst.LivePerStreamKB, 1), worst.Open, fmtF(worst.StackPerStreamKB, 1), fmtF(worst.GoroutinesPer, 0))}
}

func targetKind(name string) string {
	switch {
	case strings.HasPrefix(name, "routing"):
		return "routing"
	case strings.HasPrefix(name, "heap"):
		return "heap"
	default:
		return "overhead"
	}
}

// overheadNote says where the gateway's time went when it added more
// than the targets allow.
func overheadNote(r *Report) []string {
	var notes []string
	for _, p := range r.Overhead {
		sy, ok := p.Arms[ArmSwitchyard]
		if !ok || p.Rate != 2000 {
			continue
		}
		u := p.Proc[ArmSwitchyard]
		ng := p.Proc[ArmNginx]
		notes = append(notes, fmt.Sprintf(
			"At 2000 rps (upstream %s) Switchyard added %s ms at p50 and %s ms at p99 while using %s CPU cores (nginx: %s); its own histogram puts the in-process overhead at %s ms mean, p99 ≤ %s ms. "+
				"The rest of the added latency lies outside what that histogram times: the extra sockets and HTTP parsing, the work done after it is observed, and waiting for a CPU on a machine whose cores the load generator, the engine and the databases share.",
			fmtLatency(p.UpstreamLatencyMS), fmtF(sy.AddedP50MS.Median, 2), fmtF(sy.AddedP99MS.Median, 2), median(u.CPUCores, 2), median(ng.CPUCores, 2),
			median(sy.InProcMean, 3), median(sy.InProcP99, 3)))
	}
	if a := r.Ablation; a != nil {
		on, okOn := a.RoundTripsP50[ArmLimits]
		off, okOff := a.RoundTripsP50[ArmNoLimits]
		switch {
		case okOn && okOff && off >= 0.5:
			cpu := ""
			if p := r.Profile; p != nil {
				for _, e := range p.PerfCum {
					if strings.HasSuffix(e.Symbol, "gateway/redisstate.(*Redis).Do") {
						cpu = fmt.Sprintf(" Those calls also cost CPU: under load at %d rps, %s of the gateway's CPU samples fall in redisstate.(*Redis).Do and what it calls (perf, inclusive).", p.PerfRate, pct(e.Share))
					}
				}
			}
			notes = append(notes, fmt.Sprintf(
				"With Redis slowed down, a request waits for %.1f Redis round trips when its tenant has limits and %.1f when it has none. "+
					"The one a tenant with limits must wait for is the limit check before the upstream call (redisstate.Limiter.Admit); the token count after the answer (Limiter.Record) runs after the answer is flushed, off the request.%s",
				on, off, cpu))
		case okOn && okOff:
			notes = append(notes, fmt.Sprintf("With Redis slowed down, a request waits for %.1f Redis round trips when its tenant has limits and %.1f when it has none.", on, off))
		}
	}
	notes = append(notes, churnNote(r)...)
	if p := r.Profile; p != nil && len(p.PerfGroups) > 0 {
		var parts []string
		for _, g := range p.PerfGroups[:min(len(p.PerfGroups), 6)] {
			parts = append(parts, fmt.Sprintf("%s %s", g.Symbol, pct(g.Share)))
		}
		notes = append(notes, "perf on the gateway under load (self time): "+strings.Join(parts, "; ")+".")
	}
	if p := r.Profile; p != nil && len(p.PprofCum) > 0 {
		var parts []string
		for _, e := range p.PprofCum[:min(len(p.PprofCum), 8)] {
			parts = append(parts, fmt.Sprintf("%s %s", shortSymbol(e.Symbol), pct(e.Share)))
		}
		notes = append(notes, fmt.Sprintf("pprof of BenchmarkHotPath (%s ns/op, %s allocations/op), cumulative: %s.", fmtF(p.HotPathNsOp, 0), fmtF(p.HotPathAlloc, 0), strings.Join(parts, "; ")))
	}
	return notes
}

// churnNote reports upstream connections the gateway closed while nginx
// kept its own, at the rates where that happened.
func churnNote(r *Report) []string {
	var parts []string
	for _, p := range r.Overhead {
		sy, ng := p.Arms[ArmSwitchyard], p.Arms[ArmNginx]
		if sy.UpstreamClosed.N == 0 || sy.UpstreamClosed.Median < 10 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s at %d rps with upstream %s (nginx %s)",
			fmtF(sy.UpstreamClosed.Median, 0), p.Rate, fmtLatency(p.UpstreamLatencyMS), fmtF(ng.UpstreamClosed.Median, 0)))
	}
	if len(parts) == 0 {
		return nil
	}
	return []string{"Switchyard closed connections to the engine during the runs (median per run): " + strings.Join(parts, "; ") + ". " +
		"The gateway's upstream transport keeps up to 1024 idle connections per host (gateway/upstream newHTTPClient), as nginx here keeps 1024 per upstream; " +
		"connections closed beyond that come from calls in flight above it, or from the upstream closing them."}
}

// routingNote compares where Switchyard and least_conn sent requests.
func routingNote(r *Report) []string {
	rt := r.Routing
	if rt == nil {
		return nil
	}
	var notes []string
	for _, pattern := range []string{PatternSteady, PatternBursty} {
		sy, ok1 := rt.find(ArmSwitchyard, pattern)
		lc, ok2 := rt.find(ArmNginxLC, pattern)
		if !ok1 || !ok2 {
			continue
		}
		notes = append(notes, fmt.Sprintf(
			"Routing, %s: Switchyard served %s (end-to-end p90 %s ms, p99 %s ms, queue wait p99 %s ms); nginx least_conn served %s (p90 %s ms, p99 %s ms, queue wait p99 %s ms).",
			pattern, servedBy(sy.ByServer), fmtF(sy.EndToEnd.P90MS, 0), fmtF(sy.EndToEnd.P99MS, 0), fmtF(sy.QueueWait.P99MS, 0),
			servedBy(lc.ByServer), fmtF(lc.EndToEnd.P90MS, 0), fmtF(lc.EndToEnd.P99MS, 0), fmtF(lc.QueueWait.P99MS, 0)))
	}
	fastest, slowest := math.Inf(1), 0.0
	fastCapacity := 0.0
	for _, n := range rt.Nodes {
		d := n.TTFTMS + float64(rt.Tokens)/n.TPS*1000
		fastest, slowest = math.Min(fastest, d), math.Max(slowest, d)
		if n.Class != "slow" {
			fastCapacity += nodeCapacity(n, rt.Tokens)
		}
	}
	if sy, ok := rt.find(ArmSwitchyard, PatternSteady); ok && sy.Requests > 0 {
		slow := 0
		for k, v := range sy.ByServer {
			if strings.HasPrefix(k, "slow") {
				slow += v
			}
		}
		if share := float64(slow) / float64(sy.Requests); share > 0.1 {
			notes = append(notes, fmt.Sprintf(
				"Why the p90: a slow node takes %.0f ms for one of these requests, and Switchyard sent %s of the steady requests to the slow nodes, more than the 10 %% a p90 can hide; "+
					"so its p90 (%s ms) is a slow node's service time. The fast and medium nodes alone offer %.2f req/s, above the %.2f req/s arriving: "+
					"a picker that sent a request to a slow node only when the faster ones would finish it later would keep nearly all of them off the slow nodes at this load.",
				slowest, pct(share), fmtF(sy.EndToEnd.P90MS, 0), fastCapacity, rt.RateRPS))
		}
	}
	notes = append(notes, fmt.Sprintf(
		"On this cluster one request takes %.0f ms on a fast node and %.0f ms on a slow one: where a request lands decides its end-to-end time more than any queue does. "+
			"SPEC §4.4's weight (base × load penalty × speed factor, then smooth weighted round-robin) spreads requests in proportion to weight, so every free node keeps receiving a share even when a faster one would finish the request sooner, "+
			"and the speed factor is clamped to [0.25, 4] and mixes TPS with TTFT-per-1k-input-tokens. "+
			"Proposal: score each candidate by its predicted completion time for this request, (requests ahead of it on the node ÷ slots + 1) × (TTFT + output tokens ÷ TPS), using the measured EWMAs and the engine's own running and waiting counts, "+
			"and pick the minimum (ties by the round-robin), with the slot filter and the Little's-law admission kept as they are; and count a slot as free only against the engine's real concurrency "+
			"(engine running + waiting), not only the slots the agent advertises, since a slow engine that runs fewer requests than advertised queues the rest inside itself.",
		fastest, slowest))
	return notes
}

// median formats a spread's median, n/a when nothing was measured.
func median(s Spread, d int) string {
	if s.N == 0 {
		return "n/a"
	}
	return fmtF(s.Median, d)
}
