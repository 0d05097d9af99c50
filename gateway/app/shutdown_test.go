package app

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/switchyard-ai/switchyard/internal/simengine"
	"github.com/switchyard-ai/switchyard/internal/testenv"
)

// SPEC §10: on SIGTERM the gateway turns /readyz to 503, stops taking new
// connections, gives in-flight requests SWITCHYARD_SHUTDOWN_TIMEOUT,
// flushes metering and exits. The tests cancel the context serve runs
// under, which is what the binary's main does on SIGTERM.

// refused reports whether a new TCP connection to addr is refused.
func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return true
	}
	c.Close()
	return false
}

// inFlight starts n chat completions of maxTokens output each, streaming
// or not, and returns their answers once all have ended.
func inFlight(t *testing.T, g *gatewayRun, key string, n, maxTokens int, stream bool) func() []answer {
	t.Helper()
	out := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = chatTo(t, g.http, key, "cloud-model", maxTokens, stream)
		}()
	}
	return func() []answer { wg.Wait(); return out }
}

// complete checks that an answer is a whole, successful completion.
func complete(a answer, stream bool, maxTokens int) bool {
	if a.status != 200 {
		return false
	}
	if stream {
		return strings.Contains(a.body, "data: [DONE]") && strings.Count(a.body, `"delta"`) >= maxTokens
	}
	return strings.Contains(a.body, `"completion_tokens":`) && strings.Contains(a.body, `"finish_reason":"length"`)
}

// TestShutdownDrainsInFlightAndFlushesMetering sends SIGTERM (cancels
// serve's context) while three streaming and three non-streaming requests,
// 2 s each, are in flight, with SWITCHYARD_SHUTDOWN_TIMEOUT=10s and no
// drain delay.
//
// Pass criterion: new connections are refused within 1 s; all six
// requests finish whole (streams to their [DONE]) with 200; serve returns
// 0 within the shutdown timeout; after it has returned, the six usage rows
// are in Postgres (metering flushed).
func TestShutdownDrainsInFlightAndFlushesMetering(t *testing.T) {
	url := testenv.Postgres(t)
	g := startGateway(t, map[string]string{"SWITCHYARD_DATABASE_URL": url, "SWITCHYARD_SHUTDOWN_TIMEOUT": "10s"}, true)
	setup := configure(t, g, simengine.Config{TPS: 20})
	key, keyID := newClientKey(t, g, "in-flight")
	waitMeteringIdle(t, g)

	const maxTokens = 40 // 2 s at 20 tokens/s
	hits := setup.hits.Load()
	streams := inFlight(t, g, key, 3, maxTokens, true)
	plain := inFlight(t, g, key, 3, maxTokens, false)
	if !eventually(10*time.Second, func() bool { return setup.hits.Load() >= hits+6 }) {
		t.Fatal("the requests never reached the vendor")
	}
	time.Sleep(200 * time.Millisecond) // the streams have begun to flow

	start := time.Now()
	done := make(chan struct{})
	var code int
	var took time.Duration
	go func() { code, took = g.stop(t, 30*time.Second); close(done) }()
	if !eventually(time.Second, func() bool { return refused(g.http) }) {
		t.Error("new connections still accepted 1 s after SIGTERM")
	}
	refusedAfter := time.Since(start)
	ss, ps := streams(), plain()
	<-done
	for i, a := range ss {
		if !complete(a, true, maxTokens) {
			t.Errorf("stream %d cut: %d %.300s", i, a.status, a.body)
		}
	}
	for i, a := range ps {
		if !complete(a, false, maxTokens) {
			t.Errorf("request %d cut: %d %.300s", i, a.status, a.body)
		}
	}
	if code != 0 || took > 10*time.Second {
		t.Errorf("serve returned %d after %v (shutdown timeout 10 s)", code, took)
	}
	rows := usageRows(t, url, keyID, time.Time{}, time.Time{})
	if rows != 6 {
		t.Errorf("usage rows after exit: %d, want 6", rows)
	}
	t.Logf("new connections refused %v after SIGTERM; 6 in-flight requests finished; serve returned after %v; %d usage rows flushed",
		refusedAfter.Round(time.Millisecond), took.Round(time.Millisecond), rows)
}

// TestShutdownDrainDelayKeepsServingWhileNotReady sends SIGTERM with
// SWITCHYARD_SHUTDOWN_DRAIN_DELAY=1500ms and SWITCHYARD_SHUTDOWN_TIMEOUT=2s
// while a short (1 s) and a long (30 s) stream are in flight.
//
// Pass criterion: /readyz answers 503 "shutting down" and gRPC health
// NOT_SERVING within 500 ms; a new request during the delay still gets
// 200; new connections are refused once the delay is over (within 3 s);
// the short stream finishes whole; the long one is cut at the timeout, and
// serve returns within delay + timeout + 3 s.
func TestShutdownDrainDelayKeepsServingWhileNotReady(t *testing.T) {
	url := testenv.Postgres(t)
	g := startGateway(t, map[string]string{
		"SWITCHYARD_DATABASE_URL": url, "SWITCHYARD_SHUTDOWN_TIMEOUT": "2s", "SWITCHYARD_SHUTDOWN_DRAIN_DELAY": "1500ms",
	}, true)
	setup := configure(t, g, simengine.Config{TPS: 20})
	hits := setup.hits.Load()
	short := inFlight(t, g, setup.client, 1, 20, true)
	long := inFlight(t, g, setup.client, 1, 600, true)
	if !eventually(10*time.Second, func() bool { return setup.hits.Load() >= hits+2 }) {
		t.Fatal("the requests never reached the vendor")
	}
	conn, err := grpc.NewClient(g.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)

	start := time.Now()
	done := make(chan struct{})
	var code int
	var took time.Duration
	go func() { code, took = g.stop(t, 30*time.Second); close(done) }()

	waitReadyz(t, g.http, 503, "shutting down", 500*time.Millisecond)
	notReady := time.Since(start)
	if !eventually(500*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		r, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: "switchyard.v1.AdminService"})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING
	}) {
		t.Error("gRPC health still SERVING after SIGTERM")
	}
	if a := chatTo(t, g.http, setup.client, "cloud-model", 2, false); a.status != 200 {
		t.Errorf("a new request during the drain delay: %d %s", a.status, a.body)
	}
	if !eventually(3*time.Second, func() bool { return refused(g.http) }) {
		t.Error("new connections still accepted after the drain delay")
	}
	refusedAfter := time.Since(start)
	sa, la := short(), long()
	<-done
	if !complete(sa[0], true, 20) {
		t.Errorf("the short stream was cut: %d %.300s", sa[0].status, sa[0].body)
	}
	if complete(la[0], true, 600) {
		t.Error("the long stream finished although it outlasts the shutdown timeout")
	}
	if code != 0 || took > 1500*time.Millisecond+2*time.Second+3*time.Second {
		t.Errorf("serve returned %d after %v (delay 1.5 s + timeout 2 s)", code, took)
	}
	t.Logf("/readyz 503 %v after SIGTERM; connections refused %v after; serve returned after %v; long stream cut after %d bytes",
		notReady.Round(time.Millisecond), refusedAfter.Round(time.Millisecond), took.Round(time.Millisecond), len(la[0].body))
}
