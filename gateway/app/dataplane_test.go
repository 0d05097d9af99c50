package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/simengine"
	"github.com/switchyard-ai/switchyard/internal/testenv"
	"github.com/switchyard-ai/switchyard/keyring"
)

type serveRun struct {
	http, grpc, metrics string
	admin               string
	logs                *syncWriter
	env                 map[string]string // what it runs with, for a second replica
}

// replicaEnv is the environment of another replica of r: same database,
// Redis, keyring and bootstrap key, its own listeners.
func (r *serveRun) replicaEnv(t *testing.T) map[string]string {
	env := map[string]string{}
	for k, v := range r.env {
		env[k] = v
	}
	env["SWITCHYARD_HTTP_ADDR"], env["SWITCHYARD_GRPC_ADDR"], env["SWITCHYARD_METRICS_ADDR"] = testenv.Addr(t), testenv.Addr(t), testenv.Addr(t)
	return env
}

// startServe runs `switchyard serve` on real Postgres and Redis.
func startServe(t *testing.T, extra map[string]string) *serveRun {
	t.Helper()
	var url, prefix string
	if extra["SWITCHYARD_DATABASE_URL"] == "" {
		url = testenv.Postgres(t)
		_, prefix = testenv.Redis(t) // a key prefix of its own, removed afterwards
	}
	key, _ := keyring.Generate()
	r := &serveRun{http: testenv.Addr(t), grpc: testenv.Addr(t), metrics: testenv.Addr(t), admin: "bootstrap-key-" + testenv.Random(8), logs: &syncWriter{}}
	env := map[string]string{
		"SWITCHYARD_DATABASE_URL":        url,
		"SWITCHYARD_REDIS_URL":           testenv.RedisURL(),
		"SWITCHYARD_REDIS_PREFIX":        prefix,
		"SWITCHYARD_ENCRYPTION_KEYS":     "1:" + key,
		"SWITCHYARD_BOOTSTRAP_ADMIN_KEY": r.admin,
		"SWITCHYARD_HTTP_ADDR":           r.http,
		"SWITCHYARD_GRPC_ADDR":           r.grpc,
		"SWITCHYARD_METRICS_ADDR":        r.metrics,
		"SWITCHYARD_SHUTDOWN_TIMEOUT":    "5s",
	}
	for k, v := range extra {
		env[k] = v
	}
	r.env = env
	r.http, r.grpc, r.metrics, r.admin = env["SWITCHYARD_HTTP_ADDR"], env["SWITCHYARD_GRPC_ADDR"], env["SWITCHYARD_METRICS_ADDR"], env["SWITCHYARD_BOOTSTRAP_ADMIN_KEY"]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- MainEnv(ctx, []string{"serve"}, io.Discard, r.logs, envOf(env)) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("serve exited %d:\n%s", code, r.logs.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
	})
	if !eventually(20*time.Second, func() bool { return get(t, "http://"+r.http+"/readyz") == 200 }) {
		t.Fatalf("never ready:\n%s", r.logs.String())
	}
	return r
}

func (r *serveRun) call(t *testing.T, method, path, key, body string) (int, map[string]any, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+r.http+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	if m == nil {
		m = map[string]any{"raw": string(raw)}
	}
	return resp.StatusCode, m, resp.Header
}

// TestServeEndToEnd configures a gateway over REST and sends it traffic:
// the replica follows the configuration without a restart, serves the
// OpenAI API, meters to Postgres, and GetUsage reports it.
func TestServeEndToEnd(t *testing.T) {
	vendor := httptest.NewServer(simengine.New(simengine.Config{Models: []string{"gpt-4o"}}, nil).Handler())
	defer vendor.Close()
	r := startServe(t, nil)
	must := func(method, path, body string) map[string]any {
		t.Helper()
		code, m, _ := r.call(t, method, path, r.admin, body)
		if code != 200 {
			t.Fatalf("%s %s = %d %v", method, path, code, m)
		}
		return m
	}
	must("POST", "/admin/v1/tenants", `{"tenant":{"id":"acme","requests_per_minute":100}}`)
	ck := must("POST", "/admin/v1/tenants/acme/keys", `{"name":"app"}`)["api_key"].(string)
	must("POST", "/admin/v1/vendors", `{"vendor":{"id":"openai","base_url":"`+vendor.URL+`/v1","enabled":true}}`)
	must("POST", "/admin/v1/vendors/openai:setKey", `{"api_key":"sk-e2e-canary-91c3"}`)
	must("POST", "/admin/v1/models", `{"model":{"id":"gpt-4o","vendor":"openai","input_price_per_mtok":1,"output_price_per_mtok":2,"enabled":true}}`)

	// The configuration arrives by NOTIFY (or the one-second poll).
	if !eventually(3*time.Second, func() bool {
		_, m, _ := r.call(t, "GET", "/v1/models", ck, "")
		return strings.Contains(fmt.Sprint(m), "gpt-4o")
	}) {
		t.Fatal("the replica did not follow the configuration within 3 s")
	}
	code, resp, hdr := r.call(t, "POST", "/v1/chat/completions", ck, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`)
	if code != 200 {
		t.Fatalf("chat completion: %d %v", code, resp)
	}
	if hdr.Get("X-Switchyard-Target") != "vendor:openai" {
		t.Errorf("target %q", hdr.Get("X-Switchyard-Target"))
	}
	// Metering reaches Postgres in batches; GetUsage reads it.
	var rows []any
	if !eventually(5*time.Second, func() bool {
		u := must("GET", "/admin/v1/usage?tenant_id=acme&group_by=tenant&group_by=model", "")
		rows, _ = u["rows"].([]any)
		return len(rows) == 1
	}) {
		t.Fatalf("usage rows = %v", rows)
	}
	row := rows[0].(map[string]any)
	if row["requests"] != "1" || row["output_tokens"] != "3" || row["model"] != "gpt-4o" {
		t.Errorf("usage row = %v", row)
	}
	// The metrics port shows the request.
	mresp, err := http.Get("http://" + r.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if !strings.Contains(string(b), `switchyard_requests_total{code="",model="gpt-4o",status="200",target="vendor:openai"} 1`) {
		t.Errorf("metrics lack the request:\n%s", grep(string(b), "switchyard_requests_total"))
	}
	if strings.Contains(string(b), "sk-e2e-canary-91c3") || strings.Contains(r.logs.String(), "sk-e2e-canary-91c3") || strings.Contains(r.logs.String(), ck) {
		t.Error("a secret reached the metrics or the logs")
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
