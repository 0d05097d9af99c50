package installtest

import (
	"context"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchyard-ai/switchyard/internal/simengine"
	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

var (
	agentOnce sync.Once
	agentPath string
	agentErr  error
	agentDir  string
)

// realAgent builds cmd/switchyard-agent once for the package's tests.
func realAgent(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the agent")
	}
	agentOnce.Do(func() {
		agentDir, agentErr = os.MkdirTemp("", "installtest-agent-")
		if agentErr != nil {
			return
		}
		agentPath = filepath.Join(agentDir, "switchyard-agent")
		out, err := exec.Command("go", "build", "-o", agentPath,
			"-ldflags", "-X github.com/switchyard-ai/switchyard/agent/app.version=v0.0.0-doctor",
			"github.com/switchyard-ai/switchyard/cmd/switchyard-agent").CombinedOutput()
		if err != nil {
			agentErr = err
			agentPath = string(out)
		}
	})
	if agentErr != nil {
		t.Fatalf("building the agent: %v\n%s", agentErr, agentPath)
	}
	return agentPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if agentDir != "" {
		_ = os.RemoveAll(agentDir)
	}
	os.Exit(code)
}

// nodeService accepts heartbeats as the gateway does: a known key, used by
// the node it was minted for.
type nodeService struct {
	switchyardv1.UnimplementedNodeServiceServer
	owners map[string]string // key → node id
}

func (n *nodeService) Heartbeat(ctx context.Context, req *switchyardv1.HeartbeatRequest) (*switchyardv1.HeartbeatResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	auth := md.Get("authorization")
	if len(auth) == 0 {
		return nil, status.Error(codes.Unauthenticated, "missing key")
	}
	owner, ok := n.owners[strings.TrimPrefix(auth[0], "Bearer ")]
	switch {
	case !ok:
		return nil, status.Error(codes.Unauthenticated, "invalid key")
	case owner != req.GetNodeId():
		return nil, status.Errorf(codes.PermissionDenied, "this key belongs to node %q, not %q", owner, req.GetNodeId())
	}
	return &switchyardv1.HeartbeatResponse{IntervalMs: 5000}, nil
}

func startGateway(t *testing.T, owners map[string]string) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	srv := grpc.NewServer()
	switchyardv1.RegisterNodeServiceServer(srv, &nodeService{owners: owners})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func startEngine(t *testing.T, cfg simengine.Config) string {
	t.Helper()
	cfg.Flavor = simengine.FlavorOllama
	srv := httptest.NewServer(simengine.New(cfg, nil).Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := lis.Addr().String()
	must(t, lis.Close())
	return addr
}

// The doctor runs the installed agent's own doctor with the installed
// settings: the real agent here, against a gateway and an Ollama simulated
// on loopback, so that each of its findings reaches the user as the agent
// words it.
func TestDoctorWithTheRealAgent(t *testing.T) {
	bin := realAgent(t)
	const otherKey = "syn_otherkey0000_abcdefghijklmnopqrstuvwxyz012345"
	gw := startGateway(t, map[string]string{nodeKey: nodeID, otherKey: "other-node"})
	good := startEngine(t, simengine.Config{Models: []string{model}})

	for _, tc := range []struct {
		name      string
		engineURL string
		gateway   string
		extra     []string
		code      int
		want      []string
	}{
		{
			name: "all good", engineURL: good, gateway: gw, code: 0,
			want: []string{
				"ok: the engine (ollama) answers at " + good,
				"ok: " + model + " is loaded",
				"ok: Ollama runs " + model + " on the GPU",
				"ok: the gateway at " + gw + ` accepts this key for node "anna"`,
				"all checks passed",
			},
		},
		{
			name: "engine not responding", engineURL: "http://" + closedAddr(t), gateway: gw, code: 1,
			want: []string{"problem: the engine is not answering at http://127.0.0.1:", "is it running?"},
		},
		{
			name: "model not pulled", engineURL: startEngine(t, simengine.Config{Models: []string{"llama3.2:1b"}}), gateway: gw, code: 1,
			want: []string{`problem: the engine has no model "` + model + `"`, "hint: install it: ollama pull " + model},
		},
		{
			name: "model not loaded", engineURL: startEngine(t, simengine.Config{Models: []string{model}, OllamaUnloaded: true}), gateway: gw, code: 0,
			want: []string{"ok: " + model + " is installed but not loaded in memory now: the first request waits while the engine loads it"},
		},
		{
			name: "Ollama on the CPU", engineURL: startEngine(t, simengine.Config{Models: []string{model}, OllamaOnCPU: true}), gateway: gw, code: 1,
			want: []string{"problem: Ollama is running " + model + " on the CPU: no GPU memory is used"},
		},
		{
			name: "wrong --tls", engineURL: good, gateway: gw, extra: []string{"--tls"}, code: 1,
			want: []string{"problem: the gateway is not reachable at " + gw, "check --tls: the gateway seems to speak plaintext, while --tls is set"},
		},
		{
			name: "key of another node", engineURL: good, gateway: gw, extra: []string{"--key", otherKey}, code: 1,
			want: []string{`problem: the gateway refuses this key: this key belongs to node "other-node", not "anna"`},
		},
		{
			name: "gateway unreachable", engineURL: good, gateway: closedAddr(t), code: 1,
			want: []string{"problem: the gateway is not reachable at 127.0.0.1:", "is the gateway running"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSandbox(t, linuxUser)
			s.publish("latest/download", "v1.0.0", "ok", "")
			// The stand-in Ollama answers where the install script
			// looks; the real agent talks to the simulated one.
			s.ollamaRunning(model)
			s.write(filepath.Join(s.web, "http", strings.TrimPrefix(tc.engineURL, "http://"), "api/version"), `{"version":"0.12.6"}`, 0o644)
			args := append([]string{"--gateway", tc.gateway, "--node-id", nodeID, "--key", nodeKey, "--model", model, "--engine-url", tc.engineURL}, tc.extra...)
			if out, code := s.run(args...); code != 0 {
				t.Fatalf("install: exit %d:\n%s", code, out)
			}
			agent, err := os.ReadFile(bin)
			must(t, err)
			s.write(s.layout().bin, string(agent), 0o755)

			out, code := s.run("--doctor")
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			wantLines(t, out, tc.want...)
			if !strings.Contains(out, "ok: switchyard-agent v0.0.0-doctor is installed") {
				t.Errorf("the real agent was not the one examined:\n%s", out)
			}
			if strings.Contains(out, nodeKey) || strings.Contains(out, otherKey) {
				t.Errorf("the doctor shows a key:\n%s", out)
			}
		})
	}
}
