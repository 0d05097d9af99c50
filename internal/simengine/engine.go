// Package simengine is a simulated inference engine. It serves the OpenAI API
// with deterministic text and real token usage, runs at most Config.Slots
// requests at once and queues the rest in arrival order, and exposes the status
// endpoints of the engine it impersonates (vLLM, SGLang, TGI, llama.cpp,
// Ollama) with live counts taken from that queue, in that engine's own format.
//
// The gateway's tests, the agent's engine adapters, the `switchyard dev` demo
// and the benchmark tool run against it instead of GPUs, so it must be
// reproducible: the same request gives the same text, failures are drawn from a
// seeded generator, and every delay can be changed or lifted at run time
// (Set* methods or POST /sim/config) so that tests can hold requests in flight
// and release them without sleeping.
//
// Endpoints, for every flavour:
//
//	POST /v1/chat/completions, /v1/completions  stream or not; tools; usage
//	POST /v1/embeddings                         unit vectors from a hash of each input
//	GET  /v1/models, /v1/models/{id}            in the flavour's shape
//	GET  /sim/stats                             Stats: counts, per model, last request
//	GET  /sim/config, POST /sim/config          Knobs: read or change the run-time settings
//
// and by flavour:
//
//	vllm      GET /metrics (vllm:num_requests_running, …_waiting, kv_cache_usage_perc), /health, /version
//	sglang    GET /metrics (sglang:num_running_reqs, num_queue_reqs, token_usage), /health, /get_model_info
//	tgi       GET /metrics (tgi_batch_current_size, tgi_queue_size), /health, /info
//	llamacpp  GET /metrics (llamacpp:requests_processing, requests_deferred), /health, /slots, /props
//	ollama    GET /, /api/version, /api/tags, /api/ps, POST /api/show; the native model-management
//	          and generation routes (/api/pull, /api/delete, /api/chat, …) answer 200 and are counted
//	openai    nothing more
//
// Where the simulator departs from a real engine it says so: one word is one
// token; every flavour refuses an unknown model name (llama.cpp and TGI would
// serve any name with their one model); Slots is shared by all models, as one
// engine process's batch is; an Ollama model, once loaded, stays loaded.
//
// The zero Config is usable: one OpenAI-flavoured engine with no models, no
// slot limit and no delays.
package simengine

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Engine flavours: which real engine the simulator impersonates. The flavour
// decides which status endpoints exist and in which format they report.
const (
	FlavorOpenAI   = "openai"
	FlavorVLLM     = "vllm"
	FlavorSGLang   = "sglang"
	FlavorTGI      = "tgi"
	FlavorLlamaCpp = "llamacpp"
	FlavorOllama   = "ollama"
)

// Flavors lists every flavour New accepts.
func Flavors() []string {
	return []string{FlavorOpenAI, FlavorVLLM, FlavorSGLang, FlavorTGI, FlavorLlamaCpp, FlavorOllama}
}

// Defaults applied by New to zero Config fields.
const (
	DefaultContextWindow = 8192
	DefaultMaxTokens     = 16
	DefaultEmbeddingDim  = 8
)

// Config describes the simulated engine. Durations and rates are starting
// values; the matching Set* methods change them while the engine runs.
type Config struct {
	// Models served, by the name clients put in "model".
	Models []string
	// Flavor is one of Flavors(); empty means FlavorOpenAI.
	Flavor string
	// Slots is the most requests run at once, across all models (one engine
	// process, one batch); the rest wait in FIFO order. 0 means unlimited.
	Slots int
	// TPS is output tokens per second per request; 0 means as fast as possible.
	TPS float64
	// TTFT is the time from admission to the first token; TTFTPer1kInput adds
	// this much per 1000 prompt tokens, as prefill does on a real engine.
	TTFT           time.Duration
	TTFTPer1kInput time.Duration
	// Latency is an extra fixed delay before a non-streaming response.
	Latency time.Duration
	// FailRate is the fraction of requests answered 500, drawn from a
	// generator seeded with Seed so that a run is reproducible.
	FailRate float64
	// ContextWindow bounds prompt plus output tokens (default 8192).
	ContextWindow int
	// DefaultMaxTokens is the output length when the request sets no limit
	// (default 16).
	DefaultMaxTokens int
	Seed             int64
	// OllamaOnCPU makes the ollama flavour report size_vram 0, as Ollama does
	// for a model running on the CPU.
	OllamaOnCPU bool
	// OllamaUnloaded starts the ollama flavour with no model in memory; a
	// model is loaded by its first request.
	OllamaUnloaded bool
	// EmbeddingDim is the length of embedding vectors (default 8).
	EmbeddingDim int
}

// Engine is a running simulated engine. Its methods are safe for concurrent use.
type Engine struct {
	flavor           string
	models           []string          // as configured, in order
	names            map[string]string // accepted request name → served model
	contextWindow    int
	defaultMaxTokens int
	embeddingDim     int
	ollamaOnCPU      bool
	seed             uint64
	vocab            []string
	started          time.Time
	logger           *slog.Logger
	handler          http.Handler

	mu      sync.Mutex
	k       knobs
	changed chan struct{} // closed and replaced on every knob change, to wake paced waits
	rng     *rand.Rand    // FailRate draws, guarded by mu

	running int
	queue   []*ticket
	byModel map[string]*modelCounts
	seq     uint64 // requests received, for response ids

	served, rejected, failed, cut, nativeRequests int64

	lastPath    string
	lastHeaders http.Header
	lastBody    []byte

	ollamaLoaded map[string]bool
}

// knobs are the settings that may change at run time.
type knobs struct {
	tps         float64
	ttft        time.Duration
	ttftPer1k   time.Duration
	latency     time.Duration
	failRate    float64
	slots       int
	rejectUntil time.Time
	retryAfter  time.Duration
	stallAfter  int
	stallFor    time.Duration
	cutAfter    int // < 0: off
}

type modelCounts struct {
	running, waiting               int
	served, rejected, failed       int64
	promptTokens, completionTokens int64
}

// New returns an engine for cfg, applying the documented defaults. It panics
// on an unknown flavour: that is a mistake in the caller's code, and a
// simulator quietly impersonating a different engine would make the tests that
// use it pass or fail for the wrong reason. A nil logger discards logs.
func New(cfg Config, logger *slog.Logger) *Engine {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	flavor := cfg.Flavor
	if flavor == "" {
		flavor = FlavorOpenAI
	}
	if !slices.Contains(Flavors(), flavor) {
		panic(fmt.Sprintf("simengine: unknown flavor %q (want one of %s)", cfg.Flavor, strings.Join(Flavors(), ", ")))
	}
	e := &Engine{
		flavor:           flavor,
		names:            make(map[string]string),
		contextWindow:    orDefault(cfg.ContextWindow, DefaultContextWindow),
		defaultMaxTokens: orDefault(cfg.DefaultMaxTokens, DefaultMaxTokens),
		embeddingDim:     orDefault(cfg.EmbeddingDim, DefaultEmbeddingDim),
		ollamaOnCPU:      cfg.OllamaOnCPU,
		seed:             uint64(cfg.Seed),
		vocab:            strings.Fields(vocabulary),
		started:          time.Now(),
		logger:           logger,
		changed:          make(chan struct{}),
		rng:              rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5eed_5eed_5eed_5eed)),
		byModel:          make(map[string]*modelCounts),
		ollamaLoaded:     make(map[string]bool),
		k: knobs{
			tps:       max(cfg.TPS, 0),
			ttft:      max(cfg.TTFT, 0),
			ttftPer1k: max(cfg.TTFTPer1kInput, 0),
			latency:   max(cfg.Latency, 0),
			failRate:  min(max(cfg.FailRate, 0), 1),
			slots:     max(cfg.Slots, 0),
			cutAfter:  -1,
		},
	}
	for _, m := range cfg.Models {
		if m == "" || e.byModel[m] != nil {
			continue
		}
		e.models = append(e.models, m)
		e.byModel[m] = &modelCounts{}
		e.names[m] = m
		if !cfg.OllamaUnloaded {
			e.ollamaLoaded[m] = true
		}
	}
	if flavor == FlavorOllama {
		// Ollama resolves a name without a tag to ":latest" and back; a test
		// that registers "llama3" must reach the model Ollama lists as
		// "llama3:latest", and the other way round.
		for _, m := range e.models {
			base, tag, hasTag := strings.Cut(m, ":")
			switch {
			case !hasTag:
				e.addAlias(m+":latest", m)
			case tag == "latest":
				e.addAlias(base, m)
			}
		}
	}
	e.handler = e.routes()
	return e
}

func (e *Engine) addAlias(alias, model string) {
	if _, taken := e.names[alias]; !taken {
		e.names[alias] = model
	}
}

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// Handler returns the engine's HTTP handler: the OpenAI API, the flavour's
// status endpoints and the /sim/ control endpoints.
func (e *Engine) Handler() http.Handler { return e.handler }

// Flavor reports the flavour the engine impersonates.
func (e *Engine) Flavor() string { return e.flavor }

// Models reports the served models in configured order.
func (e *Engine) Models() []string { return slices.Clone(e.models) }

// notifyLocked wakes every paced wait so that it re-reads the knobs: a test
// that lowers TTFT or raises TPS releases requests already in flight.
func (e *Engine) notifyLocked() {
	close(e.changed)
	e.changed = make(chan struct{})
}

func (e *Engine) setKnob(f func(k *knobs)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f(&e.k)
	e.dispatchLocked()
	e.notifyLocked()
}

// SetTPS sets output tokens per second per request (0: as fast as possible).
// Requests already generating change pace at their next token.
func (e *Engine) SetTPS(tps float64) { e.setKnob(func(k *knobs) { k.tps = max(tps, 0) }) }

// SetTTFT sets the time to first token; requests still waiting for their first
// token are re-timed from their admission.
func (e *Engine) SetTTFT(d time.Duration) { e.setKnob(func(k *knobs) { k.ttft = max(d, 0) }) }

// SetTTFTPer1kInput sets the extra time to first token per 1000 prompt tokens.
func (e *Engine) SetTTFTPer1kInput(d time.Duration) {
	e.setKnob(func(k *knobs) { k.ttftPer1k = max(d, 0) })
}

// SetLatency sets the extra delay before a non-streaming response.
func (e *Engine) SetLatency(d time.Duration) { e.setKnob(func(k *knobs) { k.latency = max(d, 0) }) }

// SetFailRate sets the fraction of requests answered 500 (clamped to [0, 1]).
func (e *Engine) SetFailRate(f float64) {
	e.setKnob(func(k *knobs) { k.failRate = min(max(f, 0), 1) })
}

// SetSlots sets the most requests run at once (0: unlimited). Raising it
// admits waiting requests at once; lowering it lets running ones finish.
func (e *Engine) SetSlots(n int) { e.setKnob(func(k *knobs) { k.slots = max(n, 0) }) }

// Reject429 answers every inference request 429 for the next d, with a
// Retry-After header of retryAfter (rounded up to whole seconds; when
// retryAfter is 0, the rest of the window). d <= 0 ends a window early.
func (e *Engine) Reject429(d, retryAfter time.Duration) {
	e.setKnob(func(k *knobs) {
		if d <= 0 {
			k.rejectUntil = time.Time{}
			return
		}
		k.rejectUntil = time.Now().Add(d)
		k.retryAfter = max(retryAfter, 0)
	})
}

// StallAfter makes every stream pause for d once it has sent chunks token
// chunks, then carry on; streams already paused re-read d, so
// StallAfter(0, 0) releases them. d <= 0 turns stalling off.
func (e *Engine) StallAfter(chunks int, d time.Duration) {
	e.setKnob(func(k *knobs) {
		k.stallAfter = max(chunks, 0)
		k.stallFor = max(d, 0)
	})
}

// CutAfter makes every stream close its connection, without a [DONE] and
// without ending the chunked body, once it has sent chunks token chunks: the
// client sees the response break off. chunks < 0 turns cutting off. The cut
// panics with http.ErrAbortHandler, as net/http documents for aborting a
// response; a handler that wraps Handler() and recovers panics must re-panic
// that one.
func (e *Engine) CutAfter(chunks int) {
	e.setKnob(func(k *knobs) { k.cutAfter = max(chunks, -1) })
}

// Running reports the requests holding a slot now.
func (e *Engine) Running() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.running
}

// Waiting reports the requests queued for a slot now.
func (e *Engine) Waiting() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.queue)
}

// Served reports the requests answered in full (a stream counts once it sent
// [DONE]).
func (e *Engine) Served() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.served
}

// Stats is the engine's state as GET /sim/stats reports it.
type Stats struct {
	Flavor   string                `json:"flavor"`
	Running  int                   `json:"running"`
	Waiting  int                   `json:"waiting"`
	Served   int64                 `json:"served"`
	Rejected int64                 `json:"rejected"`
	Failed   int64                 `json:"failed"`
	Cut      int64                 `json:"cut"`
	ByModel  map[string]ModelStats `json:"by_model"`
	// NativeRequests counts calls to Ollama's native model-management and
	// generation routes, so that a test can prove a proxy did not forward them.
	NativeRequests int64 `json:"native_requests"`
	// The last inference request received (chat, completions, embeddings),
	// before any validation, so that tests can check what a proxy forwarded.
	LastRequestPath     string          `json:"last_request_path"`
	LastRequestHeaders  http.Header     `json:"last_request_headers"`
	LastRequestBodyJSON json.RawMessage `json:"last_request_body_json"`
}

// ModelStats is one model's share of Stats.
type ModelStats struct {
	Running          int   `json:"running"`
	Waiting          int   `json:"waiting"`
	Served           int64 `json:"served"`
	Rejected         int64 `json:"rejected"`
	Failed           int64 `json:"failed"`
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// Stats returns a consistent snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := Stats{
		Flavor:             e.flavor,
		Running:            e.running,
		Waiting:            len(e.queue),
		Served:             e.served,
		Rejected:           e.rejected,
		Failed:             e.failed,
		Cut:                e.cut,
		NativeRequests:     e.nativeRequests,
		ByModel:            make(map[string]ModelStats, len(e.byModel)),
		LastRequestPath:    e.lastPath,
		LastRequestHeaders: e.lastHeaders.Clone(),
	}
	for name, c := range e.byModel {
		s.ByModel[name] = ModelStats{
			Running:          c.running,
			Waiting:          c.waiting,
			Served:           c.served,
			Rejected:         c.rejected,
			Failed:           c.failed,
			PromptTokens:     c.promptTokens,
			CompletionTokens: c.completionTokens,
		}
	}
	switch {
	case e.lastBody == nil:
		s.LastRequestBodyJSON = json.RawMessage("null")
	case json.Valid(e.lastBody):
		s.LastRequestBodyJSON = json.RawMessage(slices.Clone(e.lastBody))
	default:
		// Not JSON (a test sending garbage on purpose): report it as a string
		// so that the stats document itself stays valid.
		s.LastRequestBodyJSON, _ = json.Marshal(string(e.lastBody))
	}
	return s
}

// LastRequest returns the headers and raw body of the last inference request.
func (e *Engine) LastRequest() (http.Header, []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastHeaders.Clone(), slices.Clone(e.lastBody)
}

// snapshot returns the current knobs and the channel closed at their next
// change.
func (e *Engine) snapshot() (knobs, <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.k, e.changed
}
