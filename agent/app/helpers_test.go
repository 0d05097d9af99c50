package app

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/agent/internal/fakegateway"
	"github.com/switchyard-ai/switchyard/internal/simengine"
	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

const (
	nodeID   = "n1"
	nodeKey  = "syn_aaaaaaaaaaaa_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	otherKey = "syn_cccccccccccc_dddddddddddddddddddddddddddddddd"
	// waitTimeout bounds every wait; a passing test never waits it out.
	waitTimeout = 30 * time.Second
	interval    = 50 * time.Millisecond
)

// syncBuffer collects output written from several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func startGateway(t *testing.T) *fakegateway.Gateway {
	t.Helper()
	gw, err := fakegateway.Start(map[string]string{nodeKey: nodeID}, interval)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Stop)
	return gw
}

func startEngine(t *testing.T, cfg simengine.Config) (*simengine.Engine, string) {
	t.Helper()
	if cfg.Models == nil {
		cfg.Models = []string{"m1"}
	}
	e := simengine.New(cfg, nil)
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	return e, srv.URL
}

// deadPort is a loopback address nothing listens on.
func deadPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// agent is a `run` in progress.
type agent struct {
	cancel context.CancelFunc
	done   chan int
	stderr *syncBuffer
}

func startAgent(t *testing.T, args []string, env map[string]string) *agent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &agent{cancel: cancel, done: make(chan int, 1), stderr: &syncBuffer{}}
	go func() { a.done <- MainEnv(ctx, append([]string{"run"}, args...), io.Discard, a.stderr, envMap(env)) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-a.done:
		case <-time.After(waitTimeout):
			t.Error("the agent did not stop")
		}
	})
	return a
}

// exit waits for the agent's exit code.
func (a *agent) exit(t *testing.T) int {
	t.Helper()
	select {
	case code := <-a.done:
		a.done <- code // for the cleanup
		return code
	case <-time.After(waitTimeout):
		t.Fatalf("the agent did not exit; its log:\n%s", a.stderr)
		return -1
	}
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func firstBeat(t *testing.T, gw *fakegateway.Gateway, a *agent) *switchyardv1.HeartbeatRequest {
	t.Helper()
	hb, _, err := gw.WaitFor(waitCtx(t), 0, nil)
	if err != nil {
		t.Fatalf("%v; the agent's log:\n%s", err, a.stderr)
	}
	return hb
}

func request(t *testing.T, ctx context.Context, method, url, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+nodeKey)
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

func nextData(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended early: %v", err)
		}
		if d, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok {
			return d
		}
	}
}

// cloudflaredStandIn puts a fake cloudflared on PATH that prints a quick
// tunnel banner, writes its pid and arguments next to itself, and waits.
func cloudflaredStandIn(t *testing.T) (dir string) {
	t.Helper()
	dir = t.TempDir()
	script := `#!/bin/sh
echo $$ > '` + dir + `/pid'
echo "$@" > '` + dir + `/args'
cat >&2 <<'EOF'
2025-06-01T10:00:00Z INF Requesting new quick Tunnel on trycloudflare.com...
2025-06-01T10:00:01Z INF +--------------------------------------------------------------------------------------------+
2025-06-01T10:00:01Z INF |  Your quick Tunnel has been created! Visit it at (it may take some time to be reachable):  |
2025-06-01T10:00:01Z INF |  https://warm-river-stone-ok.trycloudflare.com                                             |
2025-06-01T10:00:01Z INF +--------------------------------------------------------------------------------------------+
EOF
exec sleep 3600
`
	if err := os.WriteFile(filepath.Join(dir, "cloudflared"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return dir
}
