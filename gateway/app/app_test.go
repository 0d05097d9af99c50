package app

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	pb "github.com/switchyard-ai/switchyard/proto/switchyard/v1"

	"github.com/switchyard-ai/switchyard/internal/testenv"
	"github.com/switchyard-ai/switchyard/keyring"
)

// devRun is a `switchyard dev` running in-process on free ports.
type devRun struct {
	lines                        []string
	adminKey, clientKey, nodeKey string
	http, grpc, metrics          string
	stop                         func()
}

var (
	httpLine    = regexp.MustCompile(`^HTTP\s+http://(\S+)$`)
	grpcLine    = regexp.MustCompile(`^gRPC\s+(\S+)$`)
	metricsLine = regexp.MustCompile(`^metrics\s+http://(\S+)/metrics$`)
)

// startDev runs `switchyard dev` with the given extra arguments and waits
// for its printed lines.
func startDev(t *testing.T, env map[string]string, args ...string) *devRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	all := append([]string{"dev", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--log-level", "warn"}, args...)
	go func() {
		done <- mainEnv(ctx, all, pw, io.Discard, envOf(env), Options{DevAgent: binaryAgent(t)})
		pw.Close()
	}()
	r := &devRun{}
	sc := bufio.NewScanner(pr)
	deadline := time.AfterFunc(30*time.Second, func() { pw.CloseWithError(io.ErrUnexpectedEOF) })
	for sc.Scan() {
		line := sc.Text()
		r.lines = append(r.lines, line)
		switch {
		case strings.HasPrefix(line, "admin key: "):
			r.adminKey = strings.TrimPrefix(line, "admin key: ")
		case strings.HasPrefix(line, "client key: "):
			r.clientKey = strings.TrimPrefix(line, "client key: ")
		case strings.HasPrefix(line, "node key: "):
			r.nodeKey = strings.TrimPrefix(line, "node key: ")
		case httpLine.MatchString(line):
			r.http = httpLine.FindStringSubmatch(line)[1]
		case grpcLine.MatchString(line):
			r.grpc = grpcLine.FindStringSubmatch(line)[1]
		case metricsLine.MatchString(line):
			r.metrics = metricsLine.FindStringSubmatch(line)[1]
		}
		if strings.HasPrefix(line, "Press Ctrl-C") {
			break
		}
	}
	deadline.Stop()
	go io.Copy(io.Discard, pr)
	if r.adminKey == "" || r.http == "" || r.grpc == "" {
		cancel()
		t.Fatalf("dev printed:\n%s", strings.Join(r.lines, "\n"))
	}
	r.stop = func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("dev exited %d", code)
			}
		case <-time.After(40 * time.Second):
			t.Error("dev did not stop")
		}
	}
	t.Cleanup(r.stop)
	return r
}

func TestDevPrintsWorkingKeysAndLines(t *testing.T) {
	d := startDev(t, nil)
	for _, k := range []struct{ v, prefix string }{{d.adminKey, "sya_"}, {d.clientKey, "syk_"}, {d.nodeKey, "syn_"}} {
		if !strings.HasPrefix(k.v, k.prefix) {
			t.Errorf("key %q lacks %s", k.v, k.prefix)
		}
	}
	if !strings.Contains(strings.Join(d.lines, "\n"), "lost when this process exits") {
		t.Error("dev does not say that nothing survives it")
	}
	conn, err := grpc.NewClient(d.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+d.adminKey)
	ts, err := pb.NewAdminServiceClient(conn).ListTenants(ctx, &pb.ListTenantsRequest{})
	if err != nil || len(ts.GetTenants()) != 1 || ts.GetTenants()[0].GetId() != devTenant {
		t.Fatalf("ListTenants = %v, %v", ts, err)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + d.http + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != "ok" {
			t.Errorf("%s = %d %q", path, resp.StatusCode, b)
		}
	}
	resp, err := http.Get("http://" + d.metrics + "/metrics")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics: %v", err)
	}
	exposition, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The live heap is exported beside the Go collector's defaults (0 until
	// the first collection has run).
	if m := regexp.MustCompile(`(?m)^go_gc_heap_live_bytes (\S+)$`).FindSubmatch(exposition); m == nil {
		t.Error("metrics: no go_gc_heap_live_bytes sample")
	} else if v, err := strconv.ParseFloat(string(m[1]), 64); err != nil || v < 0 {
		t.Errorf("go_gc_heap_live_bytes = %s", m[1])
	}
	if !bytes.Contains(exposition, []byte("\ngo_goroutines ")) {
		t.Error("metrics: the Go collector's defaults are missing (go_goroutines)")
	}

	// The printed lines work as printed (grpcurl where it is installed).
	for _, l := range d.lines {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "curl ") && !strings.HasPrefix(l, "grpcurl ") {
			continue
		}
		tool := strings.Fields(l)[0]
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Unavailable(t, "%s is not installed", tool)
			continue
		}
		var want []string
		switch {
		case strings.Contains(l, `"max_tokens":1100`):
			want = []string{"X-Switchyard-Target: vendor:" + devVendor, "X-Switchyard-Fallback-Reason: " + devLocalModel + "=context_too_small"}
		case strings.Contains(l, devLocalModel):
			want = []string{"X-Switchyard-Target: node:" + devNode, `"object":"chat.completion"`}
		case strings.Contains(l, "/v1/chat/completions"):
			want = []string{`"object":"chat.completion"`}
		case strings.Contains(l, "ListNodes"):
			want = []string{devNode, "healthy"}
		default:
			want = []string{devTenant}
		}
		out, err := exec.Command("sh", "-c", l).CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", l, err, out)
		}
		for _, w := range want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s\n→ lacks %q:\n%.600s", l, w, out)
			}
		}
	}
}

// binaryAgent runs the demo's node agent as the built switchyard-agent
// binary: the gateway's packages, tests included, never import the agent.
func binaryAgent(t *testing.T) AgentMain {
	dir := binaries(t)
	return func(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
		cmd := exec.CommandContext(ctx, dir+"/switchyard-agent", args...)
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		cmd.WaitDelay = 10 * time.Second
		for _, k := range []string{"SWITCHYARD_GATEWAY", "SWITCHYARD_NODE_ID", "SWITCHYARD_NODE_KEY", "SWITCHYARD_ENGINE", "SWITCHYARD_ENGINE_URL",
			"SWITCHYARD_SLOTS", "SWITCHYARD_FRONT_ADDR", "SWITCHYARD_ADVERTISE_URL", "SWITCHYARD_LOG_FORMAT", "SWITCHYARD_LOG_LEVEL", "SWITCHYARD_SHUTDOWN_TIMEOUT"} {
			if v := getenv(k); v != "" {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
		}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		if err := cmd.Run(); err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				return ee.ExitCode()
			}
			return 1
		}
		return 0
	}
}

// TestServeMigratesAndAnswers runs `switchyard serve` on a fresh database.
func TestServeMigratesAndAnswers(t *testing.T) {
	url := testenv.Postgres(t)
	key, _ := keyring.Generate()
	httpAddr, grpcAddr, metricsAddr := testenv.Addr(t), testenv.Addr(t), testenv.Addr(t)
	env := map[string]string{
		"SWITCHYARD_DATABASE_URL":        url,
		"SWITCHYARD_ENCRYPTION_KEYS":     "1:" + key,
		"SWITCHYARD_BOOTSTRAP_ADMIN_KEY": "bootstrap-key-for-serve-test-000",
		"SWITCHYARD_HTTP_ADDR":           httpAddr,
		"SWITCHYARD_GRPC_ADDR":           grpcAddr,
		"SWITCHYARD_METRICS_ADDR":        metricsAddr,
		"SWITCHYARD_SHUTDOWN_TIMEOUT":    "5s",
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var logs syncWriter
	go func() { done <- MainEnv(ctx, []string{"serve"}, io.Discard, &logs, envOf(env)) }()
	defer func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("serve exited %d:\n%s", code, logs.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
	}()
	if !eventually(20*time.Second, func() bool { return get(t, "http://"+httpAddr+"/readyz") == 200 }) {
		t.Fatalf("never ready:\n%s", logs.String())
	}
	req, _ := http.NewRequest("POST", "http://"+httpAddr+"/admin/v1/tenants", strings.NewReader(`{"tenant":{"id":"acme"}}`))
	req.Header.Set("Authorization", "Bearer bootstrap-key-for-serve-test-000")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"id":"acme"`) {
		t.Fatalf("UpsertTenant over REST = %d %s", resp.StatusCode, b)
	}
	if strings.Contains(logs.String(), key) || strings.Contains(logs.String(), "bootstrap-key-for-serve-test-000") {
		t.Error("a secret reached the log")
	}

	// `switchyard migrate` on the migrated database has nothing to do.
	var out strings.Builder
	if code := MainEnv(context.Background(), []string{"migrate"}, &out, io.Discard, envOf(env)); code != 0 || !strings.Contains(out.String(), "up to date") {
		t.Fatalf("migrate: exit %d, %q", code, out.String())
	}
}

// TestMigrateCommand applies the schema to a fresh database.
func TestMigrateCommand(t *testing.T) {
	url := testenv.Postgres(t)
	var out, errb strings.Builder
	if code := MainEnv(context.Background(), []string{"migrate"}, &out, &errb, envOf(map[string]string{"SWITCHYARD_DATABASE_URL": url})); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "applied 0001") {
		t.Fatalf("migrate printed %q", out.String())
	}
}

func eventually(d time.Duration, f func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if f() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
