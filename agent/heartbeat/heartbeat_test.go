package heartbeat_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard-ai/switchyard/agent/engine"
	"github.com/switchyard-ai/switchyard/agent/heartbeat"
	"github.com/switchyard-ai/switchyard/agent/internal/fakegateway"
	"github.com/switchyard-ai/switchyard/internal/simengine"
	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

const (
	nodeID      = "n1"
	nodeKey     = "syn_aaaaaaaaaaaa_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	otherKey    = "syn_cccccccccccc_dddddddddddddddddddddddddddddddd"
	frontURL    = "http://10.0.0.5:8081"
	waitTimeout = 20 * time.Second
	interval    = 50 * time.Millisecond
)

// logBuffer collects log lines from several goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), s)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type fakeGPUs struct{}

func (fakeGPUs) Collect(context.Context) ([]*switchyardv1.GpuStats, error) {
	return []*switchyardv1.GpuStats{{Index: 0, Name: "Test GPU", MemoryTotalBytes: 24 << 30}}, nil
}
func (fakeGPUs) Note() string { return "" }

type setup struct {
	gw     *fakegateway.Gateway
	sender *heartbeat.Sender
	logs   *logBuffer
	engine *simengine.Engine
}

func newSetup(t *testing.T, flavor string, key string, gwInterval time.Duration, eng heartbeat.Engine) setup {
	t.Helper()
	gw, err := fakegateway.Start(map[string]string{nodeKey: nodeID}, gwInterval)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Stop)
	var sim *simengine.Engine
	if eng == nil {
		sim = simengine.New(simengine.Config{Flavor: flavor, Models: []string{"m1", "m2"}}, nil)
		es := httptest.NewServer(sim.Handler())
		t.Cleanup(es.Close)
		a, err := engine.New(flavor, es.URL, nil, engine.Options{Slots: 3})
		if err != nil {
			t.Fatal(err)
		}
		eng = a
	}
	conn, err := heartbeat.Dial(gw.Addr(), false, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	logs := &logBuffer{}
	s := heartbeat.New(heartbeat.Options{
		Client:       switchyardv1.NewNodeServiceClient(conn),
		Reconnect:    conn.ResetConnectBackoff,
		Key:          key,
		NodeID:       nodeID,
		AgentVersion: "v9.9.9",
		URL:          frontURL,
		Engine:       eng,
		GPUs:         fakeGPUs{},
		InFlight:     func() int { return 7 },
		Logger:       slog.New(slog.NewTextHandler(logs, nil)),
	})
	return setup{gw: gw, sender: s, logs: logs, engine: sim}
}

// run starts the loop and returns a function that stops it and returns what
// Run returned.
func (s setup) run(t *testing.T) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.sender.Run(ctx) }()
	t.Cleanup(cancel)
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(waitTimeout):
			t.Fatal("Run did not return after its context ended")
			return nil
		}
	}
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func TestHeartbeatsCarryTheNodeAndArriveAtTheAnsweredInterval(t *testing.T) {
	for _, flavor := range []string{simengine.FlavorVLLM, simengine.FlavorOllama} {
		t.Run(flavor, func(t *testing.T) {
			s := newSetup(t, flavor, nodeKey, interval, nil)
			start := time.Now()
			stop := s.run(t)
			const n = 6
			if _, _, err := s.gw.WaitFor(waitCtx(t), n-1, nil); err != nil {
				t.Fatal(err)
			}
			elapsed := time.Since(start)
			if err := stop(); err != nil {
				t.Fatalf("Run = %v, want nil after its context ended", err)
			}
			// The first goes out at once, the rest every 50 ms: five
			// intervals, well under the 5 s the agent starts with.
			if elapsed < (n-1)*interval*8/10 || elapsed > 4*time.Second {
				t.Errorf("%d heartbeats took %s, want about %s", n, elapsed, (n-1)*interval)
			}
			if got := s.sender.Interval(); got != interval {
				t.Errorf("Interval() = %s, want the answered %s", got, interval)
			}

			hb := s.gw.Heartbeats()[0]
			if hb.GetNodeId() != nodeID || hb.GetAgentVersion() != "v9.9.9" || hb.GetEngine() != flavor ||
				hb.GetUrl() != frontURL || hb.GetDraining() || hb.GetInFlight() != 7 {
				t.Errorf("heartbeat header %v", hb)
			}
			if len(hb.GetGpus()) != 1 || hb.GetGpus()[0].GetName() != "Test GPU" || hb.GetGpuNote() != "" {
				t.Errorf("gpus %v note %q", hb.GetGpus(), hb.GetGpuNote())
			}
			if len(hb.GetModels()) != 2 {
				t.Fatalf("models %v, want m1 and m2", hb.GetModels())
			}
			for _, m := range hb.GetModels() {
				if !strings.HasPrefix(m.GetName(), "m") || m.GetSlots() != 3 || m.GetContextWindow() <= 0 || !m.GetWarm() {
					t.Errorf("model %v", m)
				}
				switch flavor {
				case simengine.FlavorVLLM:
					if m.EngineRunning == nil || m.EngineWaiting == nil {
						t.Errorf("vllm model %s: queue unset, want the engine's figures", m.GetName())
					}
				case simengine.FlavorOllama:
					if m.EngineRunning != nil || m.EngineWaiting != nil {
						t.Errorf("ollama model %s: queue set, want unknown", m.GetName())
					}
				}
			}
			if c := s.logs.count("accepted this node's heartbeat"); c != 1 {
				t.Errorf("logged the first acceptance %d times, want once:\n%s", c, s.logs)
			}
		})
	}
}

// queueUnknown is an engine whose metrics cannot be read.
type queueUnknown struct{}

func (queueUnknown) Kind() string { return engine.KindLlamaCpp }
func (queueUnknown) Probe(context.Context) (engine.Status, error) {
	return engine.Status{Models: []*switchyardv1.NodeModelStatus{{Name: "m1", Warm: true, Slots: 4}}},
		fmt.Errorf("llamacpp: %w: GET /metrics: 501 Not Implemented; start llama-server with --metrics", engine.ErrQueueUnknown)
}

func TestQueueUnknownStillSendsTheModels(t *testing.T) {
	s := newSetup(t, "", nodeKey, interval, queueUnknown{})
	stop := s.run(t)
	if _, _, err := s.gw.WaitFor(waitCtx(t), 2, nil); err != nil {
		t.Fatal(err)
	}
	stop()
	for _, hb := range s.gw.Heartbeats() {
		if len(hb.GetModels()) != 1 || hb.GetModels()[0].GetName() != "m1" {
			t.Fatalf("models %v, want m1", hb.GetModels())
		}
	}
	if c := s.logs.count("queue could not be read"); c != 1 {
		t.Errorf("logged the unknown queue %d times, want once per change:\n%s", c, s.logs)
	}
}

func TestRefusedKeyStopsTheLoop(t *testing.T) {
	for _, tc := range []struct {
		name, key, node string
		code            codes.Code
		msg, logged     string
	}{
		{"key of another node", nodeKey, "other", codes.PermissionDenied, `this key belongs to node "n1", not "other"`, "this key belongs to node"},
		{"unknown key", otherKey, nodeID, codes.Unauthenticated, "invalid key", "invalid key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw, err := fakegateway.Start(map[string]string{nodeKey: nodeID}, interval)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(gw.Stop)
			conn, err := heartbeat.Dial(gw.Addr(), false, "test")
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			logs := &logBuffer{}
			s := heartbeat.New(heartbeat.Options{
				Client: switchyardv1.NewNodeServiceClient(conn), Key: tc.key, NodeID: tc.node,
				Engine: queueUnknown{}, Logger: slog.New(slog.NewTextHandler(logs, nil)),
			})
			done := make(chan error, 1)
			go func() { done <- s.Run(t.Context()) }()
			select {
			case err = <-done:
			case <-time.After(waitTimeout):
				t.Fatal("Run went on after the gateway refused the key")
			}
			if !errors.Is(err, heartbeat.ErrRefused) || status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Run = %v (code %s), want ErrRefused with %s %q", err, status.Code(err), tc.code, tc.msg)
			}
			if !strings.Contains(logs.String(), tc.logged) {
				t.Errorf("the log does not carry the gateway's message %q:\n%s", tc.logged, logs)
			}
			if strings.Contains(logs.String(), tc.key) {
				t.Error("the log carries the key")
			}
		})
	}
}

func TestGatewayDownThenUp(t *testing.T) {
	s := newSetup(t, simengine.FlavorVLLM, nodeKey, interval, nil)
	stop := s.run(t)
	defer stop()
	if _, _, err := s.gw.WaitFor(waitCtx(t), 1, nil); err != nil {
		t.Fatal(err)
	}
	s.gw.Stop()
	waitFor(t, "the outage to be logged", func() bool { return s.logs.count("not reachable") > 0 })
	before := len(s.gw.Heartbeats())
	// Several attempts fail while it is down; the log says so once.
	time.Sleep(10 * interval)
	if err := s.gw.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.gw.WaitFor(waitCtx(t), before+2, nil); err != nil {
		t.Fatalf("heartbeats did not resume: %v", err)
	}
	if c := s.logs.count("not reachable"); c != 1 {
		t.Errorf("logged the outage %d times, want once:\n%s", c, s.logs)
	}
	if c := s.logs.count("reach the gateway again"); c != 1 {
		t.Errorf("logged the recovery %d times, want once:\n%s", c, s.logs)
	}
}

func TestDrainFromTheGatewayAndFromTheAgent(t *testing.T) {
	s := newSetup(t, simengine.FlavorVLLM, nodeKey, interval, nil)
	stop := s.run(t)
	defer stop()
	ctx := waitCtx(t)
	_, i, err := s.gw.WaitFor(ctx, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	draining := func(hb *switchyardv1.HeartbeatRequest) bool { return hb.GetDraining() }
	notDraining := func(hb *switchyardv1.HeartbeatRequest) bool { return !hb.GetDraining() }

	s.gw.SetDrain(true)
	if _, i, err = s.gw.WaitFor(ctx, i+1, draining); err != nil {
		t.Fatalf("no draining heartbeat after DrainNode: %v", err)
	}
	if !s.sender.Draining() || s.logs.count("asked this node to drain") != 1 {
		t.Errorf("Draining() = %v; drain logged %d times", s.sender.Draining(), s.logs.count("asked this node to drain"))
	}
	s.gw.SetDrain(false)
	if _, i, err = s.gw.WaitFor(ctx, i+1, notDraining); err != nil {
		t.Fatalf("still draining after the drain was lifted: %v", err)
	}

	s.sender.SetDraining(true)
	if _, err := s.sender.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err = s.gw.WaitFor(ctx, i+1, draining); err != nil {
		t.Fatalf("SetDraining(true) sent no draining heartbeat: %v", err)
	}
}

func TestTriggerSendsAtOnce(t *testing.T) {
	s := newSetup(t, simengine.FlavorVLLM, nodeKey, time.Hour, nil)
	stop := s.run(t)
	defer stop()
	ctx := waitCtx(t)
	if _, _, err := s.gw.WaitFor(ctx, 0, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * interval)
	if n := len(s.gw.Heartbeats()); n != 1 {
		t.Fatalf("%d heartbeats with an hour's interval, want 1", n)
	}
	s.sender.Trigger()
	if _, _, err := s.gw.WaitFor(ctx, 1, nil); err != nil {
		t.Fatalf("Trigger sent nothing: %v", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
