package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// These tests run the gateway with real node agents and simulated engines as
// processes on loopback, on real Postgres and Redis (SPEC §4).

// TestNodesShareTrafficBySpeed: with equal base weights, faster nodes (as
// the gateway measures them) get more of the traffic, and all of it stays
// local while the nodes have room.
func TestNodesShareTrafficBySpeed(t *testing.T) {
	c := newCluster(t, nil)
	c.localModel("llama3", 5000)
	c.node("fast", "vllm", []string{"--model", "llama3", "--tps", "400", "--ttft", "10ms", "--slots", "8"})
	c.node("medium", "vllm", []string{"--model", "llama3", "--tps", "100", "--ttft", "40ms", "--slots", "8"})
	c.node("slow", "vllm", []string{"--model", "llama3", "--tps", "25", "--ttft", "150ms", "--slots", "8"})
	c.waitStatus("healthy", 20*time.Second, "fast", "medium", "slow")
	for i := 0; i < 45; i++ {
		a := c.chat("llama3", 12)
		if a.status != 200 || !strings.HasPrefix(a.target(), "node:") {
			t.Fatalf("request %d: %d %s %s", i, a.status, a.target(), a.body)
		}
	}
	served := map[string]int64{}
	for id, e := range c.envs {
		served[id] = simStats(t, e.url).Served
	}
	t.Logf("served: %v", served)
	if !(served["fast"] > served["medium"] && served["medium"] > served["slow"]) {
		t.Fatalf("shares do not follow speed: %v", served)
	}
	if c.cloud.hits.Load() != 0 {
		t.Fatalf("%d requests went to the cloud while nodes had room", c.cloud.hits.Load())
	}
	ns := c.nodes()
	if ns["fast"].Models[0].TPS <= ns["slow"].Models[0].TPS {
		t.Fatalf("measured TPS: fast %v, slow %v", ns["fast"].Models[0].TPS, ns["slow"].Models[0].TPS)
	}
}

// TestNodeWeightsSetTheShares: identical nodes with base weights 3:2:1 share
// sequential traffic in those proportions (exactly so in the scheduler's own
// tests; here within what measured speeds move them).
func TestNodeWeightsSetTheShares(t *testing.T) {
	c := newCluster(t, nil)
	c.localModel("llama3", 5000)
	for _, id := range []string{"w3", "w2", "w1"} {
		c.node(id, "vllm", []string{"--model", "llama3", "--tps", "2000", "--slots", "8"})
	}
	c.admin("POST", "/admin/v1/nodes/w3:setWeight", `{"weight":3}`)
	c.admin("POST", "/admin/v1/nodes/w2:setWeight", `{"weight":2}`)
	c.waitStatus("healthy", 20*time.Second, "w3", "w2", "w1")
	time.Sleep(1200 * time.Millisecond) // the weights reach the catalog
	const n = 60
	for i := 0; i < n; i++ {
		if a := c.chat("llama3", 4); a.status != 200 {
			t.Fatalf("request %d: %d %s", i, a.status, a.body)
		}
	}
	got := map[string]float64{}
	for id, e := range c.envs {
		got[id] = float64(simStats(t, e.url).Served) / n
	}
	t.Logf("shares: %v", got)
	for id, want := range map[string]float64{"w3": 0.5, "w2": 1.0 / 3, "w1": 1.0 / 6} {
		if d := got[id] - want; d > 0.12 || d < -0.12 {
			t.Errorf("%s share %.2f, want %.2f", id, got[id], want)
		}
	}
}

// TestWarmOnlyAndContextWindow: a node with the model loaded is preferred
// to one where it is cold, and a node whose context window cannot hold the
// request is never chosen.
func TestWarmOnlyAndContextWindow(t *testing.T) {
	c := newCluster(t, nil)
	c.localModel("qwen3", 5000)
	c.node("cold", "ollama", []string{"--model", "qwen3", "--ollama-unloaded", "--tps", "2000"})
	c.node("warm", "vllm", []string{"--model", "qwen3", "--tps", "2000"})
	c.localModel("longctx", 5000)
	c.node("small", "vllm", []string{"--model", "longctx", "--context", "2048", "--tps", "5000", "--max-tokens", "8000"})
	c.node("large", "vllm", []string{"--model", "longctx", "--context", "32768", "--tps", "5000", "--max-tokens", "8000"})
	c.waitStatus("healthy", 20*time.Second, "cold", "warm", "small", "large")
	for i := 0; i < 8; i++ {
		if a := c.chat("qwen3", 4); a.target() != "node:warm" {
			t.Fatalf("request %d went to %s (%d %s)", i, a.target(), a.status, a.body)
		}
		if a := c.chat("longctx", 4000); a.target() != "node:large" {
			t.Fatalf("long request %d went to %s (%d %s)", i, a.target(), a.status, a.body)
		}
	}
	if s := simStats(t, c.envs["cold"].url); s.Served != 0 {
		t.Fatalf("the cold node served %d", s.Served)
	}
	// A short request may go to either node of longctx.
	if a := c.chat("longctx", 10); a.status != 200 {
		t.Fatalf("short request: %d %s", a.status, a.body)
	}
}

// TestSaturatedPoolSpills: with every slot taken, auto traffic spills to the
// cloud model at once and nodes-only answers 503 no_capacity.
func TestSaturatedPoolSpills(t *testing.T) {
	c := newCluster(t, nil)
	c.localModel("llama3", 2000)
	c.node("only", "vllm", []string{"--model", "llama3", "--tps", "10", "--slots", "4"}, "--slots", "1")
	c.waitStatus("healthy", 20*time.Second, "only")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // holds the one slot for about 3 s
		defer wg.Done()
		if a := c.chat("llama3", 30); a.target() != "node:only" {
			t.Errorf("first request went to %s", a.target())
		}
	}()
	if !eventually(5*time.Second, func() bool { return simStats(t, c.envs["only"].url).Running == 1 }) {
		t.Fatal("the first request never reached the node")
	}
	a := c.chat("llama3", 5)
	if a.status != 200 || a.target() != "vendor:cloud" || !strings.Contains(a.header.Get("X-Switchyard-Fallback-Reason"), "llama3=no_slot") {
		t.Fatalf("auto while saturated: %d %s %q", a.status, a.target(), a.header.Get("X-Switchyard-Fallback-Reason"))
	}
	a = c.chat("llama3:nodes-only", 5)
	if a.status != 503 || !strings.Contains(a.body, "no_capacity") || a.header.Get("Retry-After") == "" {
		t.Fatalf("nodes-only while saturated: %d %s Retry-After %q", a.status, a.body, a.header.Get("Retry-After"))
	}
	a = c.chat("llama3:cloud-only", 5)
	if a.target() != "vendor:cloud" {
		t.Fatalf("cloud-only went to %s", a.target())
	}
	wg.Wait()
	if a := c.chat("llama3:nodes-only", 3); a.status != 200 || a.target() != "node:only" {
		t.Fatalf("after the slot freed: %d %s", a.status, a.target())
	}
}

// TestTwoReplicasNeverExceedSlots: two gateway replicas sharing Postgres and
// Redis, each sending nodes-only traffic to one node with two slots: the
// engine never runs more than two of their requests at once.
func TestTwoReplicasNeverExceedSlots(t *testing.T) {
	c := newCluster(t, nil)
	c.localModel("llama3", 2000)
	c.node("shared", "vllm", []string{"--model", "llama3", "--tps", "40", "--slots", "32"}, "--slots", "2")
	c.waitStatus("healthy", 20*time.Second, "shared")
	second := startServe(t, c.gw.replicaEnv(t))
	if !eventually(10*time.Second, func() bool {
		_, m, _ := second.call(t, "GET", "/admin/v1/nodes", second.admin, "")
		return strings.Contains(fmt.Sprint(m), "healthy")
	}) {
		t.Fatal("the second replica never saw the node")
	}
	var maxRunning atomic.Int64
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if r := int64(simStats(t, c.envs["shared"].url).Running); r > maxRunning.Load() {
				maxRunning.Store(r)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		addr := c.gw.http
		if i%2 == 1 {
			addr = second.http
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 3; j++ {
				a := chatTo(t, addr, c.client, "llama3:nodes-only", 12, false)
				switch a.status {
				case 200:
					ok.Add(1)
				case 503:
					refused.Add(1)
					time.Sleep(50 * time.Millisecond)
				default:
					t.Errorf("status %d: %s", a.status, a.body)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	t.Logf("served %d, refused %d, most running at once %d", ok.Load(), refused.Load(), maxRunning.Load())
	if maxRunning.Load() > 2 {
		t.Fatalf("the node ran %d requests at once with 2 slots", maxRunning.Load())
	}
	if ok.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("served %d, refused %d: the test did not contend", ok.Load(), refused.Load())
	}
}

// TestLeaseOutlivesItsTTL: a stream four times longer than the slot lease's
// TTL keeps its slot by renewal.
func TestLeaseOutlivesItsTTL(t *testing.T) {
	c := newCluster(t, map[string]string{"SWITCHYARD_SLOT_TTL": "1s"})
	c.localModel("llama3", 1000)
	c.node("one", "vllm", []string{"--model", "llama3", "--tps", "10", "--slots", "4"}, "--slots", "1")
	c.waitStatus("healthy", 20*time.Second, "one")
	done := make(chan answer, 1)
	go func() { done <- chatTo(t, c.gw.http, c.client, "llama3:nodes-only", 40, true) }()
	if !eventually(5*time.Second, func() bool { return simStats(t, c.envs["one"].url).Running == 1 }) {
		t.Fatal("the stream never reached the node")
	}
	for _, at := range []time.Duration{1500 * time.Millisecond, 1500 * time.Millisecond} {
		time.Sleep(at)
		if a := c.chat("llama3:nodes-only", 3); a.status != 503 {
			t.Fatalf("while the long stream runs (TTL 1s), another request got %d %s: the lease was lost", a.status, a.target())
		}
	}
	if a := <-done; a.status != 200 || !strings.Contains(a.body, "[DONE]") {
		t.Fatalf("the long stream: %d %.200s", a.status, a.body)
	}
	if a := c.chat("llama3:nodes-only", 3); a.status != 200 {
		t.Fatalf("after the stream: %d %s", a.status, a.body)
	}
}

// TestKilledReplicasLeasesExpire: a replica killed while it holds a slot
// leaves its lease behind; the lease expires after its TTL and the other
// replica takes the slot.
func TestKilledReplicasLeasesExpire(t *testing.T) {
	c := newCluster(t, map[string]string{"SWITCHYARD_SLOT_TTL": "2s"})
	c.localModel("llama3", 1000)
	c.node("one", "vllm", []string{"--model", "llama3", "--tps", "5", "--slots", "4"}, "--slots", "1")
	c.waitStatus("healthy", 20*time.Second, "one")
	env := c.gw.replicaEnv(t)
	var penv []string
	for k, v := range env {
		penv = append(penv, k+"="+v)
	}
	victim := startProc(t, "switchyard", penv, "serve")
	if !eventually(20*time.Second, func() bool { return get(t, "http://"+env["SWITCHYARD_HTTP_ADDR"]+"/readyz") == 200 }) {
		t.Fatal("the second replica never got ready")
	}
	if !eventually(10*time.Second, func() bool {
		_, m, _ := c.gw.call(t, "GET", "/admin/v1/nodes", c.gw.admin, "")
		return strings.Contains(fmt.Sprint(m), "healthy")
	}) {
		t.Fatal("node not healthy")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		body := `{"model":"llama3:nodes-only","max_tokens":60,"stream":true,"messages":[{"role":"user","content":"x"}]}`
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+env["SWITCHYARD_HTTP_ADDR"]+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+c.client)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body) // ends when the victim dies
			resp.Body.Close()
		}
	}()
	if !eventually(15*time.Second, func() bool { return simStats(t, c.envs["one"].url).Running == 1 }) {
		t.Fatal("the victim's stream never reached the node")
	}
	victim.kill() // SIGKILL: nothing is released
	killed := time.Now()
	if a := c.chat("llama3:nodes-only", 2); a.status != 503 {
		t.Fatalf("right after the kill the slot should still be leased: %d %s", a.status, a.body)
	}
	if !eventually(6*time.Second, func() bool { return c.chat("llama3:nodes-only", 2).status == 200 }) {
		t.Fatal("the dead replica's lease never expired")
	}
	t.Logf("slot free again %v after the kill", time.Since(killed).Round(100*time.Millisecond))
}

// TestKilledAgentGoesSuspectThenOffline: traffic moves off a node whose
// agent died.
func TestKilledAgentGoesSuspectThenOffline(t *testing.T) {
	c := newCluster(t, nil)
	c.localModel("llama3", 5000)
	doomed := c.node("doomed", "vllm", []string{"--model", "llama3", "--tps", "2000"})
	c.node("steady", "vllm", []string{"--model", "llama3", "--tps", "2000"})
	c.waitStatus("healthy", 20*time.Second, "doomed", "steady")
	doomed.kill()
	c.envs["doomed"].kill()
	if !eventually(5*time.Second, func() bool { return c.nodes()["doomed"].Status == "suspect" }) {
		t.Fatalf("never suspect: %+v", c.nodes()["doomed"])
	}
	if !eventually(5*time.Second, func() bool { return c.nodes()["doomed"].Status == "offline" }) {
		t.Fatalf("never offline: %+v", c.nodes()["doomed"])
	}
	for i := 0; i < 10; i++ {
		if a := c.chat("llama3", 3); a.status != 200 || a.target() != "node:steady" {
			t.Fatalf("request %d: %d %s", i, a.status, a.target())
		}
	}
	if _, ok := c.nodes()["doomed"]; !ok {
		t.Fatal("an offline node must stay listed")
	}
}

// TestDrainingNodeFinishesItsWork: SIGTERM to an agent drains it: its
// in-flight stream completes, it gets no new requests, it exits cleanly.
func TestDrainingNodeFinishesItsWork(t *testing.T) {
	c := newCluster(t, nil)
	c.localModel("llama3", 5000)
	leaving := c.node("leaving", "vllm", []string{"--model", "llama3", "--tps", "15", "--slots", "4"}, "--shutdown-timeout", "20s")
	c.node("staying", "vllm", []string{"--model", "llama3", "--tps", "2000"})
	c.waitStatus("healthy", 20*time.Second, "leaving", "staying")
	c.admin("POST", "/admin/v1/nodes/staying:drain", `{"drain":true}`) // send the stream to "leaving"
	time.Sleep(1200 * time.Millisecond)
	done := make(chan answer, 1)
	go func() { done <- chatTo(t, c.gw.http, c.client, "llama3:nodes-only", 30, true) }()
	if !eventually(5*time.Second, func() bool { return simStats(t, c.envs["leaving"].url).Running == 1 }) {
		t.Fatal("the stream never reached the node")
	}
	c.admin("POST", "/admin/v1/nodes/staying:drain", `{"drain":false}`)
	time.Sleep(1200 * time.Millisecond)
	_ = leaving.cmd.Process.Signal(syscall.SIGTERM)
	if !eventually(5*time.Second, func() bool { return c.nodes()["leaving"].Draining }) {
		t.Fatal("the node never reported draining")
	}
	before := simStats(t, c.envs["leaving"].url).Served
	for i := 0; i < 6; i++ {
		if a := c.chat("llama3", 3); a.target() != "node:staying" {
			t.Fatalf("a draining node's peer was not used: %s (%d %s)", a.target(), a.status, a.body)
		}
	}
	a := <-done
	if a.status != 200 || !strings.Contains(a.body, "[DONE]") {
		t.Fatalf("the in-flight stream: %d %.300s", a.status, a.body)
	}
	select {
	case <-leaving.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not exit after draining")
	}
	if code := leaving.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("the agent exited %d", code)
	}
	if after := simStats(t, c.envs["leaving"].url).Served; after != before+1 && after != before {
		t.Fatalf("the draining node took new work: served %d → %d", before, after)
	}
}

// TestBlockedNodeAddressesAreNeverDialled: a node advertising an address
// outside SWITCHYARD_NODE_NETWORKS, or a cloud-metadata address, gets no
// connection; the request moves on to the cloud.
func TestBlockedNodeAddressesAreNeverDialled(t *testing.T) {
	c := newCluster(t, map[string]string{"SWITCHYARD_NODE_NETWORKS": "10.0.0.0/8"})
	c.localModel("llama3", 5000)
	c.node("loopback", "vllm", []string{"--model", "llama3"})
	c.waitStatus("healthy", 20*time.Second, "loopback")
	a := c.chat("llama3", 3)
	if a.status != 200 || a.target() != "vendor:cloud" || !strings.Contains(a.header.Get("X-Switchyard-Fallback-Reason"), "blocked") {
		t.Fatalf("%d %s %q", a.status, a.target(), a.header.Get("X-Switchyard-Fallback-Reason"))
	}
	if s := simStats(t, c.envs["loopback"].url); s.Served != 0 {
		t.Fatal("a node outside the allowed networks was dialled")
	}
}

// TestMetadataAddressIsNeverDialled: even with everything allowed, the
// metadata address is refused.
func TestMetadataAddressIsNeverDialled(t *testing.T) {
	c := newCluster(t, map[string]string{"SWITCHYARD_NODE_NETWORKS": "0.0.0.0/0,127.0.0.0/8,169.254.0.0/16"})
	c.localModel("llama3", 5000)
	c.node("meta", "vllm", []string{"--model", "llama3"}, "--advertise-url", "http://169.254.169.254:80")
	c.waitStatus("healthy", 20*time.Second, "meta")
	a := c.chat("llama3", 3)
	if a.status != 200 || a.target() != "vendor:cloud" || !strings.Contains(a.header.Get("X-Switchyard-Fallback-Reason"), "blocked") {
		t.Fatalf("%d %s %q", a.status, a.target(), a.header.Get("X-Switchyard-Fallback-Reason"))
	}
}
