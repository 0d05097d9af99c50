package engine

import (
	"context"

	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

// vllm reads vLLM's OpenAI server: models and max_model_len from /v1/models
// (every listed model is loaded, so warm), the queue and KV cache from
// /metrics. vLLM does not publish --max-num-seqs, so slots come from the
// options or the default; an operator running vLLM should pass --slots.
type vllm struct {
	base
}

var _ Adapter = (*vllm)(nil)

func (a *vllm) Probe(ctx context.Context) (Status, error) {
	entries, err := a.allModels(ctx)
	if err != nil {
		return Status{}, a.fail(err)
	}
	// A LoRA adapter's card has no max_model_len of its own; it runs within
	// its base model's, which may be listed even when not wanted.
	windows := map[string]int32{}
	for _, e := range entries {
		windows[e.ID] = e.contextWindow()
	}
	models := make([]*switchyardv1.NodeModelStatus, 0, len(entries))
	parents := map[string]string{}
	for _, e := range entries {
		if !a.wanted(e.ID) {
			continue
		}
		cw := windows[e.ID]
		if cw == 0 && e.Parent != "" {
			cw = windows[e.Parent]
		}
		models = append(models, &switchyardv1.NodeModelStatus{
			Name:          e.ID,
			Warm:          true,
			ContextWindow: cw,
			Slots:         a.slots(0),
		})
		parents[e.ID] = e.Parent
	}
	sortModels(models)

	set, err := a.getMetrics(ctx)
	if err != nil {
		return Status{Models: models}, a.queueUnknown(err, "")
	}
	// Series carry model_name and, on vLLM's V1 engine, engine (one per
	// data-parallel rank), so a model's queue is the sum over its engines.
	// Older releases name the cache figure gpu_cache_usage_perc.
	q := queue{
		running: set.read([]string{"vllm:num_requests_running"}, "model_name", nil, sum),
		waiting: set.read([]string{"vllm:num_requests_waiting"}, "model_name", nil, sum),
		kvUsage: set.read([]string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}, "model_name", nil, mean),
	}
	for _, m := range models {
		// A LoRA adapter's requests are counted under its base model.
		q.apply(m, parents[m.GetName()])
	}
	return Status{Models: models}, nil
}
