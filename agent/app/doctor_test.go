package app

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/simengine"
)

func TestDoctor(t *testing.T) {
	gw := startGateway(t)
	drained := startGateway(t)
	drained.SetDrain(true)
	dead := deadPort(t)
	tlsGateway := httptest.NewUnstartedServer(http.NotFoundHandler())
	tlsGateway.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake errors are the point
	tlsGateway.StartTLS()
	defer tlsGateway.Close()
	tlsAddr := strings.TrimPrefix(tlsGateway.URL, "https://")
	for _, tc := range []struct {
		name    string
		engine  *simengine.Config // nil: nothing listens at the engine URL
		gateway string
		node    string
		key     string
		extra   []string
		noPath  bool
		code    int
		want    []string
		notWant []string
	}{
		{
			name:    "all well",
			engine:  &simengine.Config{Flavor: simengine.FlavorOllama},
			gateway: gw.Addr(), node: nodeID, key: nodeKey, code: 0,
			want: []string{"ok: the engine (ollama) answers at http://127.0.0.1:", "ok: m1 is loaded (context window",
				"ok: Ollama runs m1 on the GPU", "ok: the gateway will be told to reach the front at http://127.0.0.1:8081",
				"ok: the gateway at " + gw.Addr() + ` accepts this key for node "n1"`, "all checks passed"},
			notWant: []string{"problem:"},
		},
		{
			name:    "vllm",
			engine:  &simengine.Config{Flavor: simengine.FlavorVLLM},
			gateway: gw.Addr(), node: nodeID, key: nodeKey, extra: []string{"--engine", "vllm"}, code: 0,
			want: []string{"ok: the engine (vllm) answers", "ok: m1 is loaded"},
		},
		{
			name:    "engine down",
			gateway: gw.Addr(), node: nodeID, key: nodeKey, code: 1,
			want: []string{"problem: the engine is not answering at http://" + dead + ": is it running?", "hint: start it (ollama serve"},
		},
		{
			name:    "model not loaded",
			engine:  &simengine.Config{Flavor: simengine.FlavorOllama, OllamaUnloaded: true},
			gateway: gw.Addr(), node: nodeID, key: nodeKey, code: 0,
			want: []string{"ok: m1 is installed but not loaded in memory now", `note: to load it now: ollama run m1 ""`},
		},
		{
			name:    "model missing",
			engine:  &simengine.Config{Flavor: simengine.FlavorOllama},
			gateway: gw.Addr(), node: nodeID, key: nodeKey, extra: []string{"--models", "m1,m9"}, code: 1,
			want: []string{`problem: the engine has no model "m9"`, "hint: install it: ollama pull m9", "ok: m1 is loaded"},
		},
		{
			name:    "ollama on the CPU",
			engine:  &simengine.Config{Flavor: simengine.FlavorOllama, OllamaOnCPU: true},
			gateway: gw.Addr(), node: nodeID, key: nodeKey, code: 1,
			want: []string{"problem: Ollama is running m1 on the CPU: no GPU memory is used", "1 problem(s) found"},
		},
		{
			name:    "key for another node",
			engine:  &simengine.Config{Flavor: simengine.FlavorOllama},
			gateway: gw.Addr(), node: "other", key: nodeKey, code: 1,
			want: []string{`problem: the gateway refuses this key: this key belongs to node "n1", not "other"`},
		},
		{
			name:    "unknown key",
			engine:  &simengine.Config{Flavor: simengine.FlavorOllama},
			gateway: gw.Addr(), node: nodeID, key: otherKey, code: 1,
			want: []string{"problem: the gateway does not accept this key: mint a new one with MintNodeKey"},
		},
		{
			name:    "gateway unreachable",
			engine:  &simengine.Config{Flavor: simengine.FlavorOllama},
			gateway: dead, node: nodeID, key: nodeKey, code: 1,
			want: []string{"problem: the gateway is not reachable at " + dead, "its gRPC port"},
		},
		{
			name:    "TLS to a plaintext gateway",
			engine:  &simengine.Config{Flavor: simengine.FlavorOllama},
			gateway: gw.Addr(), node: nodeID, key: nodeKey, extra: []string{"--tls"}, code: 1,
			want: []string{"problem: the gateway is not reachable at " + gw.Addr(), "check --tls"},
		},
		{
			name:    "plaintext to a TLS gateway",
			engine:  &simengine.Config{Flavor: simengine.FlavorOllama},
			gateway: tlsAddr, node: nodeID, key: nodeKey, code: 1,
			want: []string{"problem: the gateway is not reachable at " + tlsAddr, "check --tls: the gateway seems to want TLS"},
		},
		{
			name:    "cloudflared missing",
			engine:  &simengine.Config{Flavor: simengine.FlavorOllama},
			gateway: gw.Addr(), node: nodeID, key: nodeKey, extra: []string{"--expose", "cloudflared"}, noPath: true, code: 1,
			want: []string{"problem: --expose=cloudflared is set, but cloudflared is not installed"},
		},
		{
			name:    "drained",
			engine:  &simengine.Config{Flavor: simengine.FlavorOllama},
			gateway: drained.Addr(), node: nodeID, key: nodeKey, code: 1,
			want: []string{"problem: the gateway has this node drained (DrainNode)"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			engineURL := "http://" + dead
			if tc.noPath {
				t.Setenv("PATH", t.TempDir())
			}
			if tc.engine != nil {
				_, engineURL = startEngine(t, *tc.engine)
			}
			args := append([]string{"doctor", "--gateway", tc.gateway, "--node-id", tc.node, "--engine-url", engineURL,
				"--listen", "127.0.0.1:8081"}, tc.extra...)
			var stdout, stderr syncBuffer
			code := MainEnv(t.Context(), args, &stdout, &stderr, envMap(map[string]string{"SWITCHYARD_NODE_KEY": tc.key}))
			out := stdout.String()
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("the report does not say %q", w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(out, w) {
					t.Errorf("the report says %q", w)
				}
			}
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if !strings.HasPrefix(line, "ok: ") && !strings.HasPrefix(line, "problem: ") && !strings.HasPrefix(line, "  ") &&
					!strings.HasSuffix(line, "problem(s) found") && line != "all checks passed" {
					t.Errorf("line %q is neither ok nor problem", line)
				}
			}
			if strings.Contains(out+stderr.String(), tc.key) {
				t.Error("the report carries the key")
			}
			if t.Failed() || testing.Verbose() {
				t.Logf("report:\n%s", out)
			}
		})
	}
	// The doctor's heartbeats never offer work.
	for _, hb := range gw.Heartbeats() {
		if !hb.GetDraining() || len(hb.GetModels()) != 0 {
			t.Errorf("the doctor sent %v, want draining with no models", hb)
		}
	}
}
