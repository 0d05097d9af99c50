package app

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/testenv"
)

// The end-to-end tests run the real binaries: simulated engines and node
// agents (and, where a replica must be killed, the gateway itself) as
// processes on loopback.

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds simengine, switchyard-agent and switchyard once per test
// run and returns the folder holding them.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "switchyard-bin-")
		if buildErr != nil {
			return
		}
		for _, name := range []string{"simengine", "switchyard-agent", "switchyard"} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, name), "github.com/switchyard-ai/switchyard/cmd/"+name).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("build %s: %v\n%s", name, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// proc is a running child process with its output kept for failure reports.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncWriter
	done chan struct{}
}

func startProc(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(filepath.Join(binaries(t), name), args...)
	cmd.Env = append(os.Environ(), env...)
	p := &proc{name: name, cmd: cmd, out: &syncWriter{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("--- %s %s output:\n%s", name, strings.Join(args, " "), tail(p.out.String(), 4000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func (p *proc) kill() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// stop sends SIGTERM and waits for the process to exit.
func (p *proc) stop(t *testing.T, within time.Duration) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(within):
		t.Errorf("%s did not exit within %v of SIGTERM", p.name, within)
		p.kill()
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

var simLine = regexp.MustCompile(`simengine listening on (http://\S+)`)

// engine is a simulated engine process.
type engine struct {
	*proc
	url string
}

func startEngine(t *testing.T, args ...string) *engine {
	t.Helper()
	p := startProc(t, "simengine", nil, append([]string{"--listen", "127.0.0.1:0"}, args...)...)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if m := simLine.FindStringSubmatch(p.out.String()); m != nil {
			return &engine{proc: p, url: m[1]}
		}
		if p.exited() {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("simengine did not start:\n%s", p.out.String())
	return nil
}

// agent is a node agent process in front of an engine.
type agent struct {
	*proc
	nodeID string
	front  string // the engine front's base URL
}

func startAgent(t *testing.T, gatewayGRPC, nodeID, key, engineKind, engineURL string, extra ...string) *agent {
	t.Helper()
	keyFile := filepath.Join(t.TempDir(), "node.key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := testenv.Addr(t)
	args := []string{"run", "--gateway", gatewayGRPC, "--node-id", nodeID, "--key-file", keyFile,
		"--engine", engineKind, "--engine-url", engineURL, "--listen", listen, "--advertise-url", "http://" + listen,
		"--log-format", "text", "--log-level", "debug"}
	p := startProc(t, "switchyard-agent", nil, append(args, extra...)...)
	return &agent{proc: p, nodeID: nodeID, front: "http://" + listen}
}
