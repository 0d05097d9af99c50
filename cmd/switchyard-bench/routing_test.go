package main

import (
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCapacityFormula(t *testing.T) {
	n := routingNode{EngineSlots: 4, TPS: 100, TTFTMS: 50}
	// 4 slots ÷ (0.05 s + 64 tokens ÷ 100 tokens/s) = 4 ÷ 0.69 s.
	if got, want := nodeCapacity(n, 64), 4/0.69; math.Abs(got-want) > 1e-9 {
		t.Errorf("nodeCapacity = %v, want %v", got, want)
	}
	nodes := routingCluster()
	if len(nodes) != 6 {
		t.Fatalf("the cluster has %d nodes, want 6", len(nodes))
	}
	sum := 0.0
	for _, n := range nodes {
		sum += nodeCapacity(n, 64)
	}
	if got := clusterCapacity(nodes, 64); math.Abs(got-sum) > 1e-9 {
		t.Errorf("clusterCapacity = %v, want the sum %v", got, sum)
	}
	classes := map[string]int{}
	for _, n := range nodes {
		classes[n.Class]++
		if n.Class == "slow" && n.AgentSlots <= n.EngineSlots {
			t.Errorf("slow node %s has no queue: the agent advertises %d slots for an engine running %d", n.ID, n.AgentSlots, n.EngineSlots)
		}
	}
	if classes["fast"] != 2 || classes["medium"] != 2 || classes["slow"] != 2 {
		t.Errorf("classes = %v, want two of each", classes)
	}
}

func TestArrivals(t *testing.T) {
	const rate, d = 50.0, 200 * time.Second
	for _, pattern := range []string{PatternSteady, PatternBursty} {
		t.Run(pattern, func(t *testing.T) {
			a := arrivals(pattern, rate, d, 7)
			if !slices.Equal(a, arrivals(pattern, rate, d, 7)) {
				t.Fatal("the same seed gave other arrivals: the arms would not replay the same load")
			}
			if slices.Equal(a, arrivals(pattern, rate, d, 8)) {
				t.Error("another seed gave the same arrivals")
			}
			if !slices.IsSorted(a) || a[0] < 0 || a[len(a)-1] >= d {
				t.Error("arrivals are not sorted offsets within the run")
			}
			mean := float64(len(a)) / d.Seconds()
			if math.Abs(mean-rate)/rate > 0.05 {
				t.Errorf("mean rate %.1f, want %.1f within 5 %%", mean, rate)
			}
			if pattern != PatternBursty {
				return
			}
			// Bursts: the first 2 s of every 10 s get 2× the mean.
			in, out := 0, 0
			for _, x := range a {
				if x%(10*time.Second) < 2*time.Second {
					in++
				} else {
					out++
				}
			}
			inRate, outRate := float64(in)/(0.2*d.Seconds()), float64(out)/(0.8*d.Seconds())
			if math.Abs(inRate/rate-2) > 0.15 || math.Abs(outRate/rate-0.75) > 0.1 {
				t.Errorf("burst rate %.1f×, between %.2f×; want 2× and 0.75×", inRate/rate, outRate/rate)
			}
		})
	}
	avg := 0.0
	for ms := 0; ms < 10000; ms++ {
		avg += burstRate(time.Duration(ms) * time.Millisecond)
	}
	if math.Abs(avg/10000-1) > 1e-9 {
		t.Errorf("the burst profile averages %v of the mean, want 1", avg/10000)
	}
}

func TestSummarizeRouting(t *testing.T) {
	const timeout = 30 * time.Second
	reqs := []routedRequest{
		{Measured: false, OK: true, TTFT: time.Hour, Total: time.Hour, Server: "slow-1"}, // warm-up: left out
		{Measured: true, OK: true, TTFT: 60 * time.Millisecond, Total: 700 * time.Millisecond, Server: "fast-1", Wait: 10 * time.Millisecond},
		{Measured: true, OK: true, TTFT: 450 * time.Millisecond, Total: 1700 * time.Millisecond, Server: "cloud", Wait: 50 * time.Millisecond},
		{Measured: true, OK: false},
		{Measured: true, OK: true, TTFT: 110 * time.Millisecond, Total: 1400 * time.Millisecond, Server: "medium-2"},
	}
	r := summarizeRouting(ArmSwitchyard, PatternSteady, 11.3, reqs, timeout)
	if r.Requests != 4 || r.Failed != 1 {
		t.Errorf("requests %d failed %d, want 4 and 1", r.Requests, r.Failed)
	}
	if r.Spilled != 0.25 {
		t.Errorf("spilled %v, want 1 of 4", r.Spilled)
	}
	if r.EndToEnd.MaxMS != ms(timeout) || r.EndToEnd.P99MS != ms(timeout) {
		t.Errorf("a failed request must count as the timeout: %+v", r.EndToEnd)
	}
	if r.EndToEnd.P50MS != 1400 {
		t.Errorf("end-to-end p50 = %v, want 1400 (700, 1400, 1700, timeout)", r.EndToEnd.P50MS)
	}
	if r.ByServer["fast-1"] != 1 || r.ByServer["cloud"] != 1 || r.ByServer["slow-1"] != 0 {
		t.Errorf("by server = %v", r.ByServer)
	}
	if got := servedBy(r.ByServer); got != "fast 33 %, medium 33 %, cloud 33 %" {
		t.Errorf("servedBy = %q", got)
	}
}

func TestServerOf(t *testing.T) {
	s := &routingSetup{nodes: routingCluster(), byAddr: map[string]string{"127.0.0.1:4001": "fast-1", "127.0.0.1:4005": "slow-1"}}
	for _, tc := range []struct {
		header http.Header
		want   string
	}{
		{http.Header{"X-Switchyard-Target": {"node:medium-2"}}, "medium-2"},
		{http.Header{"X-Switchyard-Target": {"vendor:cloud"}}, "cloud"},
		{http.Header{"X-Upstream-Addr": {"127.0.0.1:4001"}}, "fast-1"},
		// nginx lists every upstream it tried; the last one answered.
		{http.Header{"X-Upstream-Addr": {"127.0.0.1:4001, 127.0.0.1:4005"}}, "slow-1"},
		{http.Header{}, ""},
	} {
		if got := s.serverOf(tc.header); got != tc.want {
			t.Errorf("serverOf(%v) = %q, want %q", tc.header, got, tc.want)
		}
	}
	if s.nominalTTFT("slow-1") != 200*time.Millisecond || s.nominalTTFT("cloud") != cloudTTFTMS*time.Millisecond || s.nominalTTFT("x") != 0 {
		t.Error("nominalTTFT does not follow the cluster's settings")
	}
}

func TestRenderNginx(t *testing.T) {
	conf, err := renderNginx("/run/bench", []nginxServer{
		{Listen: "127.0.0.1:9001", Upstream: []string{"127.0.0.1:8001", "127.0.0.1:8002"}},
		{Listen: "127.0.0.1:9002", Balance: "least_conn", Upstream: []string{"127.0.0.1:8001"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"daemon off;", "pid /run/bench/nginx.pid;", "access_log off;",
		"upstream up0 {\n        server 127.0.0.1:8001 max_fails=0;\n        server 127.0.0.1:8002 max_fails=0;\n        keepalive 1024;",
		"upstream up1 {\n        least_conn;\n        server 127.0.0.1:8001 max_fails=0;",
		"listen 127.0.0.1:9001 backlog=65535;", "proxy_pass http://up1;",
		`proxy_set_header Connection "";`, "proxy_http_version 1.1;", "proxy_buffering off;",
		"add_header X-Upstream-Addr $upstream_addr always;",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("configuration lacks %q:\n%s", want, conf)
		}
	}
	if strings.Count(conf, "least_conn;") != 1 {
		t.Error("least_conn must be on the second upstream only")
	}
	if _, err := renderNginx("/x", []nginxServer{{Listen: "a:1", Balance: "ip_hash", Upstream: []string{"b:2"}}}); err == nil {
		t.Error("an unsupported balance method was accepted")
	}
	if _, err := renderNginx("/x", []nginxServer{{Listen: "a:1"}}); err == nil {
		t.Error("a server without upstreams was accepted")
	}
}
