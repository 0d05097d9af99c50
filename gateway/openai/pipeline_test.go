package openai_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/internal/simengine"
)

func TestChatCompletionThroughAVendor(t *testing.T) {
	e := newEnv(t, envOptions{})
	v := e.addVendor("openai", simengine.Config{Models: []string{"gpt-4o-2024-08-06"}})
	e.addModel(store.Model{ID: "gpt-4o", Vendor: "openai", UpstreamModel: "gpt-4o-2024-08-06", InputPricePerMTok: 2, OutputPricePerMTok: 8})
	e.reload()

	r := e.post("/v1/chat/completions", e.key, chat("gpt-4o", "max_tokens", 5, "frobnicate", map[string]any{"x": 1}),
		"X-Request-Id", "client-req-1", "X-Switchyard-Attr-Team", "search")
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	for h, want := range map[string]string{
		"X-Request-Id": "client-req-1", "X-Switchyard-Model": "gpt-4o", "X-Switchyard-Target": "vendor:openai",
	} {
		if got := r.header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	if r.header.Get("X-Switchyard-Fallback-Reason") != "" {
		t.Errorf("unexpected fallback header %q", r.header.Get("X-Switchyard-Fallback-Reason"))
	}
	usage := r.json["usage"].(map[string]any)
	if usage["completion_tokens"] != float64(5) {
		t.Errorf("usage = %v", usage)
	}

	// What the vendor received: its own key, the upstream model name, the
	// unknown field untouched, and none of the client's credentials.
	hdr, body := v.engine.LastRequest()
	if got := hdr.Get("Authorization"); got != "Bearer "+v.key {
		t.Errorf("vendor saw Authorization %q", got)
	}
	var sent map[string]any
	if err := json.Unmarshal(body, &sent); err != nil {
		t.Fatal(err)
	}
	if sent["model"] != "gpt-4o-2024-08-06" {
		t.Errorf("model sent upstream = %v", sent["model"])
	}
	if x, _ := sent["frobnicate"].(map[string]any); x["x"] != float64(1) {
		t.Errorf("unknown field not passed through: %v", sent)
	}
	if strings.Contains(string(body), e.key) || strings.Contains(hdr.Get("Authorization"), e.key) {
		t.Error("the client's key reached the vendor")
	}

	ev := e.meter.all()
	if len(ev) != 1 {
		t.Fatalf("%d usage events, want 1", len(ev))
	}
	u := ev[0]
	if u.TenantID != "acme" || u.Model != "gpt-4o" || u.Target != "vendor:openai" || u.OutputTokens != 5 || u.InputTokens == 0 ||
		u.Estimated || u.Status != 200 || u.RequestID != "client-req-1" || u.Attributes["team"] != "search" {
		t.Errorf("usage event = %+v", u)
	}
	wantCost := (float64(u.InputTokens)*2 + 5*8) / 1e6
	if d := u.CostUSD - wantCost; d > 1e-12 || d < -1e-12 {
		t.Errorf("cost = %v, want %v", u.CostUSD, wantCost)
	}
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t, envOptions{})
	v := e.addVendor("openai", simengine.Config{Models: []string{"gpt-4o", "gpt-4o-mini"}})
	e.addModel(store.Model{ID: "gpt-4o", Vendor: "openai"})
	e.addModel(store.Model{ID: "gpt-4o-mini", Vendor: "openai"})
	limited := "limited"
	if _, err := e.store.UpsertTenant(context.Background(), actor, store.Tenant{ID: limited, AllowedModels: []string{"gpt-4o-mini"}}); err != nil {
		t.Fatal(err)
	}
	limitedKey := e.mintClientKey(limited)
	revokedKey := e.mintClientKey("acme")
	k, _ := e.store.ListKeys(context.Background(), store.KeyClient, "acme")
	for _, kk := range k {
		if strings.Contains(revokedKey, kk.ID) {
			if _, err := e.store.RevokeKey(context.Background(), actor, store.KeyClient, kk.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.reload()

	for _, tc := range []struct {
		name     string
		key      string
		body     any
		hdr      []string
		status   int
		code     string
		contains string
	}{
		{"malformed JSON", e.key, "{\"model\": \"gpt-4o\",\n \"messages\": [}", nil, 400, "invalid_request", "line 2, column 16"},
		{"not an object", e.key, `[1,2]`, nil, 400, "invalid_request", "JSON object"},
		{"no model", e.key, map[string]any{"messages": []any{}}, nil, 400, "invalid_request", "model is required"},
		{"unknown model", e.key, chat("gpt-5-turbo-ultra"), nil, 404, "model_not_found", `"gpt-5-turbo-ultra" is not registered`},
		{"unknown effort suffix", e.key, chat("gpt-4o:extreme"), nil, 400, "invalid_request", `"extreme"`},
		{"unknown policy header", e.key, chat("gpt-4o"), []string{"X-Switchyard-Policy", "nearest"}, 400, "invalid_request", `"nearest"`},
		{"unknown effort header", e.key, chat("gpt-4o"), []string{"X-Switchyard-Effort", "max"}, 400, "invalid_request", `"max"`},
		{"unknown placement body", e.key, chat("gpt-4o", "placement", "moon"), nil, 400, "invalid_request", `"moon"`},
		{"missing key", "", chat("gpt-4o"), nil, 401, "invalid_api_key", "missing API key"},
		{"garbage key", "sk-not-ours", chat("gpt-4o"), nil, 401, "invalid_api_key", "invalid API key"},
		{"revoked key", revokedKey, chat("gpt-4o"), nil, 401, "invalid_api_key", "revoked"},
		{"model not allowed", limitedKey, chat("gpt-4o"), nil, 403, "model_not_allowed", "gpt-4o"},
		{"stream not a bool", e.key, chat("gpt-4o", "stream", "yes"), nil, 400, "invalid_request", "stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := v.hits.Load()
			r := e.post("/v1/chat/completions", tc.key, tc.body, tc.hdr...)
			if r.status != tc.status || r.errorCode() != tc.code {
				t.Fatalf("got %d %q, want %d %q: %s", r.status, r.errorCode(), tc.status, tc.code, r.body)
			}
			if !strings.Contains(r.errorMessage(), tc.contains) {
				t.Errorf("message %q does not contain %q", r.errorMessage(), tc.contains)
			}
			if typ := r.json["error"].(map[string]any)["type"]; typ == "" || typ == nil {
				t.Errorf("error has no type: %s", r.body)
			}
			if v.hits.Load() != before {
				t.Error("a refused request reached the vendor")
			}
			if r.header.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id on an error")
			}
		})
	}

	t.Run("9 MiB body", func(t *testing.T) {
		big := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("a", 9<<20) + `"}]}`
		r := e.post("/v1/chat/completions", e.key, big)
		if r.status != 413 || r.errorCode() != "invalid_request" {
			t.Fatalf("got %d: %.200s", r.status, r.body)
		}
	})
	t.Run("unknown route", func(t *testing.T) {
		r := e.post("/v1/assistants", e.key, "{}")
		if r.status != 404 || r.errorCode() == "" {
			t.Fatalf("got %d: %s", r.status, r.body)
		}
	})
}

func TestLimitRefusesWithoutCallingUpstream(t *testing.T) {
	e := newEnv(t, envOptions{redis: true})
	v := e.addVendor("openai", simengine.Config{Models: []string{"gpt-4o"}})
	e.addModel(store.Model{ID: "gpt-4o", Vendor: "openai"})
	if _, err := e.store.UpsertTenant(context.Background(), actor, store.Tenant{ID: "acme", RequestsPerMinute: 2}); err != nil {
		t.Fatal(err)
	}
	e.reload()
	for i := 0; i < 2; i++ {
		if r := e.post("/v1/chat/completions", e.key, chat("gpt-4o")); r.status != 200 {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
	}
	hits := v.hits.Load()
	r := e.post("/v1/chat/completions", e.key, chat("gpt-4o"))
	if r.status != 429 || r.errorCode() != "rate_limit_exceeded" || r.header.Get("Retry-After") == "" {
		t.Fatalf("got %d %q Retry-After %q", r.status, r.body, r.header.Get("Retry-After"))
	}
	if v.hits.Load() != hits {
		t.Fatal("a request over the limit reached the vendor")
	}

	// A daily token budget: the earlier calls' tokens use it up. Tokens are
	// counted just after each answer, so allow a moment for the last count
	// to land; a refused request reaches no vendor.
	if _, err := e.store.UpsertTenant(context.Background(), actor, store.Tenant{ID: "acme", DailyTokenBudget: 5}); err != nil {
		t.Fatal(err)
	}
	e.reload()
	deadline := time.Now().Add(3 * time.Second)
	for {
		hits := v.hits.Load()
		r = e.post("/v1/chat/completions", e.key, chat("gpt-4o"))
		if r.status == 429 && r.errorCode() == "budget_exceeded" {
			if v.hits.Load() != hits {
				t.Fatal("a request over the budget reached the vendor")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("budget: got %d %s", r.status, r.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestFallbackOnVendorFailure(t *testing.T) {
	e := newEnv(t, envOptions{})
	bad := e.addVendor("flaky", simengine.Config{Models: []string{"big"}, FailRate: 1})
	good := e.addVendor("steady", simengine.Config{Models: []string{"small"}})
	e.addModel(store.Model{ID: "small", Vendor: "steady"})
	e.addModel(store.Model{ID: "big", Vendor: "flaky", Fallbacks: []string{"small"}})
	e.reload()

	r := e.post("/v1/chat/completions", e.key, chat("big"))
	if r.status != 200 {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	if r.header.Get("X-Switchyard-Model") != "small" || r.header.Get("X-Switchyard-Target") != "vendor:steady" {
		t.Errorf("served by %s on %s", r.header.Get("X-Switchyard-Model"), r.header.Get("X-Switchyard-Target"))
	}
	if got := r.header.Get("X-Switchyard-Fallback-Reason"); got != "big=status_5xx" {
		t.Errorf("fallback reason %q", got)
	}
	if bad.hits.Load() != 1 || good.hits.Load() != 1 {
		t.Errorf("hits: flaky %d steady %d", bad.hits.Load(), good.hits.Load())
	}
	ev := e.meter.all()
	if len(ev) != 1 || ev[0].Model != "small" || len(ev[0].FallbackPath) != 1 {
		t.Errorf("usage = %+v", ev)
	}
	if e.metricValue("switchyard_fallbacks_total", map[string]string{"from": "big", "to": "small", "reason": "status_5xx"}) != 1 {
		t.Error("fallback not counted in switchyard_fallbacks_total")
	}

	// With no fallback left, the client gets 502 upstream_error naming why.
	e.addModel(store.Model{ID: "lonely", Vendor: "flaky", UpstreamModel: "big"})
	e.reload()
	r = e.post("/v1/chat/completions", e.key, chat("lonely"))
	if r.status != 502 || r.errorCode() != "upstream_error" || !strings.Contains(r.errorMessage(), "status_5xx") {
		t.Fatalf("got %d %s", r.status, r.body)
	}
}

func TestVendorPausedAfterFiveFailures(t *testing.T) {
	e := newEnv(t, envOptions{breakerPause: 700 * time.Millisecond})
	v := e.addVendor("flaky", simengine.Config{Models: []string{"m"}, FailRate: 1})
	e.addModel(store.Model{ID: "m", Vendor: "flaky"})
	e.reload()
	for i := 0; i < 5; i++ {
		if r := e.post("/v1/chat/completions", e.key, chat("m")); r.status != 502 {
			t.Fatalf("call %d: %d %s", i, r.status, r.body)
		}
	}
	if v.hits.Load() != 5 {
		t.Fatalf("vendor hit %d times, want 5", v.hits.Load())
	}
	if e.up.PausedUntil("flaky").IsZero() {
		t.Fatal("vendor not paused after 5 failures")
	}
	r := e.post("/v1/chat/completions", e.key, chat("m"))
	if r.status != 503 || !strings.Contains(r.errorMessage(), "paused") || v.hits.Load() != 5 {
		t.Fatalf("while paused: %d %s (hits %d)", r.status, r.body, v.hits.Load())
	}
	// After the pause, one probe goes through; the vendor has recovered.
	v.engine.SetFailRate(0)
	time.Sleep(800 * time.Millisecond)
	if r := e.post("/v1/chat/completions", e.key, chat("m")); r.status != 200 {
		t.Fatalf("probe: %d %s", r.status, r.body)
	}
	if v.hits.Load() != 6 {
		t.Fatalf("hits after probe %d, want 6", v.hits.Load())
	}
}

// sse reads a streamed answer into its data payloads.
func sse(t *testing.T, body io.Reader) (datas []string) {
	t.Helper()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			datas = append(datas, d)
		}
	}
	return datas
}

func (e *env) stream(key string, body any) (*http.Response, []string) {
	e.t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", e.srv.URL+"/v1/chat/completions", strings.NewReader(string(raw)))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp, sse(e.t, resp.Body)
}

func TestStreamingUsageChunk(t *testing.T) {
	e := newEnv(t, envOptions{})
	v := e.addVendor("openai", simengine.Config{Models: []string{"gpt-4o"}})
	e.addModel(store.Model{ID: "gpt-4o", Vendor: "openai"})
	e.reload()

	t.Run("client did not ask", func(t *testing.T) {
		resp, datas := e.stream(e.key, chat("gpt-4o", "stream", true, "max_tokens", 4))
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("status %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if datas[len(datas)-1] != "[DONE]" {
			t.Fatalf("last event %q", datas[len(datas)-1])
		}
		for _, d := range datas {
			if strings.Contains(d, `"usage":{`) {
				t.Fatalf("usage chunk shown to a client that did not ask: %s", d)
			}
		}
		_, body := v.engine.LastRequest()
		if !strings.Contains(string(body), `"include_usage":true`) {
			t.Fatalf("include_usage not added upstream: %s", body)
		}
		ev := e.meter.all()
		if last := ev[len(ev)-1]; last.OutputTokens != 4 || last.Estimated {
			t.Errorf("usage event %+v: tokens not taken from the upstream's usage chunk", last)
		}
	})
	t.Run("client asked", func(t *testing.T) {
		_, datas := e.stream(e.key, chat("gpt-4o", "stream", true, "max_tokens", 4, "stream_options", map[string]any{"include_usage": true}))
		found := false
		for _, d := range datas {
			found = found || strings.Contains(d, `"usage":{`)
		}
		if !found {
			t.Fatal("usage chunk withheld from a client that asked")
		}
	})
}

func TestStreamCutMidwayEndsWithAnErrorEvent(t *testing.T) {
	e := newEnv(t, envOptions{})
	cut := e.addVendor("cutter", simengine.Config{Models: []string{"m"}})
	other := e.addVendor("other", simengine.Config{Models: []string{"n"}})
	cut.engine.CutAfter(2)
	e.addModel(store.Model{ID: "n", Vendor: "other"})
	e.addModel(store.Model{ID: "m", Vendor: "cutter", Fallbacks: []string{"n"}})
	e.reload()
	resp, datas := e.stream(e.key, chat("m", "stream", true, "max_tokens", 10))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	last := datas[len(datas)-1]
	if !strings.Contains(last, `"error"`) || !strings.Contains(last, "upstream_error") {
		t.Fatalf("stream did not end with an error event: %q", datas)
	}
	if datas[len(datas)-2] == "[DONE]" || len(datas) < 3 {
		t.Fatalf("events: %q", datas)
	}
	if other.hits.Load() != 0 {
		t.Fatal("a stream broken after its first byte was retried elsewhere")
	}
}

func TestTwoMiBDataLinePassesIntact(t *testing.T) {
	e := newEnv(t, envOptions{})
	payload := `{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + strings.Repeat("z", 2<<20) + `"}}]}`
	up := newRawUpstream(t, "data: "+payload+"\n\n"+"data: [DONE]\n\n")
	e.registerVendor("raw", up.URL+"/v1", "sk-raw")
	e.addModel(store.Model{ID: "raw", Vendor: "raw"})
	e.reload()
	_, datas := e.stream(e.key, chat("raw", "stream", true))
	if len(datas) != 2 || datas[0] != payload || datas[1] != "[DONE]" {
		t.Fatalf("got %d events; first %d bytes", len(datas), len(datas[0]))
	}
	ev := e.meter.all()
	if last := ev[len(ev)-1]; !last.Estimated {
		t.Errorf("no usage upstream, yet the event is not marked estimated: %+v", last)
	}
}

func TestClientDisconnectMidStream(t *testing.T) {
	e := newEnv(t, envOptions{})
	v := e.addVendor("slow", simengine.Config{Models: []string{"m"}, TPS: 20})
	e.addModel(store.Model{ID: "m", Vendor: "slow"})
	e.reload()
	ctx, cancel := context.WithCancel(context.Background())
	raw, _ := json.Marshal(chat("m", "stream", true, "max_tokens", 200))
	req, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/v1/chat/completions", strings.NewReader(string(raw)))
	req.Header.Set("Authorization", "Bearer "+e.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	for i := 0; i < 3; i++ { // a few chunks arrive, then the client leaves
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for v.engine.Running() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if v.engine.Running() != 0 {
		t.Fatal("the upstream call was not cancelled when the client left")
	}
	for time.Now().Before(deadline) && len(e.meter.all()) == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	ev := e.meter.all()
	if len(ev) != 1 || ev[0].Status != 499 || ev[0].OutputTokens == 0 {
		t.Fatalf("usage events %+v", ev)
	}
}

func TestModelsListsWhatTheKeyMayUse(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.addVendor("openai", simengine.Config{Models: []string{"a", "b"}})
	e.addModel(store.Model{ID: "a", Vendor: "openai"})
	e.addModel(store.Model{ID: "b", Vendor: "openai"})
	if _, err := e.store.UpsertTenant(context.Background(), actor, store.Tenant{ID: "acme", AllowedModels: []string{"b"}}); err != nil {
		t.Fatal(err)
	}
	e.reload()
	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+e.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Data []struct{ ID string } `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range out.Data {
		ids = append(ids, d.ID)
	}
	if strings.Join(ids, ",") != "auto,b" {
		t.Fatalf("models = %v", ids)
	}
}
