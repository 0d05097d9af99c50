package engine

import (
	"context"
	"net/http"

	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

// llamacpp reads llama.cpp's llama-server: the model from /v1/models, its
// slots from /slots (or /props total_slots when /slots is switched off), the
// context window of one slot, and the queue from /metrics, which needs the
// server's --metrics.
type llamacpp struct {
	base
}

var _ Adapter = (*llamacpp)(nil)

type llamacppProps struct {
	TotalSlots                int `json:"total_slots"`
	DefaultGenerationSettings struct {
		NCtx int64 `json:"n_ctx"`
	} `json:"default_generation_settings"`
	NCtx int64 `json:"n_ctx"`
}

type llamacppSlot struct {
	NCtx int64 `json:"n_ctx"`
}

func (a *llamacpp) Probe(ctx context.Context) (Status, error) {
	entries, err := a.listModels(ctx)
	if err != nil {
		return Status{}, a.fail(err)
	}

	// /props and /slots only refine slots and context; a server that hides
	// them (/slots is off with --no-slots, or before it was on by default)
	// still has its model reported.
	var props llamacppProps
	_ = a.getJSON(ctx, "/props", &props)
	var slots []llamacppSlot
	_ = a.getJSON(ctx, "/slots", &slots)

	engineSlots := props.TotalSlots
	if len(slots) > 0 {
		engineSlots = len(slots)
	}
	// The context a request gets is one slot's share of --ctx-size, which is
	// what each slot and default_generation_settings report as n_ctx.
	var window int64
	switch {
	case len(slots) > 0 && slots[0].NCtx > 0:
		window = slots[0].NCtx
	case props.DefaultGenerationSettings.NCtx > 0:
		window = props.DefaultGenerationSettings.NCtx
	default:
		window = props.NCtx
	}

	models := make([]*switchyardv1.NodeModelStatus, 0, len(entries))
	for _, e := range entries {
		warm := e.Status == nil || e.Status.Value == "loaded"
		models = append(models, &switchyardv1.NodeModelStatus{
			Name:          e.ID,
			Warm:          warm,
			ContextWindow: clampInt32(window),
			Slots:         a.slots(engineSlots),
		})
	}
	sortModels(models)

	set, err := a.getMetrics(ctx)
	if err != nil {
		hint := ""
		// llama-server answers 501 without --metrics; 404 is an older build
		// or a proxy in front of it.
		if code := httpStatus(err); code == http.StatusNotImplemented || code == http.StatusNotFound {
			hint = "start llama-server with --metrics"
		}
		return Status{Models: models}, a.queueUnknown(err, hint)
	}
	q := queue{
		running: set.read([]string{"llamacpp:requests_processing"}, "", nil, sum),
		waiting: set.read([]string{"llamacpp:requests_deferred"}, "", nil, sum),
		// Only older builds publish the cache ratio.
		kvUsage: set.read([]string{"llamacpp:kv_cache_usage_ratio"}, "", nil, mean),
	}
	for _, m := range models {
		// The figures are the whole server's; in router mode a model that is
		// not loaded has no queue of its own.
		if m.GetWarm() {
			q.apply(m)
		}
	}
	return Status{Models: models}, nil
}
