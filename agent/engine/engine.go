// Package engine reads what the local inference engine reports about itself —
// its models, whether they are loaded, their context windows and slots, and the
// queue the engine sees — and turns it into the heartbeat's model list.
//
// There is one adapter per engine kind (Ollama, vLLM, SGLang, TGI, llama.cpp, and
// a plain OpenAI-compatible server). Each one reads only the engine's own public
// endpoints; nothing here changes the engine's state.
//
// A figure the engine does not report stays unset in the heartbeat rather than
// zero: the gateway treats an unset queue as unknown, while a zero queue would
// wrongly tell it the engine is idle.
package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

// The engine kinds New accepts; they are also the heartbeat's engine field.
const (
	KindOllama   = "ollama"
	KindVLLM     = "vllm"
	KindSGLang   = "sglang"
	KindTGI      = "tgi"
	KindLlamaCpp = "llamacpp"
	KindOpenAI   = "openai"
)

// DefaultSlots is what a node offers per model when neither the operator nor
// the engine says how many requests it runs at once.
const DefaultSlots = 4

// defaultTimeout bounds one probe when the caller hands no client: a probe runs
// once per heartbeat (5 s), so a slower answer is already a stale one.
const defaultTimeout = 5 * time.Second

var (
	// ErrUnknownKind is returned by New for a kind it does not know.
	ErrUnknownKind = errors.New("unknown engine kind")
	// ErrUnreachable means nothing answered at the engine's URL.
	ErrUnreachable = errors.New("engine not reachable")
	// ErrQueueUnknown means the models were read but the engine's queue
	// figures were not (metrics switched off, missing, or unreadable). Probe
	// then returns the models alongside the error, with the queue unset, so a
	// heartbeat can still carry them.
	ErrQueueUnknown = errors.New("engine queue unknown")
)

// Adapter reads one engine's state.
type Adapter interface {
	// Kind is one of the Kind constants.
	Kind() string
	// Probe reads the engine now. On an error wrapping ErrQueueUnknown the
	// returned Status still holds the models (with the queue unset); on any
	// other error it is empty.
	Probe(ctx context.Context) (Status, error)
}

// Options shape what an adapter reports.
type Options struct {
	// Models limits the report to these names; empty means every model the
	// engine reports. A listed model the engine does not have is left out,
	// since the gateway must not route it here.
	Models []string
	// Slots is the number of requests the node runs at once per model; 0 asks
	// the engine, and DefaultSlots is used when the engine does not say.
	Slots int
	// Getenv reads the engine's environment settings (OLLAMA_NUM_PARALLEL,
	// OLLAMA_CONTEXT_LENGTH); nil means os.Getenv.
	Getenv func(string) string
}

// Status is the engine as one probe saw it. Models are sorted by name.
type Status struct {
	Models []*switchyardv1.NodeModelStatus
}

// Model returns the named model, or nil when the engine did not report it. A
// name without a tag also finds its ":latest" form, as Ollama names them.
func (s Status) Model(name string) *switchyardv1.NodeModelStatus {
	for _, m := range s.Models {
		if m.GetName() == name {
			return m
		}
	}
	if !strings.Contains(name, ":") {
		for _, m := range s.Models {
			if m.GetName() == name+":latest" {
				return m
			}
		}
	}
	return nil
}

// Kinds lists the engine kinds New accepts.
func Kinds() []string {
	return []string{KindOllama, KindVLLM, KindSGLang, KindTGI, KindLlamaCpp, KindOpenAI}
}

// New returns the adapter for kind, reading the engine at baseURL (its root,
// such as http://127.0.0.1:11434; a trailing /v1 is dropped, since operators
// often copy the OpenAI base URL). A nil client gets a 5 s timeout and no
// proxy; an engine that wants an API key needs a client whose transport adds
// it.
func New(kind, baseURL string, client *http.Client, opts Options) (Adapter, error) {
	root, err := engineRoot(baseURL)
	if err != nil {
		return nil, err
	}
	if opts.Slots < 0 {
		return nil, fmt.Errorf("slots must not be negative, got %d", opts.Slots)
	}
	if client == nil {
		// The engine runs beside the agent: an HTTP_PROXY meant for the
		// outside world must not sit between them.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil
		client = &http.Client{Timeout: defaultTimeout, Transport: tr}
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	opts.Models = slices.Compact(slices.Sorted(slices.Values(opts.Models)))
	kind = strings.ToLower(strings.TrimSpace(kind))
	b := base{kind: kind, root: root, client: client, opts: opts}
	switch kind {
	case KindOllama:
		return &ollama{base: b, shown: map[string]showFacts{}}, nil
	case KindVLLM:
		return &vllm{base: b}, nil
	case KindSGLang:
		return &sglang{base: b}, nil
	case KindTGI:
		return &tgi{base: b}, nil
	case KindLlamaCpp:
		return &llamacpp{base: b}, nil
	case KindOpenAI:
		return &openai{base: b}, nil
	}
	return nil, fmt.Errorf("%w %q: want one of %s", ErrUnknownKind, kind, strings.Join(Kinds(), ", "))
}

func engineRoot(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", fmt.Errorf("engine URL %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("engine URL %q: want an http:// or https:// URL", raw)
	}
	if u.Host == "" {
		return "", fmt.Errorf("engine URL %q: no host", raw)
	}
	u.RawQuery, u.Fragment = "", ""
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1")
	u.RawPath = ""
	return strings.TrimSuffix(u.String(), "/"), nil
}

// Placement says where a loaded model's weights sit, judged from Ollama's
// size and size_vram; other engines report neither and read as unknown.
type Placement int

const (
	// PlacementUnknown: the model is not loaded, or its sizes are not reported.
	PlacementUnknown Placement = iota
	// PlacementGPU: all of the model is in GPU memory.
	PlacementGPU
	// PlacementPartlyCPU: part of the model runs on the CPU, which slows
	// every token.
	PlacementPartlyCPU
	// PlacementCPU: none of the model is in GPU memory.
	PlacementCPU
)

func (p Placement) String() string {
	switch p {
	case PlacementGPU:
		return "gpu"
	case PlacementPartlyCPU:
		return "partly-cpu"
	case PlacementCPU:
		return "cpu"
	}
	return "unknown"
}

// PlacementOf tells whether a loaded model runs on the GPU, on the CPU, or
// split between them.
func PlacementOf(m *switchyardv1.NodeModelStatus) Placement {
	size, vram := m.GetSizeBytes(), m.GetSizeVramBytes()
	switch {
	case !m.GetWarm() || size <= 0:
		return PlacementUnknown
	case vram <= 0:
		return PlacementCPU
	case vram < size:
		return PlacementPartlyCPU
	}
	return PlacementGPU
}

// CPUWarnings explains, one line per model, each loaded model that runs
// wholly or partly on the CPU; none when every loaded model is on the GPU.
func (s Status) CPUWarnings() []string {
	var out []string
	for _, m := range s.Models {
		switch PlacementOf(m) {
		case PlacementCPU:
			out = append(out, fmt.Sprintf("%s runs on the CPU only (none of its %s is in GPU memory): "+
				"Ollama found no usable GPU, so every token is slow", m.GetName(), gib(m.GetSizeBytes())))
		case PlacementPartlyCPU:
			pct := 100 * float64(m.GetSizeVramBytes()) / float64(m.GetSizeBytes())
			out = append(out, fmt.Sprintf("%s runs partly on the CPU (%.0f%% of its %s is in GPU memory): "+
				"the GPU has too little free memory for it; a smaller model or context window would fit",
				m.GetName(), pct, gib(m.GetSizeBytes())))
		}
	}
	return out
}

func gib(b int64) string {
	return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
}
