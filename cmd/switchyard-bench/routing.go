package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// routingNode is one simulated GPU node of the routing phase.
type routingNode struct {
	ID          string  `json:"id"`
	Class       string  `json:"class"` // fast, medium, slow
	EngineSlots int     `json:"engine_slots"`
	AgentSlots  int     `json:"agent_slots"` // what the agent advertises to the gateway
	TPS         float64 `json:"tps"`
	TTFTMS      float64 `json:"ttft_ms"`
}

// routingCluster is the mixed cluster: two fast nodes, two medium, and two
// slow ones with a queue: their engine runs two requests at a time, while
// their agent advertises the default four slots (an engine that does not
// say how many it runs), so that up to two requests wait inside the engine.
func routingCluster() []routingNode {
	return []routingNode{
		{ID: "fast-1", Class: "fast", EngineSlots: 4, AgentSlots: 4, TPS: 100, TTFTMS: 50},
		{ID: "fast-2", Class: "fast", EngineSlots: 4, AgentSlots: 4, TPS: 100, TTFTMS: 50},
		{ID: "medium-1", Class: "medium", EngineSlots: 4, AgentSlots: 4, TPS: 50, TTFTMS: 100},
		{ID: "medium-2", Class: "medium", EngineSlots: 4, AgentSlots: 4, TPS: 50, TTFTMS: 100},
		{ID: "slow-1", Class: "slow", EngineSlots: 2, AgentSlots: 4, TPS: 25, TTFTMS: 200},
		{ID: "slow-2", Class: "slow", EngineSlots: 2, AgentSlots: 4, TPS: 25, TTFTMS: 200},
	}
}

// The simulated cloud: slower to start and to stream than a fast node,
// but without a slot limit.
const (
	cloudTTFTMS = 400
	cloudTPS    = 50
	// routingQueueTimeoutMS is the local model's queue_timeout_ms (the
	// product's default).
	routingQueueTimeoutMS = 2000
)

// nodeCapacity is the requests per second a node completes when always
// busy: slots ÷ (TTFT + tokens ÷ TPS).
func nodeCapacity(n routingNode, tokens int) float64 {
	return float64(n.EngineSlots) / (n.TTFTMS/1000 + float64(tokens)/n.TPS)
}

func clusterCapacity(nodes []routingNode, tokens int) float64 {
	c := 0.0
	for _, n := range nodes {
		c += nodeCapacity(n, tokens)
	}
	return c
}

// Arrival patterns.
const (
	PatternSteady = "steady" // Poisson at the mean rate
	PatternBursty = "bursty" // Poisson whose rate is 2× the mean for 2 s of every 10 s and 0.75× otherwise
)

// burstRate is the bursty pattern's rate at offset t, as a multiple of the
// mean; it averages 1 over each 10 s cycle.
func burstRate(t time.Duration) float64 {
	if t%(10*time.Second) < 2*time.Second {
		return 2
	}
	return 0.75
}

// arrivals draws arrival offsets over d at mean rate per second, from seed:
// every arm of a pattern replays the same arrivals.
func arrivals(pattern string, rate float64, d time.Duration, seed uint64) []time.Duration {
	rng := rand.New(rand.NewPCG(seed, 0x5157_c4ed))
	peak := rate
	if pattern == PatternBursty {
		peak = 2 * rate // thinning: candidates at the peak rate, kept with λ(t)/peak
	}
	var out []time.Duration
	t := time.Duration(0)
	for {
		t += time.Duration(rng.ExpFloat64() / peak * float64(time.Second))
		if t >= d {
			return out
		}
		if pattern == PatternBursty && rng.Float64() > burstRate(t)*rate/peak {
			continue
		}
		out = append(out, t)
	}
}

// routedRequest is one request of a routing run as the client saw it.
type routedRequest struct {
	At       time.Duration // arrival offset
	Measured bool          // arrived after the warm-up
	OK       bool
	TTFT     time.Duration
	Total    time.Duration
	Server   string // node id, "cloud", or "" when unknown
	Wait     time.Duration
}

// RoutingRun is one arm under one arrival pattern.
type RoutingRun struct {
	Arm     string  `json:"arm"`
	Pattern string  `json:"pattern"`
	Rate    float64 `json:"rate"`
	// Requests measured (arrived after the warm-up) and how they fared.
	Requests int `json:"requests"`
	Failed   int `json:"failed"` // error, or no answer within the routing timeout
	// Percentiles over every measured request; a failed one counts as the
	// routing timeout, so a percentile at that value is a lower bound.
	TTFT      Summary        `json:"ttft"`
	EndToEnd  Summary        `json:"end_to_end"`
	QueueWait Summary        `json:"queue_wait"`
	Spilled   float64        `json:"spilled_share"` // served by the cloud
	ByServer  map[string]int `json:"by_server"`
	TimeoutMS float64        `json:"timeout_ms"`
}

// RoutingResult is the whole routing phase.
type RoutingResult struct {
	Nodes          []routingNode `json:"nodes"`
	Tokens         int           `json:"tokens"`
	CapacityRPS    float64       `json:"capacity_rps"`
	Load           float64       `json:"load"`
	RateRPS        float64       `json:"rate_rps"`
	QueueTimeoutMS float64       `json:"queue_timeout_ms"`
	CloudTTFTMS    float64       `json:"cloud_ttft_ms"`
	CloudTPS       float64       `json:"cloud_tps"`
	WarmupS        float64       `json:"warmup_s"`
	DurationS      float64       `json:"duration_s"`
	Runs           []RoutingRun  `json:"runs"`
}

// Routing arms.
const (
	ArmNginxRR = "nginx round-robin"
	ArmNginxLC = "nginx least_conn"
)

// routingSetup is the cluster the routing phase runs on.
type routingSetup struct {
	gw      *gateway
	nodes   []routingNode
	engines map[string]*engine // by node id, plus "cloud"
	byAddr  map[string]string  // engine host:port → node id
	arms    []arm
}

func (s *routingSetup) nominalTTFT(server string) time.Duration {
	if server == "cloud" {
		return cloudTTFTMS * time.Millisecond
	}
	for _, n := range s.nodes {
		if n.ID == server {
			return time.Duration(n.TTFTMS * float64(time.Millisecond))
		}
	}
	return 0
}

// serverOf names what served a response: the gateway's target header, or
// the engine nginx picked.
func (s *routingSetup) serverOf(h http.Header) string {
	if t := h.Get("X-Switchyard-Target"); t != "" {
		kind, id, _ := strings.Cut(t, ":")
		if kind == "vendor" {
			return "cloud"
		}
		return id
	}
	addr := h.Get("X-Upstream-Addr")
	if i := strings.LastIndex(addr, ","); i >= 0 { // nginx lists every upstream it tried
		addr = strings.TrimSpace(addr[i+1:])
	}
	return s.byAddr[addr]
}

// startRouting starts the cluster: a simulated engine and an agent per
// node, the cloud engine as a vendor, the local model with the cloud as its
// fallback, and nginx with a round-robin and a least_conn listener in front
// of the same engines.
func startRouting(ctx context.Context, ps *procs, cfg Config, gw *gateway) (*routingSetup, error) {
	s := &routingSetup{gw: gw, nodes: routingCluster(), engines: map[string]*engine{}, byAddr: map[string]string{}}
	cloud, err := startEngine(ctx, ps, cfg.BinDir, "sim-cloud", "--model", "cloud-model",
		"--ttft", fmt.Sprintf("%dms", cloudTTFTMS), "--tps", fmt.Sprint(cloudTPS), "--max-tokens", fmt.Sprint(cfg.RoutingTokens))
	if err != nil {
		return nil, err
	}
	s.engines["cloud"] = cloud
	if err := gw.vendor(ctx, "cloud", cloud.url+"/v1", "cloud-model"); err != nil {
		return nil, err
	}
	if _, err := gw.call(ctx, "POST", "/admin/v1/models", map[string]any{"model": map[string]any{
		"id": "route-model", "vendor": "local", "queue_timeout_ms": routingQueueTimeoutMS,
		"fallbacks": []string{"cloud-model"}, "enabled": true,
	}}); err != nil {
		return nil, err
	}
	var upstreams []string
	for _, n := range s.nodes {
		e, err := startEngine(ctx, ps, cfg.BinDir, "sim-"+n.ID, "--flavor", "vllm", "--model", "route-model",
			"--slots", fmt.Sprint(n.EngineSlots), "--tps", fmt.Sprint(n.TPS), "--ttft", fmt.Sprintf("%gms", n.TTFTMS),
			"--max-tokens", fmt.Sprint(cfg.RoutingTokens))
		if err != nil {
			return nil, err
		}
		s.engines[n.ID] = e
		u, _ := url.Parse(e.url)
		s.byAddr[u.Host] = n.ID
		upstreams = append(upstreams, u.Host)
		m, err := gw.call(ctx, "POST", "/admin/v1/node-keys", map[string]any{"name": n.ID, "node_id": n.ID})
		if err != nil {
			return nil, err
		}
		key, _ := m["api_key"].(string)
		keyFile := filepath.Join(ps.dir, n.ID+".key")
		if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
			return nil, err
		}
		front, err := freeAddr()
		if err != nil {
			return nil, err
		}
		if _, err := ps.start("agent-"+n.ID, nil, filepath.Join(cfg.BinDir, "switchyard-agent"), "run",
			"--gateway", gw.grpc, "--node-id", n.ID, "--key-file", keyFile,
			"--engine", "vllm", "--engine-url", e.url, "--listen", front, "--advertise-url", "http://"+front,
			"--slots", fmt.Sprint(n.AgentSlots), "--log-level", "warn"); err != nil {
			return nil, err
		}
	}
	if err := s.waitHealthy(ctx, 60*time.Second); err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set("Authorization", "Bearer "+gw.client)
	s.arms = []arm{{Name: ArmSwitchyard, URL: "http://" + gw.http + "/v1/chat/completions", Header: h}}
	if cfg.Nginx != "" {
		rr, err1 := freeAddr()
		lc, err2 := freeAddr()
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		if _, err := startNginx(ctx, ps, cfg.Nginx, "nginx-routing", []nginxServer{
			{Listen: rr, Upstream: upstreams},
			{Listen: lc, Balance: "least_conn", Upstream: upstreams},
		}); err != nil {
			return nil, err
		}
		s.arms = append(s.arms,
			arm{Name: ArmNginxLC, URL: "http://" + lc + "/v1/chat/completions"},
			arm{Name: ArmNginxRR, URL: "http://" + rr + "/v1/chat/completions"})
	}
	return s, nil
}

// waitHealthy waits until the gateway lists every node healthy with the
// model.
func (s *routingSetup) waitHealthy(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		m, err := s.gw.call(ctx, "GET", "/admin/v1/nodes", nil)
		if err == nil {
			healthy := 0
			list, _ := m["nodes"].([]any)
			for _, raw := range list {
				n, _ := raw.(map[string]any)
				models, _ := n["models"].([]any)
				if n["status"] == "healthy" && len(models) > 0 {
					healthy++
				}
			}
			if healthy == len(s.nodes) {
				return nil
			}
			last = fmt.Sprintf("%d of %d nodes healthy", healthy, len(s.nodes))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("the simulated nodes did not become healthy within %v (%s)", within, last)
}

// drain waits until no engine runs or queues anything.
func (s *routingSetup) drain(ctx context.Context, within time.Duration) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		busy := 0
		for _, e := range s.engines {
			if st, err := e.stats(ctx); err == nil {
				busy += st.Running + st.Waiting
			}
		}
		if busy == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// run replays the arrivals on a: each request is sent at its offset,
// whatever the ones before it are doing (open loop).
func (s *routingSetup) run(ctx context.Context, cfg Config, a arm, pattern string, rate float64, at []time.Duration) RoutingRun {
	body := chatBody("route-model", true, cfg.RoutingTokens)
	c := streamClient()
	defer c.CloseIdleConnections()
	reqs := make([]routedRequest, len(at))
	var wg sync.WaitGroup
	start := time.Now()
	for i, off := range at {
		if !sleepUntil(ctx, start.Add(off)) {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, cancel := context.WithTimeout(ctx, cfg.RoutingTimeout)
			defer cancel()
			t := readStream(rctx, c, a.URL, a.Header, body, cfg.RoutingTokens, nil, nil)
			r := routedRequest{At: off, Measured: off >= cfg.RoutingWarmup, OK: t.Err == nil, TTFT: t.TTFT, Total: t.Total}
			if t.Header != nil {
				r.Server = s.serverOf(t.Header)
			}
			if r.OK {
				r.Wait = max(0, r.TTFT-s.nominalTTFT(r.Server))
			}
			reqs[i] = r
		}()
	}
	wg.Wait()
	return summarizeRouting(a.Name, pattern, rate, reqs, cfg.RoutingTimeout)
}

// summarizeRouting computes a run's figures over its measured requests.
// A failed request counts as timeout in every latency, so that failures
// raise the percentiles instead of disappearing from them.
func summarizeRouting(armName, pattern string, rate float64, reqs []routedRequest, timeout time.Duration) RoutingRun {
	run := RoutingRun{Arm: armName, Pattern: pattern, Rate: rate, ByServer: map[string]int{}, TimeoutMS: ms(timeout)}
	var ttft, total, wait []time.Duration
	spilled := 0
	for _, r := range reqs {
		if !r.Measured {
			continue
		}
		run.Requests++
		if !r.OK {
			run.Failed++
			ttft, total, wait = append(ttft, timeout), append(total, timeout), append(wait, timeout)
			continue
		}
		ttft, total, wait = append(ttft, r.TTFT), append(total, r.Total), append(wait, r.Wait)
		server := r.Server
		if server == "" {
			server = "unknown"
		}
		run.ByServer[server]++
		if server == "cloud" {
			spilled++
		}
	}
	if run.Requests > 0 {
		run.Spilled = float64(spilled) / float64(run.Requests)
	}
	run.TTFT, run.EndToEnd, run.QueueWait = Summarize(ttft), Summarize(total), Summarize(wait)
	return run
}

// runRouting runs every arm under each pattern on the same arrivals.
func (s *routingSetup) runRouting(ctx context.Context, cfg Config, verbose func(string, ...any)) RoutingResult {
	res := RoutingResult{
		Nodes: s.nodes, Tokens: cfg.RoutingTokens, Load: cfg.RoutingLoad,
		CapacityRPS: clusterCapacity(s.nodes, cfg.RoutingTokens), QueueTimeoutMS: routingQueueTimeoutMS,
		CloudTTFTMS: cloudTTFTMS, CloudTPS: cloudTPS,
		WarmupS: cfg.RoutingWarmup.Seconds(), DurationS: cfg.RoutingDuration.Seconds(),
	}
	res.RateRPS = cfg.RoutingLoad * res.CapacityRPS
	for pi, pattern := range []string{PatternSteady, PatternBursty} {
		at := arrivals(pattern, res.RateRPS, cfg.RoutingWarmup+cfg.RoutingDuration, cfg.Seed+uint64(pi))
		for _, a := range s.arms {
			if ctx.Err() != nil {
				return res
			}
			s.drain(ctx, 60*time.Second)
			r := s.run(ctx, cfg, a, pattern, res.RateRPS, at)
			verbose("routing %s %-18s: %d requests, %d failed, TTFT p50 %.0f ms p90 %.0f ms, e2e p50 %.0f p90 %.0f p99 %.0f ms, wait p99 %.0f ms, spilled %.1f%%",
				pattern, a.Name, r.Requests, r.Failed, r.TTFT.P50MS, r.TTFT.P90MS, r.EndToEnd.P50MS, r.EndToEnd.P90MS, r.EndToEnd.P99MS, r.QueueWait.P99MS, 100*r.Spilled)
			res.Runs = append(res.Runs, r)
		}
	}
	return res
}

// find returns the run of arm under pattern.
func (r RoutingResult) find(armName, pattern string) (RoutingRun, bool) {
	i := slices.IndexFunc(r.Runs, func(x RoutingRun) bool { return x.Arm == armName && x.Pattern == pattern })
	if i < 0 {
		return RoutingRun{}, false
	}
	return r.Runs[i], true
}

// lowerBy is how much lower a is than b, as a share of b (0.3 = 30 %
// lower); NaN when b is not positive.
func lowerBy(a, b float64) float64 {
	if b <= 0 || math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return (b - a) / b
}
