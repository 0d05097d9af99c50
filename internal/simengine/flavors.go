package simengine

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Versions the flavours report: recent releases whose status formats the
// simulator follows.
const (
	vllmVersion   = "0.11.0"
	tgiVersion    = "3.3.6"
	ollamaVersion = "0.12.6"
	llamaCppBuild = "b6700"
)

// unlimitedKVCapacity is the number of requests a KV cache is taken to hold
// when Slots is 0, so that the KV-use gauges still rise with load.
const unlimitedKVCapacity = 64

// ollamaKeepAlive is Ollama's default keep_alive, reported as a loaded model's
// expiry. The simulator never unloads a model: a test that wants a cold model
// starts the engine with OllamaUnloaded.
const ollamaKeepAlive = 5 * time.Minute

func (e *Engine) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", e.handleGeneration(kindChat))
	mux.HandleFunc("POST /v1/completions", e.handleGeneration(kindText))
	mux.HandleFunc("POST /v1/embeddings", e.handleEmbeddings)
	mux.HandleFunc("GET /v1/models", e.handleModels)
	mux.HandleFunc("GET /v1/models/{model...}", e.handleModel)
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, errTypeInvalid, "not_found", "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	mux.HandleFunc("GET /sim/stats", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, e.Stats())
	})
	mux.HandleFunc("GET /sim/config", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, e.Knobs())
	})
	mux.HandleFunc("POST /sim/config", e.handleControl)

	ok := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }
	switch e.flavor {
	case FlavorVLLM:
		mux.HandleFunc("GET /metrics", e.metricsHandler(e.writeVLLMMetrics))
		mux.HandleFunc("GET /health", ok)
		mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, map[string]string{"version": vllmVersion})
		})
	case FlavorSGLang:
		mux.HandleFunc("GET /metrics", e.metricsHandler(e.writeSGLangMetrics))
		mux.HandleFunc("GET /health", ok)
		mux.HandleFunc("GET /get_model_info", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, map[string]any{"model_path": e.firstModel(), "is_generation": true})
		})
	case FlavorTGI:
		mux.HandleFunc("GET /metrics", e.metricsHandler(e.writeTGIMetrics))
		mux.HandleFunc("GET /health", ok)
		mux.HandleFunc("GET /info", e.handleTGIInfo)
	case FlavorLlamaCpp:
		mux.HandleFunc("GET /metrics", e.metricsHandler(e.writeLlamaCppMetrics))
		mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		})
		mux.HandleFunc("GET /slots", e.handleLlamaCppSlots)
		mux.HandleFunc("GET /props", e.handleLlamaCppProps)
	case FlavorOllama:
		mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, "Ollama is running")
		})
		mux.HandleFunc("GET /api/version", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, map[string]string{"version": ollamaVersion})
		})
		mux.HandleFunc("GET /api/tags", e.handleOllamaTags)
		mux.HandleFunc("GET /api/ps", e.handleOllamaPS)
		mux.HandleFunc("POST /api/show", e.handleOllamaShow)
		e.ollamaNativeRoutes(mux)
	}
	return mux
}

func (e *Engine) firstModel() string {
	if len(e.models) == 0 {
		return ""
	}
	return e.models[0]
}

// modelEntry is one model as the flavour's GET /v1/models lists it.
func (e *Engine) modelEntry(m string) map[string]any {
	entry := map[string]any{"id": m, "object": "model", "created": e.started.Unix(), "owned_by": "simengine"}
	switch e.flavor {
	case FlavorVLLM, FlavorSGLang:
		entry["owned_by"] = e.flavor
		entry["root"] = m
		entry["parent"] = nil
		entry["max_model_len"] = e.contextWindow
	case FlavorTGI:
		entry["owned_by"] = m
	case FlavorLlamaCpp:
		entry["owned_by"] = "llamacpp"
		entry["meta"] = map[string]any{
			"n_ctx_train": e.contextWindow,
			"n_embd":      e.embeddingDim,
			"n_params":    ollamaSize(m) * 2,
			"size":        ollamaSize(m),
		}
	case FlavorOllama:
		entry["owned_by"] = "library"
	}
	return entry
}

func (e *Engine) handleModels(w http.ResponseWriter, _ *http.Request) {
	data := make([]map[string]any, 0, len(e.models))
	for _, m := range e.models {
		data = append(data, e.modelEntry(m))
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (e *Engine) handleModel(w http.ResponseWriter, r *http.Request) {
	m, ok := e.names[r.PathValue("model")]
	if !ok {
		writeError(w, http.StatusNotFound, errTypeNotFound, "model_not_found",
			fmt.Sprintf("the model %q does not exist on this engine", r.PathValue("model")))
		return
	}
	writeJSON(w, http.StatusOK, e.modelEntry(m))
}

// load is the live state the status endpoints report.
type load struct {
	running, waiting int
	slots            int
	byModel          map[string]modelCounts
}

func (e *Engine) load() load {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := load{running: e.running, waiting: len(e.queue), slots: e.k.slots, byModel: make(map[string]modelCounts, len(e.byModel))}
	for m, c := range e.byModel {
		l.byModel[m] = *c
	}
	return l
}

func (l load) totals() (prompt, completion, served int64) {
	for _, c := range l.byModel {
		prompt += c.promptTokens
		completion += c.completionTokens
		served += c.served
	}
	return prompt, completion, served
}

// kvUsage is the KV-cache fraction in use when running requests hold a cache
// sized for slots requests.
func kvUsage(running, slots int) float64 {
	if slots <= 0 {
		slots = unlimitedKVCapacity
	}
	return min(float64(running)/float64(slots), 1)
}

// exposition writes the Prometheus text format by hand: the engines' metric
// names contain ':' and each engine has its own label set and number style,
// which a client library's registry would not reproduce.
type exposition struct {
	b strings.Builder
	// pythonFloats prints integral values as "1.0", as Python's client does
	// (vLLM, SGLang); Rust's and llama.cpp's exporters print "1".
	pythonFloats bool
}

// escapeHelp and escapeLabel apply the text format's escaping: backslash and
// newline in HELP text, and also the double quote in label values.
func escapeHelp(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "\n", `\n`)
}

func escapeLabel(s string) string {
	return strings.ReplaceAll(escapeHelp(s), `"`, `\"`)
}

func (x *exposition) family(name, typ, help string) {
	fmt.Fprintf(&x.b, "# HELP %s %s\n# TYPE %s %s\n", name, escapeHelp(help), name, typ)
}

// sample writes one sample; labels are name, value pairs in print order.
func (x *exposition) sample(name string, v float64, labels ...string) {
	x.b.WriteString(name)
	if len(labels) > 0 {
		x.b.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				x.b.WriteByte(',')
			}
			fmt.Fprintf(&x.b, `%s="%s"`, labels[i], escapeLabel(labels[i+1]))
		}
		x.b.WriteByte('}')
	}
	x.b.WriteByte(' ')
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if x.pythonFloats && !strings.ContainsAny(s, ".eEnN") {
		s += ".0"
	}
	x.b.WriteString(s)
	x.b.WriteByte('\n')
}

func (e *Engine) metricsHandler(write func(x *exposition, l load)) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		var x exposition
		write(&x, e.load())
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = io.WriteString(w, x.b.String())
	}
}

// writeVLLMMetrics follows vLLM's V1 engine: one series per served model name,
// labelled model_name and engine.
func (e *Engine) writeVLLMMetrics(x *exposition, l load) {
	x.pythonFloats = true
	per := func(name, typ, help string, value func(c modelCounts) float64) {
		x.family(name, typ, help)
		for _, m := range e.models {
			x.sample(name, value(l.byModel[m]), "model_name", m, "engine", "0")
		}
	}
	per("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
		func(c modelCounts) float64 { return float64(c.running) })
	per("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
		func(c modelCounts) float64 { return float64(c.waiting) })
	per("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
		func(c modelCounts) float64 { return kvUsage(c.running, l.slots) })
	per("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
		func(c modelCounts) float64 { return float64(c.promptTokens) })
	per("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
		func(c modelCounts) float64 { return float64(c.completionTokens) })
}

// writeSGLangMetrics follows SGLang's scheduler metrics, labelled by model
// name and, as recent releases do, engine type and parallel ranks.
func (e *Engine) writeSGLangMetrics(x *exposition, l load) {
	x.pythonFloats = true
	per := func(name, typ, help string, value func(c modelCounts) float64) {
		x.family(name, typ, help)
		for _, m := range e.models {
			x.sample(name, value(l.byModel[m]), "model_name", m, "engine_type", "unified", "tp_rank", "0", "pp_rank", "0")
		}
	}
	per("sglang:num_running_reqs", "gauge", "The number of running requests.",
		func(c modelCounts) float64 { return float64(c.running) })
	per("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.",
		func(c modelCounts) float64 { return float64(c.waiting) })
	per("sglang:token_usage", "gauge", "The token usage.",
		func(c modelCounts) float64 { return kvUsage(c.running, l.slots) })
	per("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
		func(c modelCounts) float64 { return float64(c.promptTokens) })
	per("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.",
		func(c modelCounts) float64 { return float64(c.completionTokens) })
}

// writeTGIMetrics follows TGI's router: one model per process, so no labels.
func (e *Engine) writeTGIMetrics(x *exposition, l load) {
	_, _, served := l.totals()
	received := served + int64(l.running+l.waiting)
	x.family("tgi_request_count", "counter", "Total number of requests")
	x.sample("tgi_request_count", float64(received))
	x.family("tgi_request_success", "counter", "Number of successful requests")
	x.sample("tgi_request_success", float64(served))
	x.family("tgi_queue_size", "gauge", "Current queue size")
	x.sample("tgi_queue_size", float64(l.waiting))
	x.family("tgi_batch_current_size", "gauge", "Current batch size")
	x.sample("tgi_batch_current_size", float64(l.running))
}

// writeLlamaCppMetrics follows llama-server started with --metrics.
func (e *Engine) writeLlamaCppMetrics(x *exposition, l load) {
	prompt, completion, _ := l.totals()
	x.family("llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.")
	x.sample("llamacpp:prompt_tokens_total", float64(prompt))
	x.family("llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed.")
	x.sample("llamacpp:tokens_predicted_total", float64(completion))
	x.family("llamacpp:requests_processing", "gauge", "Number of requests processing.")
	x.sample("llamacpp:requests_processing", float64(l.running))
	x.family("llamacpp:requests_deferred", "gauge", "Number of requests deferred.")
	x.sample("llamacpp:requests_deferred", float64(l.waiting))
}

func (e *Engine) handleTGIInfo(w http.ResponseWriter, _ *http.Request) {
	l := e.load()
	maxConcurrent := l.slots
	if maxConcurrent == 0 {
		maxConcurrent = 128 // TGI's default --max-concurrent-requests
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"model_id":                e.firstModel(),
		"model_sha":               nil,
		"model_pipeline_tag":      "text-generation",
		"max_concurrent_requests": maxConcurrent,
		"max_best_of":             2,
		"max_stop_sequences":      4,
		"max_input_tokens":        e.contextWindow - 1,
		"max_total_tokens":        e.contextWindow,
		"validation_workers":      2,
		"max_client_batch_size":   4,
		"router":                  "text-generation-router",
		"version":                 tgiVersion,
		"sha":                     nil,
		"docker_label":            nil,
	})
}

// llamaCppSlots is the number of slots llama-server reports: its --parallel.
// With no limit the simulator shows one slot per running request (at least
// one), since llama-server has no unlimited mode.
func llamaCppSlots(l load) int {
	if l.slots > 0 {
		return l.slots
	}
	return max(l.running, 1)
}

func (e *Engine) llamaCppSlot(id int, processing bool) map[string]any {
	task := -1
	if processing {
		task = id + 1
	}
	return map[string]any{
		"id":            id,
		"id_task":       task,
		"n_ctx":         e.contextWindow,
		"speculative":   false,
		"is_processing": processing,
		"params":        map[string]any{"n_predict": -1, "stream": true},
		"next_token":    map[string]any{"has_next_token": processing, "n_remain": -1, "n_decoded": 0},
	}
}

func (e *Engine) handleLlamaCppSlots(w http.ResponseWriter, _ *http.Request) {
	l := e.load()
	n := llamaCppSlots(l)
	slots := make([]map[string]any, n)
	for i := range slots {
		slots[i] = e.llamaCppSlot(i, i < l.running)
	}
	writeJSON(w, http.StatusOK, slots)
}

func (e *Engine) handleLlamaCppProps(w http.ResponseWriter, _ *http.Request) {
	l := e.load()
	writeJSON(w, http.StatusOK, map[string]any{
		"default_generation_settings": e.llamaCppSlot(0, false),
		"total_slots":                 llamaCppSlots(l),
		"model_path":                  e.firstModel(),
		"chat_template":               "",
		"modalities":                  map[string]bool{"vision": false, "audio": false},
		"build_info":                  llamaCppBuild + "-simengine",
	})
}

// ollamaSize is a model's size in bytes, made up from its name but stable.
func ollamaSize(m string) int64 {
	return (1 + int64(hashOf("size", m)%15)) << 30
}

// ollamaArch guesses an architecture name from a model name ("gemma3:4b" →
// "gemma3"), the key prefix Ollama uses in model_info.
func ollamaArch(m string) string {
	base, _, _ := strings.Cut(m, ":")
	base = strings.ToLower(base[strings.LastIndex(base, "/")+1:])
	end := strings.IndexFunc(base, func(r rune) bool { return (r < 'a' || r > 'z') && (r < '0' || r > '9') })
	if end >= 0 {
		base = base[:end]
	}
	if base == "" {
		return "llama"
	}
	return base
}

func ollamaDetails(m string) map[string]any {
	arch := ollamaArch(m)
	return map[string]any{
		"parent_model":       "",
		"format":             "gguf",
		"family":             arch,
		"families":           []string{arch},
		"parameter_size":     fmt.Sprintf("%.1fB", float64(ollamaSize(m)>>30)*1.9),
		"quantization_level": "Q4_K_M",
	}
}

func ollamaDigest(m string) string {
	return fmt.Sprintf("%016x%016x%016x%016x", hashOf("d1", m), hashOf("d2", m), hashOf("d3", m), hashOf("d4", m))
}

func (e *Engine) markLoaded(model string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ollamaLoaded[model] = true
}

func (e *Engine) handleOllamaTags(w http.ResponseWriter, _ *http.Request) {
	models := make([]map[string]any, 0, len(e.models))
	for _, m := range e.models {
		models = append(models, map[string]any{
			"name":        m,
			"model":       m,
			"modified_at": e.started.Format(time.RFC3339Nano),
			"size":        ollamaSize(m),
			"digest":      ollamaDigest(m),
			"details":     ollamaDetails(m),
		})
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}

func (e *Engine) handleOllamaPS(w http.ResponseWriter, _ *http.Request) {
	e.mu.Lock()
	loaded := make(map[string]bool, len(e.ollamaLoaded))
	for m, ok := range e.ollamaLoaded {
		loaded[m] = ok
	}
	e.mu.Unlock()
	expires := time.Now().Add(ollamaKeepAlive).Format(time.RFC3339Nano)
	models := make([]map[string]any, 0, len(e.models))
	for _, m := range e.models {
		if !loaded[m] {
			continue
		}
		size := ollamaSize(m)
		vram := size
		if e.ollamaOnCPU {
			vram = 0
		}
		models = append(models, map[string]any{
			"name":           m,
			"model":          m,
			"size":           size,
			"digest":         ollamaDigest(m),
			"details":        ollamaDetails(m),
			"expires_at":     expires,
			"size_vram":      vram,
			"context_length": e.contextWindow,
		})
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}

func (e *Engine) handleOllamaShow(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model string `json:"model"`
		Name  string `json:"name"` // the field's name before Ollama 0.5
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, maxBodyBytes)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid JSON: " + err.Error()})
		return
	}
	name := req.Model
	if name == "" {
		name = req.Name
	}
	m, ok := e.names[name]
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("model '%s' not found", name)})
		return
	}
	arch := ollamaArch(m)
	writeJSON(w, http.StatusOK, map[string]any{
		"modelfile":  "FROM " + m + "\n",
		"parameters": "",
		"template":   "{{ .Prompt }}",
		"details":    ollamaDetails(m),
		"model_info": map[string]any{
			"general.architecture":         arch,
			"general.parameter_count":      ollamaSize(m) * 2,
			arch + ".context_length":       e.contextWindow,
			arch + ".embedding_length":     e.embeddingDim,
			arch + ".attention.head_count": 8,
		},
		"capabilities": []string{"completion", "tools"},
		"modified_at":  e.started.Format(time.RFC3339Nano),
	})
}

// ollamaNativeRoutes serves Ollama's own model-management and generation API
// as no-ops that succeed and are counted, so that a test can prove the agent's
// front refuses them rather than forwarding them.
func (e *Engine) ollamaNativeRoutes(mux *http.ServeMux) {
	native := func(reply func(body map[string]any) any) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var body map[string]any
			_ = json.NewDecoder(io.LimitReader(r.Body, maxBodyBytes)).Decode(&body)
			e.mu.Lock()
			e.nativeRequests++
			e.mu.Unlock()
			if v := reply(body); v != nil {
				writeJSON(w, http.StatusOK, v)
				return
			}
			w.WriteHeader(http.StatusOK)
		}
	}
	status := func(map[string]any) any { return map[string]string{"status": "success"} }
	empty := func(map[string]any) any { return nil }
	now := func() string { return time.Now().UTC().Format(time.RFC3339Nano) }
	mux.HandleFunc("POST /api/pull", native(status))
	mux.HandleFunc("POST /api/push", native(status))
	mux.HandleFunc("POST /api/create", native(status))
	mux.HandleFunc("POST /api/copy", native(empty))
	mux.HandleFunc("DELETE /api/delete", native(empty))
	mux.HandleFunc("POST /api/generate", native(func(b map[string]any) any {
		return map[string]any{"model": b["model"], "created_at": now(), "response": "", "done": true, "done_reason": "stop"}
	}))
	mux.HandleFunc("POST /api/chat", native(func(b map[string]any) any {
		return map[string]any{"model": b["model"], "created_at": now(),
			"message": map[string]string{"role": "assistant", "content": ""}, "done": true, "done_reason": "stop"}
	}))
	mux.HandleFunc("POST /api/embed", native(func(b map[string]any) any {
		return map[string]any{"model": b["model"], "embeddings": [][]float64{}}
	}))
	mux.HandleFunc("POST /api/embeddings", native(func(map[string]any) any {
		return map[string]any{"embedding": []float64{}}
	}))
}
