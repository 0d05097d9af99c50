package app

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	pb "github.com/switchyard-ai/switchyard/proto/switchyard/v1"

	"github.com/switchyard-ai/switchyard/internal/simengine"
	"github.com/switchyard-ai/switchyard/internal/testenv"
	"github.com/switchyard-ai/switchyard/keyring"
)

// The failure tests (SPEC §8, §10) run `switchyard serve` in-process against
// private Redis and PostgreSQL servers (internal/faults) that they stop,
// pause and restart under load. Each states its pass criterion and logs
// what it measured: requests lost, errors seen, time to recover.

// gatewayRun is a `switchyard serve` whose end the test controls.
type gatewayRun struct {
	*serveRun
	cancel context.CancelFunc
	done   chan int
	exitAt atomic.Int64 // Unix ns when Main returned
}

// startGateway runs serve with env on top of defaults (own listeners, a
// keyring, a bootstrap admin key, short shutdown timeout). env must name
// SWITCHYARD_DATABASE_URL; SWITCHYARD_REDIS_URL is left unset unless env
// sets it. With waitReady it waits for /readyz 200.
func startGateway(t *testing.T, env map[string]string, waitReady bool) *gatewayRun {
	t.Helper()
	key, _ := keyring.Generate()
	full := map[string]string{
		"SWITCHYARD_ENCRYPTION_KEYS":     "1:" + key,
		"SWITCHYARD_BOOTSTRAP_ADMIN_KEY": "bootstrap-key-" + testenv.Random(8),
		"SWITCHYARD_HTTP_ADDR":           testenv.Addr(t),
		"SWITCHYARD_GRPC_ADDR":           testenv.Addr(t),
		"SWITCHYARD_METRICS_ADDR":        testenv.Addr(t),
		"SWITCHYARD_SHUTDOWN_TIMEOUT":    "5s",
		"SWITCHYARD_NODE_NETWORKS":       "127.0.0.0/8",
		"SWITCHYARD_HEARTBEAT_INTERVAL":  "200ms",
		"SWITCHYARD_NODE_SUSPECT_AFTER":  "3s",
		"SWITCHYARD_NODE_OFFLINE_AFTER":  "6s",
		"SWITCHYARD_REDIS_PREFIX":        "sytest:" + testenv.Random(6) + ":",
	}
	for k, v := range env {
		full[k] = v
	}
	if full["SWITCHYARD_DATABASE_URL"] == "" {
		t.Fatal("startGateway needs SWITCHYARD_DATABASE_URL")
	}
	r := &serveRun{
		http: full["SWITCHYARD_HTTP_ADDR"], grpc: full["SWITCHYARD_GRPC_ADDR"], metrics: full["SWITCHYARD_METRICS_ADDR"],
		admin: full["SWITCHYARD_BOOTSTRAP_ADMIN_KEY"], logs: &syncWriter{}, env: full,
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &gatewayRun{serveRun: r, cancel: cancel, done: make(chan int, 1)}
	go func() {
		code := MainEnv(ctx, []string{"serve"}, io.Discard, r.logs, envOf(full))
		g.exitAt.Store(time.Now().UnixNano())
		g.done <- code
		close(g.done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code, ok := <-g.done:
			if ok && code != 0 {
				t.Errorf("serve exited %d", code)
			}
		case <-time.After(60 * time.Second):
			t.Error("serve did not stop")
		}
		if t.Failed() {
			t.Logf("--- gateway log (tail, request lines left out):\n%s", tail(withoutRequestLines(r.logs.String()), 6000))
		}
	})
	if waitReady {
		if !eventually(30*time.Second, func() bool { return get(t, "http://"+r.http+"/readyz") == 200 }) {
			t.Fatalf("never ready:\n%s", tail(r.logs.String(), 4000))
		}
	}
	return g
}

// stop cancels serve's context, as SIGTERM does in the binary, and returns
// its exit code and how long it took to return.
func (g *gatewayRun) stop(t *testing.T, within time.Duration) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	g.cancel()
	select {
	case code := <-g.done:
		return code, time.Since(start)
	case <-time.After(within):
		t.Fatalf("serve did not return within %v of its context ending", within)
		return -1, within
	}
}

// exited reports whether Main has returned.
func (g *gatewayRun) exited() bool { return g.exitAt.Load() != 0 }

// mustAdmin makes an admin REST call that must succeed.
func (g *gatewayRun) mustAdmin(t *testing.T, method, path, body string) map[string]any {
	t.Helper()
	code, m, _ := g.call(t, method, path, g.admin, body)
	if code != 200 {
		t.Fatalf("%s %s = %d %v", method, path, code, m)
	}
	return m
}

// readyz returns /readyz's status and word (0 when nothing answers).
func readyz(addr string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// waitReadyz waits until /readyz answers code and word, and returns how
// long that took.
func waitReadyz(t *testing.T, addr string, code int, word string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var gotCode int
	var gotWord string
	if !eventually(within, func() bool {
		gotCode, gotWord = readyz(addr)
		return gotCode == code && gotWord == word
	}) {
		t.Fatalf("/readyz = %d %q after %v, want %d %q", gotCode, gotWord, within, code, word)
	}
	return time.Since(start)
}

// metricSum adds up the samples of a metric on the metrics port whose label
// set contains every one of labels (`name="value"` strings).
func metricSum(t *testing.T, addr, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
next:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// dependencyErrors lists switchyard_dependency_errors_total's non-zero
// samples of one dependency, for the log.
func dependencyErrors(t *testing.T, addr, dependency string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "switchyard_dependency_errors_total{") && strings.Contains(l, `dependency="`+dependency+`"`) {
			out = append(out, strings.TrimPrefix(l, "switchyard_dependency_errors_total"))
		}
	}
	return strings.Join(out, " ")
}

// tenantSetup is what configure registers: tenant "acme" (with limits, so
// that every request runs the limiter) and its client key, a simulated
// cloud vendor serving "cloud-model", and "local-model", served by nodes,
// falling back to the cloud.
type tenantSetup struct {
	client string
	cloud  *httptest.Server
	hits   atomic.Int64
}

func configure(t *testing.T, g *gatewayRun, engine simengine.Config) *tenantSetup {
	t.Helper()
	if engine.Models == nil {
		engine.Models = []string{"cloud-model"}
	}
	s := &tenantSetup{}
	h := simengine.New(engine, nil).Handler()
	s.cloud = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.cloud.Close)
	g.mustAdmin(t, "POST", "/admin/v1/tenants", `{"tenant":{"id":"acme","requests_per_minute":100000,"tokens_per_minute":100000000}}`)
	s.client = g.mustAdmin(t, "POST", "/admin/v1/tenants/acme/keys", `{"name":"app"}`)["api_key"].(string)
	g.mustAdmin(t, "POST", "/admin/v1/vendors", `{"vendor":{"id":"cloud","base_url":"`+s.cloud.URL+`/v1","enabled":true}}`)
	g.mustAdmin(t, "POST", "/admin/v1/vendors/cloud:setKey", `{"api_key":"sk-cloud-test"}`)
	g.mustAdmin(t, "POST", "/admin/v1/models", `{"model":{"id":"cloud-model","vendor":"cloud","input_price_per_mtok":1,"output_price_per_mtok":1,"enabled":true}}`)
	g.mustAdmin(t, "POST", "/admin/v1/models", `{"model":{"id":"local-model","vendor":"local","queue_timeout_ms":5000,"fallbacks":["cloud-model"],"enabled":true}}`)
	// The replica applies its own writes at once; wait for the key to work.
	if !eventually(5*time.Second, func() bool {
		return chatTo(t, g.http, s.client, "cloud-model", 2, false).status == 200
	}) {
		t.Fatal("the configured key never worked")
	}
	return s
}

// fakeNode is a node without an agent: the test heartbeats for it over
// NodeService with its node key, advertising an in-process simulated
// engine as its front (the engine ignores the node key the gateway
// presents).
type fakeNode struct {
	id     string
	engine *httptest.Server
	served atomic.Int64
	stop   func()
}

func startFakeNode(t *testing.T, g *gatewayRun, client, id, model string, slots int) *fakeNode {
	t.Helper()
	key := g.mustAdmin(t, "POST", "/admin/v1/node-keys", fmt.Sprintf(`{"name":%q,"node_id":%q}`, id, id))["api_key"].(string)
	n := &fakeNode{id: id}
	h := simengine.New(simengine.Config{Models: []string{model}, Slots: slots, TPS: 2000}, nil).Handler()
	n.engine = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.served.Add(1)
		h.ServeHTTP(w, r)
	}))
	conn, err := grpc.NewClient(g.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	nodes := pb.NewNodeServiceClient(conn)
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key))
	hb := &pb.HeartbeatRequest{NodeId: id, AgentVersion: "test", Engine: "vllm", Url: n.engine.URL,
		Models: []*pb.NodeModelStatus{{Name: model, Warm: true, ContextWindow: 8192, Slots: int32(slots)}}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			// Longer than SWITCHYARD_NODE_OFFLINE_AFTER, as an agent's own
			// timeout is: a heartbeat held by the gateway must show.
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			_, _ = nodes.Heartbeat(cctx, hb)
			ccancel()
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	n.stop = func() {
		cancel()
		wg.Wait()
		conn.Close()
		n.engine.Close()
	}
	t.Cleanup(n.stop)
	if !eventually(10*time.Second, func() bool {
		return chatTo(t, g.http, client, model, 2, false).target() == "node:"+id
	}) {
		t.Fatalf("node %s never served", id)
	}
	return n
}

// result is one request of a load.
type result struct {
	model  string
	start  time.Time
	took   time.Duration
	status int
	target string
	err    error
}

// load sends requests from several workers until stopped.
type load struct {
	mu      sync.Mutex
	results []result
	stopped atomic.Bool
	wg      sync.WaitGroup
}

// startLoad runs workers that send send() back to back.
func startLoad(workers int, send func() result) *load {
	l := &load{}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for !l.stopped.Load() {
				r := send()
				l.mu.Lock()
				l.results = append(l.results, r)
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *load) stop() []result {
	l.stopped.Store(true)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	sort.Slice(l.results, func(i, j int) bool { return l.results[i].start.Before(l.results[j].start) })
	return l.results
}

// chatResult sends one non-streaming chat completion and times it.
func chatResult(client *http.Client, addr, key, model string) result {
	body := fmt.Sprintf(`{"model":%q,"max_tokens":3,"messages":[{"role":"user","content":"hello"}]}`, model)
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	r := result{model: model, start: time.Now()}
	resp, err := client.Do(req)
	if err != nil {
		r.took, r.err = time.Since(r.start), err
		return r
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	r.took, r.status, r.target, r.err = time.Since(r.start), resp.StatusCode, resp.Header.Get("X-Switchyard-Target"), err
	return r
}

// summary describes results for the log: count, failures, slowest, targets.
type summary struct {
	n, failed       int
	spilled         int // requests of the node-served model that went elsewhere
	slowest         time.Duration
	byTarget        map[string]int
	firstFailure    string
	p50, p99, total time.Duration
}

func summarize(rs []result) summary {
	s := summary{byTarget: map[string]int{}}
	var took []time.Duration
	for _, r := range rs {
		s.n++
		took = append(took, r.took)
		s.slowest = max(s.slowest, r.took)
		if r.err != nil || r.status != 200 {
			s.failed++
			if s.firstFailure == "" {
				s.firstFailure = fmt.Sprintf("status %d err %v at %s", r.status, r.err, r.start.Format("15:04:05.000"))
			}
			continue
		}
		kind, _, _ := strings.Cut(r.target, ":")
		s.byTarget[kind]++
		if r.model == "local-model" && kind != "node" {
			s.spilled++
		}
	}
	if len(took) > 0 {
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		s.p50, s.p99 = took[len(took)/2], took[len(took)*99/100]
	}
	return s
}

func (s summary) String() string {
	return fmt.Sprintf("%d requests, %d failed, p50 %v, p99 %v, slowest %v, served by %v, %d node requests spilled",
		s.n, s.failed, s.p50.Round(time.Millisecond), s.p99.Round(time.Millisecond), s.slowest.Round(time.Millisecond), s.byTarget, s.spilled)
}

// between returns the results that started in [from, to).
func between(rs []result, from, to time.Time) []result {
	var out []result
	for _, r := range rs {
		if !r.start.Before(from) && r.start.Before(to) {
			out = append(out, r)
		}
	}
	return out
}

// withoutRequestLines drops the per-request log lines, which drown what a
// failure report needs.
func withoutRequestLines(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, `"msg":"request"`) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
