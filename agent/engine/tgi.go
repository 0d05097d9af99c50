package engine

import (
	"context"

	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

// tgi reads Hugging Face Text Generation Inference, which serves exactly one
// model: its id and limits from /info, the batch and queue from /metrics.
type tgi struct {
	base
}

var _ Adapter = (*tgi)(nil)

type tgiInfo struct {
	ModelID               string `json:"model_id"`
	MaxConcurrentRequests int    `json:"max_concurrent_requests"`
	MaxTotalTokens        int64  `json:"max_total_tokens"`
	MaxInputTokens        int64  `json:"max_input_tokens"`
	// MaxInputLength is max_input_tokens before TGI 2.0 renamed it.
	MaxInputLength int64 `json:"max_input_length"`
}

// contextWindow is max_total_tokens, the prompt and the answer together; when
// an engine gives only its input limit, that smaller figure is the safe one.
func (i tgiInfo) contextWindow() int32 {
	for _, v := range []int64{i.MaxTotalTokens, i.MaxInputTokens, i.MaxInputLength} {
		if v > 0 {
			return clampInt32(v)
		}
	}
	return 0
}

func (a *tgi) Probe(ctx context.Context) (Status, error) {
	var info tgiInfo
	if err := a.getJSON(ctx, "/info", &info); err != nil {
		return Status{}, a.fail(err)
	}
	var models []*switchyardv1.NodeModelStatus
	if info.ModelID != "" && a.wanted(info.ModelID) {
		models = append(models, &switchyardv1.NodeModelStatus{
			Name:          info.ModelID,
			Warm:          true,
			ContextWindow: info.contextWindow(),
			Slots:         a.slots(info.MaxConcurrentRequests),
		})
	}

	set, err := a.getMetrics(ctx)
	if err != nil {
		return Status{Models: models}, a.queueUnknown(err, "")
	}
	// TGI's series carry no model label: the one model owns them all.
	q := queue{
		running: set.read([]string{"tgi_batch_current_size"}, "", nil, sum),
		waiting: set.read([]string{"tgi_queue_size"}, "", nil, sum),
	}
	for _, m := range models {
		q.apply(m)
	}
	return Status{Models: models}, nil
}
