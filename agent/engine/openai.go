package engine

import (
	"context"

	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

// modelList is the OpenAI /v1/models answer with the extra fields that
// vLLM, SGLang and llama.cpp add to each entry.
type modelList struct {
	Data []modelEntry `json:"data"`
}

type modelEntry struct {
	ID string `json:"id"`
	// Parent is set on a vLLM LoRA adapter: the base model it runs on.
	Parent string `json:"parent"`
	// MaxModelLen is vLLM's and SGLang's context window.
	MaxModelLen int64 `json:"max_model_len"`
	// ContextLength and ContextWindow are how other OpenAI-compatible
	// servers name the same figure, when they give it at all.
	ContextLength int64 `json:"context_length"`
	ContextWindow int64 `json:"context_window"`
	// Status is set by llama-server's router mode, which lists models it can
	// load as well as the loaded ones.
	Status *struct {
		Value string `json:"value"`
	} `json:"status"`
}

func (e modelEntry) contextWindow() int32 {
	for _, v := range []int64{e.MaxModelLen, e.ContextLength, e.ContextWindow} {
		if v > 0 {
			return clampInt32(v)
		}
	}
	return 0
}

// listModels reads /v1/models, keeping the entries the options want.
func (b *base) listModels(ctx context.Context) ([]modelEntry, error) {
	all, err := b.allModels(ctx)
	if err != nil {
		return nil, err
	}
	var out []modelEntry
	for _, e := range all {
		if b.wanted(e.ID) {
			out = append(out, e)
		}
	}
	return out, nil
}

// allModels reads every entry of /v1/models.
func (b *base) allModels(ctx context.Context) ([]modelEntry, error) {
	var list modelList
	if err := b.getJSON(ctx, "/v1/models", &list); err != nil {
		return nil, err
	}
	out := make([]modelEntry, 0, len(list.Data))
	for _, e := range list.Data {
		if e.ID != "" {
			out = append(out, e)
		}
	}
	return out, nil
}

// openai is a plain OpenAI-compatible server: what /v1/models lists is what
// it serves (so warm), and it reports no queue, so the queue stays unknown.
// Its context window is 0, meaning unknown, unless the entry carries
// max_model_len, context_length or context_window.
type openai struct {
	base
}

var _ Adapter = (*openai)(nil)

func (a *openai) Probe(ctx context.Context) (Status, error) {
	entries, err := a.listModels(ctx)
	if err != nil {
		return Status{}, a.fail(err)
	}
	models := make([]*switchyardv1.NodeModelStatus, 0, len(entries))
	for _, e := range entries {
		models = append(models, &switchyardv1.NodeModelStatus{
			Name:          e.ID,
			Warm:          true,
			ContextWindow: e.contextWindow(),
			Slots:         a.slots(0),
		})
	}
	return Status{Models: sortModels(models)}, nil
}
