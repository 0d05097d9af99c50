package simengine

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// holdRequests sends n requests to an engine whose TTFT holds them, waits
// until running and waiting are as wanted, and returns a function that
// releases them and waits until they are served.
func holdRequests(t *testing.T, e *Engine, url, model string, n, wantRunning int) (release func()) {
	t.Helper()
	e.SetTTFT(hold)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := post(context.Background(), url+"/v1/chat/completions", chatBody(model, "hold me", nil))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	served := e.Served()
	waitFor(t, "requests to be held", func() bool { return e.Running() == wantRunning && e.Waiting() == n-wantRunning })
	return func() {
		e.SetTTFT(0)
		wg.Wait()
		waitFor(t, "held requests to be served", func() bool { return e.Served() == served+int64(n) })
	}
}

func scrape(t *testing.T, url string) map[string]*promFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	fams, err := parseExposition(string(b))
	if err != nil {
		t.Fatalf("invalid exposition: %v\n%s", err, b)
	}
	return fams
}

// TestFlavorMetricsLive holds one request running and two waiting behind a
// single slot and checks that each flavour's /metrics reports exactly that,
// under the engine's own metric names, then reports the queue drained.
func TestFlavorMetricsLive(t *testing.T) {
	const model = "org/model-7b"
	tests := []struct {
		flavor           string
		running, waiting string
		kv               string // the KV-use gauge, if the engine has one
		labels           map[string]string
		tokenCounter     string
	}{
		{FlavorVLLM, "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
			map[string]string{"model_name": model}, "vllm:generation_tokens_total"},
		{FlavorSGLang, "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
			map[string]string{"model_name": model}, "sglang:generation_tokens_total"},
		{FlavorTGI, "tgi_batch_current_size", "tgi_queue_size", "", nil, "tgi_request_success"},
		{FlavorLlamaCpp, "llamacpp:requests_processing", "llamacpp:requests_deferred", "", nil, "llamacpp:tokens_predicted_total"},
	}
	for _, tc := range tests {
		t.Run(tc.flavor, func(t *testing.T) {
			e, srv := newEngine(t, Config{Models: []string{model, "other"}, Flavor: tc.flavor, Slots: 1})
			release := holdRequests(t, e, srv.URL, model, 3, 1)
			fams := scrape(t, srv.URL)
			for name, want := range map[string]float64{tc.running: 1, tc.waiting: 2, tc.kv: 1} {
				if name == "" {
					continue
				}
				f := fams[name]
				if f == nil {
					t.Fatalf("no %s", name)
				}
				if f.typ != "gauge" || f.help == "" {
					t.Errorf("%s: type %q help %q", name, f.typ, f.help)
				}
				if got := f.value(t, name, tc.labels); got != want {
					t.Errorf("%s = %v while held, want %v", name, got, want)
				}
			}
			if tc.labels != nil {
				// The idle model reports zero under its own label.
				if got := fams[tc.running].value(t, tc.running, map[string]string{"model_name": "other"}); got != 0 {
					t.Errorf("idle model running = %v", got)
				}
			}
			release()
			fams = scrape(t, srv.URL)
			if r, w := fams[tc.running].value(t, tc.running, tc.labels), fams[tc.waiting].value(t, tc.waiting, tc.labels); r != 0 || w != 0 {
				t.Errorf("after release: running %v waiting %v", r, w)
			}
			if f := fams[tc.tokenCounter]; f == nil || f.typ != "counter" || f.value(t, tc.tokenCounter, tc.labels) <= 0 {
				t.Errorf("%s did not count the served requests", tc.tokenCounter)
			}
		})
	}
}

func TestLlamaCppStatus(t *testing.T) {
	e, srv := newEngine(t, Config{Models: []string{"gemma.gguf"}, Flavor: FlavorLlamaCpp, Slots: 2, ContextWindow: 4096})
	release := holdRequests(t, e, srv.URL, "gemma.gguf", 3, 2)
	var slots []map[string]any
	getJSON(t, srv.URL+"/slots", &slots)
	if len(slots) != 2 {
		t.Fatalf("slots: %v", slots)
	}
	for i, s := range slots {
		if num(s["id"]) != i || s["is_processing"] != true || num(s["n_ctx"]) != 4096 {
			t.Errorf("slot %d: %v", i, s)
		}
	}
	var props map[string]any
	getJSON(t, srv.URL+"/props", &props)
	if num(props["total_slots"]) != 2 || num(path(props, "default_generation_settings", "n_ctx")) != 4096 {
		t.Errorf("props: %v", props)
	}
	release()
	getJSON(t, srv.URL+"/slots", &slots)
	if slots[0]["is_processing"] != false || slots[1]["is_processing"] != false {
		t.Errorf("slots after release: %v", slots)
	}
	var health map[string]any
	getJSON(t, srv.URL+"/health", &health)
	if health["status"] != "ok" {
		t.Errorf("health: %v", health)
	}
}

func TestTGIInfo(t *testing.T) {
	_, srv := newEngine(t, Config{Models: []string{"org/m"}, Flavor: FlavorTGI, Slots: 6, ContextWindow: 2048})
	var info map[string]any
	getJSON(t, srv.URL+"/info", &info)
	if info["model_id"] != "org/m" || num(info["max_concurrent_requests"]) != 6 ||
		num(info["max_total_tokens"]) != 2048 || num(info["max_input_tokens"]) != 2047 {
		t.Errorf("info: %v", info)
	}
}

func TestOllama(t *testing.T) {
	tests := []struct {
		name  string
		onCPU bool
	}{
		{"gpu", false},
		{"cpu", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, srv := newEngine(t, Config{
				Models: []string{"gemma3:4b", "llama3"}, Flavor: FlavorOllama, Slots: 1,
				ContextWindow: 4096, OllamaOnCPU: tc.onCPU, OllamaUnloaded: true,
			})
			type psModel struct {
				Name          string `json:"name"`
				Model         string `json:"model"`
				Size          int64  `json:"size"`
				SizeVRAM      int64  `json:"size_vram"`
				ContextLength int    `json:"context_length"`
				ExpiresAt     string `json:"expires_at"`
			}
			var ps struct {
				Models []psModel `json:"models"`
			}
			getJSON(t, srv.URL+"/api/ps", &ps)
			if len(ps.Models) != 0 {
				t.Fatalf("unloaded engine reports loaded models: %+v", ps)
			}
			var tags struct {
				Models []map[string]any `json:"models"`
			}
			getJSON(t, srv.URL+"/api/tags", &tags)
			if len(tags.Models) != 2 || tags.Models[0]["name"] != "gemma3:4b" || path(tags.Models[0], "details", "family") != "gemma3" {
				t.Errorf("tags: %v", tags)
			}

			// A request, by the name with its implicit tag, loads the model;
			// while it is held the model shows in /api/ps.
			release := holdRequests(t, e, srv.URL, "llama3:latest", 2, 1)
			getJSON(t, srv.URL+"/api/ps", &ps)
			if len(ps.Models) != 1 {
				t.Fatalf("ps while serving: %+v", ps)
			}
			m := ps.Models[0]
			wantVRAM := m.Size
			if tc.onCPU {
				wantVRAM = 0
			}
			expires, err := time.Parse(time.RFC3339Nano, m.ExpiresAt)
			if m.Name != "llama3" || m.Model != "llama3" || m.Size <= 0 || m.SizeVRAM != wantVRAM ||
				m.ContextLength != 4096 || err != nil || !expires.After(time.Now()) {
				t.Errorf("ps entry: %+v (expires_at: %v)", m, err)
			}
			release()

			status, show := call(t, srv.URL+"/api/show", map[string]any{"model": "gemma3:4b"})
			if status != 200 || path(show, "model_info", "general.architecture") != "gemma3" ||
				num(path(show, "model_info", "gemma3.context_length")) != 4096 {
				t.Errorf("show: %d %v", status, show)
			}
			if status, _ := call(t, srv.URL+"/api/show", map[string]any{"model": "missing"}); status != 404 {
				t.Errorf("show of a missing model: %d", status)
			}
			var version map[string]string
			getJSON(t, srv.URL+"/api/version", &version)
			if version["version"] == "" {
				t.Errorf("version: %v", version)
			}
			if status, b := get(t, srv.URL+"/"); status != 200 || string(b) != "Ollama is running" {
				t.Errorf("GET /: %d %q", status, b)
			}
			if status, _ := get(t, srv.URL+"/metrics"); status != 404 {
				t.Errorf("Ollama has no /metrics, got %d", status)
			}
		})
	}
}

func TestOllamaNativeRoutes(t *testing.T) {
	e, srv := newEngine(t, Config{Models: []string{"m"}, Flavor: FlavorOllama})
	routes := []struct{ method, path string }{
		{http.MethodPost, "/api/pull"},
		{http.MethodDelete, "/api/delete"},
		{http.MethodPost, "/api/copy"},
		{http.MethodPost, "/api/create"},
		{http.MethodPost, "/api/push"},
		{http.MethodPost, "/api/generate"},
		{http.MethodPost, "/api/chat"},
		{http.MethodPost, "/api/embed"},
		{http.MethodPost, "/api/embeddings"},
	}
	for _, r := range routes {
		t.Run(r.path, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), r.method, srv.URL+r.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s %s: %d", r.method, r.path, resp.StatusCode)
			}
		})
	}
	if got := e.Stats().NativeRequests; got != int64(len(routes)) {
		t.Errorf("native_requests %d, want %d", got, len(routes))
	}
}

// TestIdleMetricsGolden pins each flavour's idle /metrics output, as a sample
// of the format for readers and a guard against accidental changes. Set
// SIMENGINE_UPDATE_GOLDEN=1 to rewrite the files.
func TestIdleMetricsGolden(t *testing.T) {
	for _, flavor := range []string{FlavorVLLM, FlavorSGLang, FlavorTGI, FlavorLlamaCpp} {
		t.Run(flavor, func(t *testing.T) {
			_, srv := newEngine(t, Config{Models: []string{"org/model"}, Flavor: flavor, Slots: 4})
			status, got := get(t, srv.URL+"/metrics")
			if status != http.StatusOK {
				t.Fatalf("status %d", status)
			}
			if _, err := parseExposition(string(got)); err != nil {
				t.Fatalf("invalid exposition: %v", err)
			}
			file := filepath.Join("testdata", "metrics_"+flavor+".txt")
			if os.Getenv("SIMENGINE_UPDATE_GOLDEN") != "" {
				if err := os.WriteFile(file, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (set SIMENGINE_UPDATE_GOLDEN=1 to create it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("GET /metrics differs from %s:\n got:\n%s\nwant:\n%s", file, got, want)
			}
		})
	}
}
