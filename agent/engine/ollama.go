package engine

import (
	"context"
	"strconv"
	"strings"
	"sync"

	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

// ollamaDefaultContext is the context Ollama gives a model when nothing sets
// num_ctx. Recent releases may pick more on a GPU with much memory, but 4096
// is what every release gives at least, and an understated window only keeps
// long prompts away, where an overstated one would have Ollama silently cut
// them.
const ollamaDefaultContext = 4096

// ollama reads Ollama's native API: /api/tags lists the installed models,
// /api/ps the loaded (warm) ones with their memory and context, and
// /api/show a model's Modelfile num_ctx and trained context length. Ollama
// publishes no queue, so engine_running and engine_waiting stay unset.
//
// The context window is the one Ollama runs or would run the model with: the
// loaded model's context_length from /api/ps; otherwise what Ollama would
// load it with — the Modelfile's num_ctx, else OLLAMA_CONTEXT_LENGTH, else
// 4096 — capped at the model's trained <arch>.context_length, as Ollama caps
// it. The trained length alone is deliberately not used for a cold model: it
// is often 128k or more, while Ollama would load that model with far less and
// truncate longer prompts without an error.
type ollama struct {
	base
	mu sync.Mutex
	// shown caches /api/show facts by name and digest: they change only when
	// a model is pulled or created again, which changes its digest.
	shown map[string]showFacts
}

var _ Adapter = (*ollama)(nil)

type showFacts struct {
	numCtx   int64 // PARAMETER num_ctx in the Modelfile
	trainCtx int64 // <arch>.context_length in model_info
}

type ollamaModel struct {
	Name          string `json:"name"`
	Model         string `json:"model"`
	Size          int64  `json:"size"`
	Digest        string `json:"digest"`
	SizeVRAM      int64  `json:"size_vram"`
	ContextLength int64  `json:"context_length"`
	// RemoteHost marks a cloud model that Ollama forwards elsewhere; it uses
	// none of this node's GPU.
	RemoteHost string `json:"remote_host"`
}

func (m ollamaModel) name() string {
	if m.Name != "" {
		return m.Name
	}
	return m.Model
}

type ollamaList struct {
	Models []ollamaModel `json:"models"`
}

func (a *ollama) Probe(ctx context.Context) (Status, error) {
	var tags, ps ollamaList
	if err := a.getJSON(ctx, "/api/tags", &tags); err != nil {
		return Status{}, a.fail(err)
	}
	if err := a.getJSON(ctx, "/api/ps", &ps); err != nil {
		return Status{}, a.fail(err)
	}
	installed := map[string]ollamaModel{}
	var order []string
	for _, m := range tags.Models {
		if n := m.name(); n != "" {
			installed[n] = m
			order = append(order, n)
		}
	}
	loaded := map[string]ollamaModel{}
	for _, m := range ps.Models {
		if n := m.name(); n != "" {
			loaded[n] = m
			if _, ok := installed[n]; !ok {
				installed[n] = m
				order = append(order, n)
			}
		}
	}

	// Report the names the operator configured (they are what the gateway
	// routes by), each matched to Ollama's name with or without ":latest".
	type pick struct{ report, ollama string }
	var picks []pick
	if len(a.opts.Models) == 0 {
		for _, n := range order {
			if installed[n].RemoteHost == "" {
				picks = append(picks, pick{n, n})
			}
		}
	} else {
		for _, want := range a.opts.Models {
			if n, ok := matchOllama(want, installed); ok {
				picks = append(picks, pick{want, n})
			}
		}
	}

	numParallel := positiveInt(a.opts.Getenv("OLLAMA_NUM_PARALLEL"))
	envCtx := int64(positiveInt(a.opts.Getenv("OLLAMA_CONTEXT_LENGTH")))
	seen := map[string]bool{}
	models := make([]*switchyardv1.NodeModelStatus, 0, len(picks))
	for _, p := range picks {
		m := &switchyardv1.NodeModelStatus{Name: p.report, Slots: a.slots(numParallel)}
		run, warm := loaded[p.ollama]
		if warm {
			m.Warm = true
			m.SizeBytes = run.Size
			m.SizeVramBytes = run.SizeVRAM
		}
		if warm && run.ContextLength > 0 {
			m.ContextWindow = clampInt32(run.ContextLength)
		} else {
			digest := installed[p.ollama].Digest
			seen[showKey(p.ollama, digest)] = true
			m.ContextWindow = clampInt32(coldContext(a.show(ctx, p.ollama, digest), envCtx))
		}
		models = append(models, m)
	}
	a.forget(seen)
	return Status{Models: sortModels(models)}, nil
}

func matchOllama(want string, installed map[string]ollamaModel) (string, bool) {
	if _, ok := installed[want]; ok {
		return want, true
	}
	if !strings.Contains(want, ":") {
		if _, ok := installed[want+":latest"]; ok {
			return want + ":latest", true
		}
	}
	return "", false
}

// coldContext is the context Ollama would load a model with (see ollama).
func coldContext(f showFacts, envCtx int64) int64 {
	n := int64(ollamaDefaultContext)
	switch {
	case f.numCtx > 0:
		n = f.numCtx
	case envCtx > 0:
		n = envCtx
	}
	if f.trainCtx > 0 && n > f.trainCtx {
		n = f.trainCtx
	}
	return n
}

func showKey(name, digest string) string { return name + "\x00" + digest }

// show returns a model's /api/show facts, from the cache when its digest is
// unchanged. A failed call yields no facts and is tried again next probe:
// the context then falls back to the environment and the default.
func (a *ollama) show(ctx context.Context, name, digest string) showFacts {
	key := showKey(name, digest)
	a.mu.Lock()
	f, ok := a.shown[key]
	a.mu.Unlock()
	if ok {
		return f
	}
	var resp struct {
		Parameters string         `json:"parameters"`
		ModelInfo  map[string]any `json:"model_info"`
	}
	if err := a.postJSON(ctx, "/api/show", map[string]string{"model": name}, &resp); err != nil {
		return showFacts{}
	}
	f = showFacts{numCtx: modelfileNumCtx(resp.Parameters)}
	if arch, _ := resp.ModelInfo["general.architecture"].(string); arch != "" {
		if v, ok := resp.ModelInfo[arch+".context_length"].(float64); ok && v > 0 {
			f.trainCtx = int64(v)
		}
	}
	a.mu.Lock()
	a.shown[key] = f
	a.mu.Unlock()
	return f
}

// forget drops cached facts of models no longer installed.
func (a *ollama) forget(seen map[string]bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k := range a.shown {
		if !seen[k] {
			delete(a.shown, k)
		}
	}
}

// modelfileNumCtx finds "num_ctx N" in /api/show's parameters, one
// "name value" pair per line.
func modelfileNumCtx(params string) int64 {
	for _, line := range strings.Split(params, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "num_ctx" {
			return int64(positiveInt(f[1]))
		}
	}
	return 0
}

// positiveInt parses a setting, treating anything but a positive integer as
// unset, as Ollama itself falls back to its default on a bad value.
func positiveInt(s string) int {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n <= 0 {
		return 0
	}
	return n
}
