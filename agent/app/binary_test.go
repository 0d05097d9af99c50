package app

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/simengine"
)

// TestBinary builds cmd/switchyard-agent with a stamped version and runs it
// as operators do: version, then run against a gateway until SIGTERM.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "switchyard-agent")
	build := exec.Command("go", "build", "-o", bin,
		"-ldflags", "-X github.com/switchyard-ai/switchyard/agent/app.version=v1.2.3-test",
		"github.com/switchyard-ai/switchyard/cmd/switchyard-agent")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("version: %v", err)
	}
	if f := strings.Fields(string(out)); len(f) < 4 || f[0] != "switchyard-agent" || f[1] != "v1.2.3-test" || !strings.HasPrefix(f[len(f)-2], "go") {
		t.Errorf("version printed %q", out)
	}

	gw := startGateway(t)
	_, engineURL := startEngine(t, simengine.Config{Flavor: simengine.FlavorOllama})
	var stderr syncBuffer
	cmd := exec.Command(bin, "run", "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(),
		"SWITCHYARD_GATEWAY="+gw.Addr(), "SWITCHYARD_NODE_ID="+nodeID, "SWITCHYARD_NODE_KEY="+nodeKey,
		"SWITCHYARD_ENGINE=ollama", "SWITCHYARD_ENGINE_URL="+engineURL)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	hb, _, err := gw.WaitFor(waitCtx(t), 1, nil)
	if err != nil {
		t.Fatalf("%v; stderr:\n%s", err, stderr.String())
	}
	if !strings.HasPrefix(hb.GetAgentVersion(), "v1.2.3-test") || hb.GetEngine() != "ollama" || len(hb.GetModels()) != 1 {
		t.Errorf("heartbeat %v", hb)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(waitTimeout):
		t.Fatal("the agent did not exit after SIGTERM")
	}
	beats := gw.Heartbeats()
	if last := beats[len(beats)-1]; !last.GetDraining() {
		t.Errorf("last heartbeat %v, want draining", last)
	}
	if bytes.Contains([]byte(stderr.String()), []byte(nodeKey)) {
		t.Error("the log carries the node key")
	}
}
