package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/switchyard-ai/switchyard/gateway/upstream"
)

var (
	usageMarker = []byte(`"usage"`)
	doneLine    = []byte("data: [DONE]\n\n")
)

// stream passes an upstream's Server-Sent Events to the client as they
// arrive, one flush per event. The usage chunk the gateway asked for is
// read for metering and shown to the client only if the client asked for
// it. After the first byte nothing can be retried: a failure ends the
// stream with an OpenAI-style error event.
func (h *Handler) stream(ctx context.Context, w http.ResponseWriter, c *call, resp *upstream.Response, lease NodeLease) {
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
	hd.Del("Content-Length")
	w.WriteHeader(resp.Status)
	c.status = resp.Status
	rc := http.NewResponseController(w)
	_ = rc.Flush()

	events := resp.Events()
	var (
		chunks    int
		sawDone   bool
		gotUsage  bool
		firstByte = c.ttft
		genStart  = h.o.Now()
		streamErr error
	)
	for {
		t0 := h.o.Now()
		ev, err := events.Next()
		t1 := h.o.Now()
		c.upstreamWait += t1.Sub(t0)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				streamErr = err
			}
			break
		}
		if upstream.IsDone(ev) {
			sawDone = true
			if _, werr := w.Write(doneLine); werr != nil {
				streamErr = werr
			}
			_ = rc.Flush()
			break
		}
		data := ev.Data()
		forward := true
		if len(data) > 0 && bytes.Contains(data, usageMarker) {
			if u, onlyUsage, ok := usageChunk(data); ok {
				gotUsage = true
				c.inputTokens, c.outputTokens = u.PromptTokens, u.CompletionTokens
				forward = !onlyUsage || c.req.includeUsage
			}
		}
		if len(data) > 0 && firstByte == 0 {
			firstByte = t1.Sub(c.start)
			genStart = t1
		}
		if len(data) > 0 && forward {
			chunks++
		}
		if !forward {
			continue
		}
		if werr := upstream.WriteEvent(w, ev); werr != nil {
			streamErr = werr // the client went away
			break
		}
		_ = rc.Flush()
	}
	c.ttft = firstByte
	generation := h.o.Now().Sub(genStart)
	if !gotUsage {
		c.inputTokens, c.outputTokens, c.estimated = c.req.inputTokens, chunks, true
	}
	clientGone := ctx.Err() != nil
	switch {
	case clientGone:
		c.status = statusClientClosed
	case streamErr != nil || !sawDone:
		c.status, c.code = http.StatusBadGateway, CodeUpstreamError
		msg := "the upstream stream ended before it was complete"
		var ue *upstream.Error
		switch {
		case errors.As(streamErr, &ue) && ue.Kind == upstream.Timeout:
			msg = "the upstream stream went quiet for too long"
			c.code = CodeUpstreamTimeout
		case errors.Is(streamErr, upstream.ErrLineTooLong), errors.Is(streamErr, upstream.ErrEventTooLarge):
			msg = "the upstream sent an event larger than the gateway accepts"
		}
		writeStreamError(w, c.code, msg)
		_ = rc.Flush()
	}
	if lease != nil {
		lease.Done(NodeResult{
			Failed: streamErr != nil && !clientGone, Status: c.status,
			InputTokens: c.inputTokens, OutputTokens: c.outputTokens, TTFT: firstByte, Generation: generation,
		})
	}
}

// usageChunk reads a chunk that carries usage. onlyUsage is set for the
// final chunk that include_usage produces (no choices), which the client
// sees only if it asked.
func usageChunk(data []byte) (u usage, onlyUsage bool, ok bool) {
	var v struct {
		Usage   *usage            `json:"usage"`
		Choices []json.RawMessage `json:"choices"`
	}
	if json.Unmarshal(data, &v) != nil || v.Usage == nil {
		return usage{}, false, false
	}
	return *v.Usage, len(v.Choices) == 0, true
}

// writeStreamError ends a stream the OpenAI way: an event whose data is an
// error object. No [DONE] follows, so clients see the stream as failed.
func writeStreamError(w io.Writer, code, msg string) {
	b, _ := json.Marshal(errorBody{Error: errorDetail{Message: msg, Type: "server_error", Code: code}})
	_, _ = w.Write([]byte("data: "))
	_, _ = w.Write(b)
	_, _ = w.Write([]byte("\n\n"))
}
