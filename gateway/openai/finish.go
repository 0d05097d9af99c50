package openai

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/switchyard-ai/switchyard/gateway/store"
)

// finish records a call once it is over: limits' token counts, the
// metering event, metrics and the one log line. It runs whatever happened,
// the client's disconnection included.
func (h *Handler) finish(ctx context.Context, c *call) {
	end := h.o.Now()
	total := end.Sub(c.start)
	if c.status == 0 {
		c.status = 200
	}
	cost := 0.0
	if c.target != "" {
		cost = (float64(c.inputTokens)*c.model.InputPricePerMTok + float64(c.outputTokens)*c.model.OutputPricePerMTok) / 1e6
	}
	// Metric labels carry registered model ids only: a client's made-up
	// names must not grow the metric set without end.
	model, target := c.model.ID, c.target
	if c.model.Vendor == "" {
		model = "none"
	}
	if c.model.ID == "" && c.req != nil {
		// Refused before a model was chosen: meter the name asked for.
		c.model.ID = c.req.model
		if len(c.model.ID) > 128 {
			c.model.ID = c.model.ID[:128]
		}
	}
	status := strconv.Itoa(c.status)
	if target == "" {
		target = "none"
	}
	m := h.o.Metrics
	m.Requests.WithLabelValues(model, target, status, c.code).Inc()
	m.RequestDuration.WithLabelValues(model, target, status).Observe(total.Seconds())
	if c.ttft > 0 {
		m.TTFT.WithLabelValues(model, target).Observe(c.ttft.Seconds())
	}
	overhead := total - c.upstreamWait
	if overhead < 0 {
		overhead = 0
	}
	m.Overhead.WithLabelValues(c.ep.String()).Observe(overhead.Seconds())

	tokens := int64(c.inputTokens + c.outputTokens)
	if c.authed {
		if c.inputTokens > 0 {
			m.Tokens.WithLabelValues(c.tenant.ID, model, "input").Add(float64(c.inputTokens))
		}
		if c.outputTokens > 0 {
			m.Tokens.WithLabelValues(c.tenant.ID, model, "output").Add(float64(c.outputTokens))
		}
		// Recorded for every tenant, limits or not: a budget set later in
		// the day counts what the day has already used. The answer has
		// already been flushed to the client, so this does not hold it.
		if h.o.Limits != nil && (tokens > 0 || cost > 0) {
			// Off the request: its connection is free for the client's next
			// request at once, and the request's own context may be gone
			// (client disconnected) while the counts must still land.
			tenant := c.tenant.ID
			go func() {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				defer cancel()
				h.o.Limits.Record(rctx, tenant, tokens, cost)
			}()
		}
		if h.o.Meter != nil {
			var tps float64
			if c.outputTokens > 0 && total > c.ttft {
				tps = float64(c.outputTokens) / (total - c.ttft).Seconds()
			}
			h.o.Meter.Emit(store.UsageEvent{
				Time: c.start.UTC(), RequestID: c.requestID, TenantID: c.tenant.ID, KeyID: c.key.ID,
				Model: c.model.ID, Target: c.target, InputTokens: int64(c.inputTokens), OutputTokens: int64(c.outputTokens),
				Estimated: c.estimated, CostUSD: cost, FallbackPath: c.fallbacks, TTFTMillis: ms(c.ttft), TokensPerSec: tps,
				Status: c.status, ErrorCode: c.code, Attributes: c.attrs, DurationMillis: ms(total),
			})
		}
	}
	level := slog.LevelInfo
	if c.status >= 500 && c.status != statusClientClosed {
		level = slog.LevelWarn
	}
	h.o.Logger.LogAttrs(ctx, level, "request",
		slog.String("request_id", c.requestID),
		slog.String("endpoint", c.ep.String()),
		slog.String("tenant", c.tenant.ID),
		slog.String("key_id", c.key.ID),
		slog.String("model", c.model.ID),
		slog.String("target", c.target),
		slog.Int("status", c.status),
		slog.String("error_code", c.code),
		slog.Float64("ttft_ms", ms(c.ttft)),
		slog.Float64("duration_ms", ms(total)),
		slog.Int("input_tokens", c.inputTokens),
		slog.Int("output_tokens", c.outputTokens),
		slog.Bool("estimated", c.estimated),
		slog.Any("fallbacks", c.fallbacks),
	)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
