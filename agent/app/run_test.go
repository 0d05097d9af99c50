package app

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/simengine"
	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

func TestRunHeartbeatsAndServesTheFront(t *testing.T) {
	gw := startGateway(t)
	eng, engineURL := startEngine(t, simengine.Config{Flavor: simengine.FlavorVLLM, Models: []string{"m1", "m2"}})
	a := startAgent(t, []string{
		"--gateway", gw.Addr(), "--node-id", nodeID, "--engine", "vllm", "--engine-url", engineURL,
		"--listen", "127.0.0.1:0", "--models", "m1", "--slots", "2", "--log-format", "text",
	}, map[string]string{"SWITCHYARD_NODE_KEY": nodeKey})

	hb := firstBeat(t, gw, a)
	if hb.GetNodeId() != nodeID || hb.GetEngine() != "vllm" || hb.GetAgentVersion() != Version() || hb.GetDraining() {
		t.Errorf("heartbeat %v", hb)
	}
	if !strings.HasPrefix(hb.GetUrl(), "http://127.0.0.1:") || strings.HasSuffix(hb.GetUrl(), ":0") {
		t.Fatalf("url %q, want the front's bound loopback address", hb.GetUrl())
	}
	if len(hb.GetModels()) != 1 || hb.GetModels()[0].GetName() != "m1" || hb.GetModels()[0].GetSlots() != 2 ||
		hb.GetModels()[0].EngineRunning == nil {
		t.Errorf("models %v, want m1 alone, 2 slots, with vLLM's queue", hb.GetModels())
	}
	if hb.GetGpuNote() == "" && len(hb.GetGpus()) == 0 {
		t.Error("neither GPUs nor a note saying why there are none")
	}
	// They keep coming at the answered 50 ms, not every 5 s.
	start := time.Now()
	if _, _, err := gw.WaitFor(waitCtx(t), 4, nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("four more heartbeats took %s", d)
	}

	resp, err := request(t, t.Context(), http.MethodPost, hb.GetUrl()+"/v1/chat/completions",
		`{"model":"m1","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"choices"`) {
		t.Fatalf("chat through the front: %d %s", resp.StatusCode, body)
	}
	if h, _ := eng.LastRequest(); h.Get("Authorization") != "" {
		t.Errorf("the engine got Authorization %q", h.Get("Authorization"))
	}

	a.cancel()
	if code := a.exit(t); code != 0 {
		t.Fatalf("exit %d, want 0; log:\n%s", code, a.stderr)
	}
	if testing.Verbose() {
		t.Logf("the agent's log:\n%s", a.stderr)
	}
	if strings.Contains(a.stderr.String(), nodeKey) {
		t.Error("the log carries the node key")
	}
}

func TestRunStopsWhenTheGatewayRefusesTheKey(t *testing.T) {
	for _, tc := range []struct{ name, node, key, want string }{
		{"key of another node", "other", nodeKey, `this key belongs to node \"n1\", not \"other\"`},
		{"unknown key", nodeID, otherKey, "invalid key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw := startGateway(t)
			_, engineURL := startEngine(t, simengine.Config{Flavor: simengine.FlavorOllama})
			a := startAgent(t, []string{
				"--gateway", gw.Addr(), "--node-id", tc.node, "--engine-url", engineURL, "--listen", "127.0.0.1:0",
			}, map[string]string{"SWITCHYARD_NODE_KEY": tc.key})
			if code := a.exit(t); code != 1 {
				t.Fatalf("exit %d, want 1; log:\n%s", code, a.stderr)
			}
			plain := strings.ReplaceAll(tc.want, `\"`, `"`)
			if !strings.Contains(a.stderr.String(), "switchyard-agent run: the gateway refused this agent's key: "+plain) {
				t.Errorf("stderr does not say %q:\n%s", plain, a.stderr)
			}
			if strings.Contains(a.stderr.String(), tc.key) {
				t.Error("stderr carries the key")
			}
		})
	}
}

func TestRunResumesAfterTheGatewayRestarts(t *testing.T) {
	gw := startGateway(t)
	_, engineURL := startEngine(t, simengine.Config{Flavor: simengine.FlavorOllama})
	a := startAgent(t, []string{
		"--gateway", gw.Addr(), "--node-id", nodeID, "--engine-url", engineURL, "--listen", "127.0.0.1:0",
	}, map[string]string{"SWITCHYARD_NODE_KEY": nodeKey, "SWITCHYARD_LOG_FORMAT": "text"})
	firstBeat(t, gw, a)
	gw.Stop()
	time.Sleep(10 * interval)
	n := len(gw.Heartbeats())
	if err := gw.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := gw.WaitFor(waitCtx(t), n+1, nil); err != nil {
		t.Fatalf("heartbeats did not resume: %v\n%s", err, a.stderr)
	}
	if c := strings.Count(a.stderr.String(), "not reachable"); c != 1 {
		t.Errorf("the outage was logged %d times, want once:\n%s", c, a.stderr)
	}
	select {
	case code := <-a.done:
		t.Fatalf("the agent exited (%d) during the outage", code)
	default:
	}
}

func TestDrainOnShutdown(t *testing.T) {
	gw := startGateway(t)
	eng, engineURL := startEngine(t, simengine.Config{Flavor: simengine.FlavorVLLM})
	a := startAgent(t, []string{
		"--gateway", gw.Addr(), "--node-id", nodeID, "--engine", "vllm", "--engine-url", engineURL,
		"--listen", "127.0.0.1:0", "--shutdown-timeout", "20s",
	}, map[string]string{"SWITCHYARD_NODE_KEY": nodeKey})
	url := firstBeat(t, gw, a).GetUrl()

	// A stream that holds after its first token until released.
	eng.StallAfter(1, time.Hour)
	resp, err := request(t, context.Background(), http.MethodPost, url+"/v1/chat/completions",
		`{"model":"m1","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"go"}]}`)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	nextData(t, r)

	a.cancel() // SIGTERM
	ctx := waitCtx(t)
	hb, i, err := gw.WaitFor(ctx, 0, func(hb *switchyardv1.HeartbeatRequest) bool { return hb.GetDraining() })
	if err != nil {
		t.Fatalf("no draining heartbeat: %v\n%s", err, a.stderr)
	}
	if hb.GetInFlight() != 1 {
		t.Errorf("draining heartbeat says %d in flight, want 1", hb.GetInFlight())
	}
	late, err := request(t, ctx, http.MethodPost, url+"/v1/chat/completions", `{"model":"m1","messages":[{"role":"user","content":"late"}]}`)
	if err != nil {
		t.Fatalf("a new request while draining: %v (the front must still answer, with 503)", err)
	}
	late.Body.Close()
	if late.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a new request while draining got %d, want 503", late.StatusCode)
	}
	select {
	case code := <-a.done:
		t.Fatalf("the agent exited (%d) with a stream in flight", code)
	case <-time.After(100 * time.Millisecond):
	}

	eng.StallAfter(0, 0)
	for nextData(t, r) != "[DONE]" {
	}
	if code := a.exit(t); code != 0 {
		t.Fatalf("exit %d, want 0; log:\n%s", code, a.stderr)
	}
	beats := gw.Heartbeats()
	last := beats[len(beats)-1]
	if len(beats) <= i || !last.GetDraining() || last.GetInFlight() != 0 {
		t.Errorf("last heartbeat %v, want draining with nothing in flight", last)
	}
}

func TestDrainTimeoutCutsOff(t *testing.T) {
	gw := startGateway(t)
	eng, engineURL := startEngine(t, simengine.Config{Flavor: simengine.FlavorVLLM})
	a := startAgent(t, []string{
		"--gateway", gw.Addr(), "--node-id", nodeID, "--engine", "vllm", "--engine-url", engineURL,
		"--listen", "127.0.0.1:0", "--shutdown-timeout", "200ms",
	}, map[string]string{"SWITCHYARD_NODE_KEY": nodeKey})
	url := firstBeat(t, gw, a).GetUrl()
	eng.StallAfter(1, time.Hour)
	t.Cleanup(func() { eng.StallAfter(0, 0) })
	resp, err := request(t, context.Background(), http.MethodPost, url+"/v1/chat/completions",
		`{"model":"m1","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"go"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	nextData(t, bufio.NewReader(resp.Body))
	start := time.Now()
	a.cancel()
	if code := a.exit(t); code != 0 {
		t.Fatalf("exit %d, want 0; log:\n%s", code, a.stderr)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("exit took %s with a 200ms shutdown timeout", d)
	}
	beats := gw.Heartbeats()
	if last := beats[len(beats)-1]; !last.GetDraining() || last.GetInFlight() != 0 {
		t.Errorf("last heartbeat %v, want draining with the cut-off request gone", last)
	}
	if !strings.Contains(a.stderr.String(), "shutdown timeout ran out") {
		t.Errorf("the log does not say the timeout ran out:\n%s", a.stderr)
	}
}

func TestExposeCloudflared(t *testing.T) {
	dir := cloudflaredStandIn(t)
	gw := startGateway(t)
	_, engineURL := startEngine(t, simengine.Config{Flavor: simengine.FlavorOllama})
	a := startAgent(t, []string{
		"--gateway", gw.Addr(), "--node-id", nodeID, "--engine-url", engineURL, "--listen", "127.0.0.1:0", "--expose", "cloudflared",
	}, map[string]string{"SWITCHYARD_NODE_KEY": nodeKey})
	hb := firstBeat(t, gw, a)
	if hb.GetUrl() != "https://warm-river-stone-ok.trycloudflare.com" {
		t.Fatalf("advertised %q, want the tunnel's address", hb.GetUrl())
	}
	args, _ := os.ReadFile(filepath.Join(dir, "args"))
	if !strings.HasPrefix(string(args), "tunnel --no-autoupdate --url http://127.0.0.1:") {
		t.Errorf("cloudflared ran with %q", args)
	}
	pidText, _ := os.ReadFile(filepath.Join(dir, "pid"))
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil {
		t.Fatal(err)
	}
	a.cancel()
	if code := a.exit(t); code != 0 {
		t.Fatalf("exit %d, want 0; log:\n%s", code, a.stderr)
	}
	// The stand-in is the agent's child, reaped by then: the pid is gone.
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("cloudflared (pid %d) still runs after the agent stopped", pid)
	}
}

func TestExposeWithoutCloudflared(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	gw := startGateway(t)
	_, engineURL := startEngine(t, simengine.Config{Flavor: simengine.FlavorOllama})
	a := startAgent(t, []string{
		"--gateway", gw.Addr(), "--node-id", nodeID, "--engine-url", engineURL, "--listen", "127.0.0.1:0", "--expose=cloudflared",
	}, map[string]string{"SWITCHYARD_NODE_KEY": nodeKey})
	if code := a.exit(t); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(a.stderr.String(), "switchyard-agent run: --expose=cloudflared: cloudflared is not installed") {
		t.Errorf("stderr:\n%s", a.stderr)
	}
	if n := len(gw.Heartbeats()); n != 0 {
		t.Errorf("%d heartbeats sent without an address to advertise", n)
	}
}

func TestKeyFileAndCommandLineWarning(t *testing.T) {
	gw := startGateway(t)
	_, engineURL := startEngine(t, simengine.Config{Flavor: simengine.FlavorOllama})
	keyFile := filepath.Join(t.TempDir(), "node.key")
	if err := os.WriteFile(keyFile, []byte(nodeKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, []string{"--gateway", gw.Addr(), "--node-id", nodeID, "--engine-url", engineURL,
		"--listen", "127.0.0.1:0", "--key-file", keyFile}, nil)
	firstBeat(t, gw, a)
	if strings.Contains(a.stderr.String(), "process list") {
		t.Error("warned about the command line for a key file")
	}

	gw2 := startGateway(t)
	b := startAgent(t, []string{"--gateway", gw2.Addr(), "--node-id", nodeID, "--engine-url", engineURL,
		"--listen", "127.0.0.1:0", "--key", nodeKey}, nil)
	firstBeat(t, gw2, b)
	var line map[string]any
	for _, l := range strings.Split(b.stderr.String(), "\n") {
		if strings.Contains(l, "process list") {
			_ = json.Unmarshal([]byte(l), &line)
		}
	}
	if line["level"] != "WARN" {
		t.Errorf("no warning about --key on the command line:\n%s", b.stderr)
	}
}
