package engine

import (
	"context"
	"net/http"

	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

// sglang reads SGLang's server: models and max_model_len from /v1/models
// (older releases without it: /get_model_info), max_running_requests as the
// slots from its server info, and the queue from /metrics, which SGLang
// serves only when started with --enable-metrics.
type sglang struct {
	base
}

var _ Adapter = (*sglang)(nil)

// sglangServerInfo is the part of /server_info (formerly /get_server_info)
// the adapter uses: the server arguments and the limits it settled on.
type sglangServerInfo struct {
	MaxRunningRequests int   `json:"max_running_requests"`
	ContextLength      int64 `json:"context_length"`
	InternalStates     []struct {
		MaxRunningRequests int `json:"max_running_requests"`
	} `json:"internal_states"`
}

func (i sglangServerInfo) slots() int {
	if i.MaxRunningRequests > 0 {
		return i.MaxRunningRequests
	}
	for _, s := range i.InternalStates {
		if s.MaxRunningRequests > 0 {
			return s.MaxRunningRequests
		}
	}
	return 0
}

func (a *sglang) Probe(ctx context.Context) (Status, error) {
	entries, err := a.listModels(ctx)
	if httpStatus(err) == http.StatusNotFound {
		entries, err = a.modelInfo(ctx)
	}
	if err != nil {
		return Status{}, a.fail(err)
	}

	// Server info only adds to what /v1/models says; an engine that does not
	// answer it still has its models reported.
	var info sglangServerInfo
	if err := a.getJSON(ctx, "/server_info", &info); httpStatus(err) == http.StatusNotFound {
		_ = a.getJSON(ctx, "/get_server_info", &info)
	}

	models := make([]*switchyardv1.NodeModelStatus, 0, len(entries))
	for _, e := range entries {
		cw := e.contextWindow()
		if cw == 0 && info.ContextLength > 0 {
			cw = clampInt32(info.ContextLength)
		}
		models = append(models, &switchyardv1.NodeModelStatus{
			Name:          e.ID,
			Warm:          true,
			ContextWindow: cw,
			Slots:         a.slots(info.slots()),
		})
	}
	sortModels(models)

	set, err := a.getMetrics(ctx)
	if err != nil {
		hint := ""
		if code := httpStatus(err); code == http.StatusNotFound {
			hint = "start SGLang with --enable-metrics"
		}
		return Status{Models: models}, a.queueUnknown(err, hint)
	}
	// Series carry model_name plus the scheduler's ranks. Tensor- and
	// pipeline-parallel ranks run the same batch, so their copies count once;
	// data-parallel ranks (dp_rank) hold separate queues and add up.
	replicas := []string{"tp_rank", "pp_rank", "moe_ep_rank"}
	q := queue{
		running: set.read([]string{"sglang:num_running_reqs"}, "model_name", replicas, sum),
		waiting: set.read([]string{"sglang:num_queue_reqs"}, "model_name", replicas, sum),
		kvUsage: set.read([]string{"sglang:token_usage"}, "model_name", replicas, mean),
	}
	for _, m := range models {
		q.apply(m)
	}
	return Status{Models: models}, nil
}

// modelInfo reads /get_model_info, the only model listing of SGLang releases
// that predate its /v1/models.
func (a *sglang) modelInfo(ctx context.Context) ([]modelEntry, error) {
	var info struct {
		ModelPath string `json:"model_path"`
	}
	if err := a.getJSON(ctx, "/get_model_info", &info); err != nil {
		return nil, err
	}
	if info.ModelPath == "" || !a.wanted(info.ModelPath) {
		return nil, nil
	}
	return []modelEntry{{ID: info.ModelPath}}, nil
}
