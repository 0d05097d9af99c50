package engine

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

func TestNewRejectsUnknownKind(t *testing.T) {
	_, err := New("triton", "http://127.0.0.1:8000", nil, Options{})
	if !errors.Is(err, ErrUnknownKind) {
		t.Fatalf("err = %v, want ErrUnknownKind", err)
	}
	for _, k := range Kinds() {
		if !strings.Contains(err.Error(), k) {
			t.Errorf("error %q does not list the valid kind %q", err, k)
		}
	}
}

func TestNewChecksItsArguments(t *testing.T) {
	tests := []struct {
		name string
		url  string
		opts Options
	}{
		{"no scheme", "127.0.0.1:8000", Options{}},
		{"not http", "unix:///run/engine.sock", Options{}},
		{"no host", "http://", Options{}},
		{"negative slots", "http://127.0.0.1:8000", Options{Slots: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(KindVLLM, tt.url, nil, tt.opts); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
}

func TestEngineRoot(t *testing.T) {
	tests := map[string]string{
		"http://127.0.0.1:11434":       "http://127.0.0.1:11434",
		"http://127.0.0.1:11434/":      "http://127.0.0.1:11434",
		"http://127.0.0.1:8000/v1":     "http://127.0.0.1:8000",
		"http://127.0.0.1:8000/v1/":    "http://127.0.0.1:8000",
		" https://gpu.lan/vllm/v1?x=1": "https://gpu.lan/vllm",
	}
	for in, want := range tests {
		got, err := engineRoot(in)
		if err != nil || got != want {
			t.Errorf("engineRoot(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// A probe of an engine that is not running fails with an error naming the
// URL it tried, for every kind, and never panics.
func TestProbeEngineDown(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now: connection refused
	for _, kind := range Kinds() {
		t.Run(kind, func(t *testing.T) {
			a, err := New(kind, url, nil, Options{})
			if err != nil {
				t.Fatal(err)
			}
			st, err := a.Probe(context.Background())
			if !errors.Is(err, ErrUnreachable) {
				t.Fatalf("err = %v, want ErrUnreachable", err)
			}
			if !strings.Contains(err.Error(), url) {
				t.Errorf("error %q does not name %s", err, url)
			}
			if !strings.HasPrefix(err.Error(), kind+": ") {
				t.Errorf("error %q does not say which engine", err)
			}
			if len(st.Models) != 0 {
				t.Errorf("models reported from a dead engine: %v", st.Models)
			}
		})
	}
}

func TestProbeHonoursContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	a, err := New(KindOpenAI, srv.URL, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = a.Probe(ctx)
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnreachable) {
		t.Fatalf("err = %v, want context.Canceled and not ErrUnreachable", err)
	}
}

func TestProbeEngineAnswersError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "model is still loading", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	a, err := New(KindVLLM, srv.URL, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Probe(context.Background())
	if err == nil || errors.Is(err, ErrQueueUnknown) {
		t.Fatalf("err = %v, want a plain failure", err)
	}
	for _, part := range []string{"503", "/v1/models", "model is still loading"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not mention %q", err, part)
		}
	}
}

// A model whose family has series for other models only has an unknown queue:
// the fields stay unset, never zero.
func TestMetricsMissingForModel(t *testing.T) {
	st := probeCase(t, KindVLLM, "testdata/vllm/served-name-alias", Options{})
	listed := st.Model("mistral-small")
	alias := st.Model("mistral-small-latest")
	if listed == nil || alias == nil {
		t.Fatalf("models = %v", st.Models)
	}
	if listed.EngineRunning == nil || listed.GetEngineRunning() != 4 || listed.EngineWaiting == nil {
		t.Errorf("mistral-small queue = %v/%v, want 4/0", listed.EngineRunning, listed.EngineWaiting)
	}
	if alias.EngineRunning != nil || alias.EngineWaiting != nil || alias.KvCacheUsage != nil {
		t.Errorf("alias without series got a queue: %v", alias)
	}
}

func TestMalformedExpositionKeepsModels(t *testing.T) {
	srv := httptest.NewServer(fakeEngine(t, "testdata/vllm/malformed-metrics"))
	t.Cleanup(srv.Close)
	a, err := New(KindVLLM, srv.URL, srv.Client(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := a.Probe(context.Background())
	if !errors.Is(err, ErrQueueUnknown) || !strings.Contains(err.Error(), "malformed metrics exposition") {
		t.Fatalf("err = %v, want a malformed-exposition ErrQueueUnknown", err)
	}
	if len(st.Models) != 2 {
		t.Fatalf("models = %v, want both still reported", st.Models)
	}
	for _, m := range st.Models {
		if m.EngineRunning != nil || m.EngineWaiting != nil {
			t.Errorf("%s has a queue from a malformed exposition", m.GetName())
		}
	}
}

func TestOptionsModelsFilter(t *testing.T) {
	st := probeCase(t, KindVLLM, "testdata/vllm", Options{Models: []string{"sql-lora", "not-served"}})
	if len(st.Models) != 1 || st.Models[0].GetName() != "sql-lora" {
		t.Fatalf("models = %v, want only sql-lora", st.Models)
	}
	// The adapter's context window and queue come from its base model even
	// though the base model itself is not reported.
	m := st.Models[0]
	if m.GetContextWindow() != 32768 || m.GetEngineRunning() != 12 {
		t.Errorf("sql-lora = %v, want its base model's window and queue", m)
	}
}

func TestSlotsPrecedence(t *testing.T) {
	tests := []struct {
		name  string
		kind  string
		dir   string
		opts  Options
		slots int32
	}{
		{"tgi asks the engine", KindTGI, "testdata/tgi", Options{}, 128},
		{"operator wins over tgi", KindTGI, "testdata/tgi", Options{Slots: 6}, 6},
		{"llama.cpp counts /slots", KindLlamaCpp, "testdata/llamacpp", Options{}, 4},
		{"llama.cpp falls back to total_slots", KindLlamaCpp, "testdata/llamacpp/older-build", Options{}, 2},
		{"vllm does not say", KindVLLM, "testdata/vllm", Options{}, DefaultSlots},
		{"ollama without OLLAMA_NUM_PARALLEL", KindOllama, "testdata/ollama", Options{Getenv: env(nil)}, DefaultSlots},
		{"ollama with OLLAMA_NUM_PARALLEL", KindOllama, "testdata/ollama",
			Options{Getenv: env(map[string]string{"OLLAMA_NUM_PARALLEL": "3"})}, 3},
		{"operator wins over OLLAMA_NUM_PARALLEL", KindOllama, "testdata/ollama",
			Options{Slots: 1, Getenv: env(map[string]string{"OLLAMA_NUM_PARALLEL": "3"})}, 1},
		{"bad OLLAMA_NUM_PARALLEL is ignored", KindOllama, "testdata/ollama",
			Options{Getenv: env(map[string]string{"OLLAMA_NUM_PARALLEL": "many"})}, DefaultSlots},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := probeCase(t, tt.kind, tt.dir, tt.opts)
			if len(st.Models) == 0 {
				t.Fatal("no models")
			}
			for _, m := range st.Models {
				if m.GetSlots() != tt.slots {
					t.Errorf("%s slots = %d, want %d", m.GetName(), m.GetSlots(), tt.slots)
				}
			}
		})
	}
}

func TestOllamaColdContext(t *testing.T) {
	tests := []struct {
		name  string
		facts showFacts
		env   int64
		want  int64
	}{
		{"nothing set", showFacts{}, 0, 4096},
		{"environment", showFacts{}, 32768, 32768},
		{"modelfile beats environment", showFacts{numCtx: 8192}, 32768, 8192},
		{"trained length caps", showFacts{numCtx: 8192, trainCtx: 2048}, 0, 2048},
		{"trained length caps the environment", showFacts{trainCtx: 40960}, 131072, 40960},
		{"trained length alone is not used", showFacts{trainCtx: 131072}, 0, 4096},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := coldContext(tt.facts, tt.env); got != tt.want {
				t.Errorf("coldContext = %d, want %d", got, tt.want)
			}
		})
	}
}

// /api/show is asked once per model and digest, not on every heartbeat.
func TestOllamaShowIsCached(t *testing.T) {
	var shows atomic.Int32
	engine := fakeEngine(t, "testdata/ollama")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/show" {
			shows.Add(1)
		}
		engine.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	a, err := New(KindOllama, srv.URL, srv.Client(), Options{Getenv: env(nil)})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := a.Probe(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// Two cold models (qwen3:8b, nomic-embed-text); the warm one reports its
	// context in /api/ps and the cloud model is not reported.
	if n := shows.Load(); n != 2 {
		t.Errorf("/api/show called %d times over three probes, want 2", n)
	}
}

func TestStatusModel(t *testing.T) {
	st := Status{Models: []*switchyardv1.NodeModelStatus{{Name: "llama3.2:latest"}, {Name: "qwen3:8b"}}}
	tests := map[string]string{
		"qwen3:8b":        "qwen3:8b",
		"llama3.2":        "llama3.2:latest",
		"llama3.2:latest": "llama3.2:latest",
		"qwen3":           "",
		"mistral":         "",
	}
	for in, want := range tests {
		got := st.Model(in)
		if got.GetName() != want {
			t.Errorf("Model(%q) = %q, want %q", in, got.GetName(), want)
		}
	}
}

func TestPlacement(t *testing.T) {
	tests := []struct {
		name string
		m    *switchyardv1.NodeModelStatus
		want Placement
	}{
		{"all on the GPU", &switchyardv1.NodeModelStatus{Warm: true, SizeBytes: 100, SizeVramBytes: 100}, PlacementGPU},
		{"split", &switchyardv1.NodeModelStatus{Warm: true, SizeBytes: 100, SizeVramBytes: 60}, PlacementPartlyCPU},
		{"CPU only", &switchyardv1.NodeModelStatus{Warm: true, SizeBytes: 100}, PlacementCPU},
		{"not loaded", &switchyardv1.NodeModelStatus{SizeBytes: 100}, PlacementUnknown},
		{"no sizes (not Ollama)", &switchyardv1.NodeModelStatus{Warm: true}, PlacementUnknown},
		{"nil", nil, PlacementUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PlacementOf(tt.m); got != tt.want {
				t.Errorf("PlacementOf = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCPUWarnings(t *testing.T) {
	st := probeCase(t, KindOllama, "testdata/ollama", Options{Getenv: env(nil)})
	w := st.CPUWarnings()
	if len(w) != 1 || !strings.Contains(w[0], "gemma3:12b runs partly on the CPU (72%") {
		t.Errorf("warnings = %q", w)
	}
	st = probeCase(t, KindOllama, "testdata/ollama/cpu-only", Options{Models: []string{"llama3.2"}, Getenv: env(nil)})
	w = st.CPUWarnings()
	if len(w) != 1 || !strings.Contains(w[0], "llama3.2 runs on the CPU only") {
		t.Errorf("warnings = %q", w)
	}
}

func TestFraction(t *testing.T) {
	tests := map[float64]float64{0: 0, 0.42: 0.42, 1: 1, 55: 0.55, 100: 1, 250: 1}
	for in, want := range tests {
		if got := fraction(in); got != want {
			t.Errorf("fraction(%v) = %v, want %v", in, got, want)
		}
	}
}

func TestReadDropsBadValues(t *testing.T) {
	set, err := parseMetrics([]byte("# TYPE q gauge\n" +
		"q{model_name=\"a\"} NaN\n" +
		"q{model_name=\"b\"} -1\n" +
		"q{model_name=\"c\"} +Inf\n" +
		"q{model_name=\"d\"} 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := set.read([]string{"q"}, "model_name", nil, sum)
	for _, name := range []string{"a", "b", "c"} {
		if v, ok := r.lookup(name); ok {
			t.Errorf("%s = %v, want unknown", name, v)
		}
	}
	if v, ok := r.lookup("d"); !ok || v != 2 {
		t.Errorf("d = %v, %v; want 2", v, ok)
	}
}

func probeCase(t *testing.T, kind, dir string, opts Options) Status {
	t.Helper()
	srv := httptest.NewServer(fakeEngine(t, dir))
	t.Cleanup(srv.Close)
	a, err := New(kind, srv.URL, srv.Client(), opts)
	if err != nil {
		t.Fatal(err)
	}
	st, err := a.Probe(context.Background())
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	return st
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}
