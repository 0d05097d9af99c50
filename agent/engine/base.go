package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode"

	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

// Bodies are read whole; the limits keep a misbehaving engine from holding the
// agent's memory. A busy vLLM's /metrics with all its histograms is well under
// a megabyte, so 16 MiB leaves room for many models and data-parallel ranks.
const (
	maxJSONBody    = 8 << 20
	maxMetricsBody = 16 << 20
)

// base is what every adapter shares: where the engine is and how to ask it.
type base struct {
	kind   string
	root   string
	client *http.Client
	opts   Options
}

func (b *base) Kind() string { return b.kind }

// statusError is an engine answering with a status other than 200.
type statusError struct {
	method, url string
	code        int
	snippet     string
}

func (e *statusError) Error() string {
	s := fmt.Sprintf("%s %s: %d %s", e.method, e.url, e.code, http.StatusText(e.code))
	if e.snippet != "" {
		s += ": " + e.snippet
	}
	return s
}

// httpStatus returns the status code of an engine's non-200 answer, or 0.
func httpStatus(err error) int {
	var se *statusError
	if errors.As(err, &se) {
		return se.code
	}
	return 0
}

// do sends one request and returns the body of a 200 answer.
func (b *base) do(ctx context.Context, method, path string, body []byte, accept string, limit int64) ([]byte, error) {
	target := b.root + path
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, target, err)
	}
	req.Header.Set("Accept", accept)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s: %w", method, target, ctx.Err())
		}
		// url.Error repeats the method and URL; keep its cause only.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%w: %s %s: %w", ErrUnreachable, method, target, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, target, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &statusError{method: method, url: target, code: resp.StatusCode, snippet: snippet(data)}
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s %s: answer larger than %d MiB", method, target, limit>>20)
	}
	return data, nil
}

// getJSON decodes the engine's JSON answer at path into v.
func (b *base) getJSON(ctx context.Context, path string, v any) error {
	data, err := b.do(ctx, http.MethodGet, path, nil, "application/json", maxJSONBody)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("GET %s%s: not the JSON this engine sends: %w", b.root, path, err)
	}
	return nil
}

// postJSON sends in as JSON and decodes the answer into out.
func (b *base) postJSON(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	data, err := b.do(ctx, http.MethodPost, path, body, "application/json", maxJSONBody)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("POST %s%s: not the JSON this engine sends: %w", b.root, path, err)
	}
	return nil
}

// getMetrics reads the engine's Prometheus exposition at /metrics.
func (b *base) getMetrics(ctx context.Context) (metricSet, error) {
	// Ask for the classic text format: OpenMetrics, which Python's client
	// offers too, has types the text parser rejects.
	data, err := b.do(ctx, http.MethodGet, "/metrics", nil,
		"text/plain;version=0.0.4;q=1,*/*;q=0.1", maxMetricsBody)
	if err != nil {
		return nil, err
	}
	set, err := parseMetrics(data)
	if err != nil {
		return nil, fmt.Errorf("GET %s/metrics: %w", b.root, err)
	}
	return set, nil
}

// slots is the operator's figure, else the engine's, else DefaultSlots.
func (b *base) slots(fromEngine int) int32 {
	switch {
	case b.opts.Slots > 0:
		return clampInt32(b.opts.Slots)
	case fromEngine > 0:
		return clampInt32(fromEngine)
	}
	return DefaultSlots
}

// wanted reports whether a model the engine lists belongs in the report.
func (b *base) wanted(name string) bool {
	return len(b.opts.Models) == 0 || slices.Contains(b.opts.Models, name)
}

// fail prefixes an error with the engine kind, so a log line says which
// engine the agent could not read.
func (b *base) fail(err error) error {
	return fmt.Errorf("%s: %w", b.kind, err)
}

// queueUnknown wraps a metrics failure; hint, when set, tells the operator
// what to change.
func (b *base) queueUnknown(err error, hint string) error {
	if hint != "" {
		return fmt.Errorf("%s: %w: %w; %s", b.kind, ErrQueueUnknown, err, hint)
	}
	return fmt.Errorf("%s: %w: %w", b.kind, ErrQueueUnknown, err)
}

func sortModels(ms []*switchyardv1.NodeModelStatus) []*switchyardv1.NodeModelStatus {
	slices.SortFunc(ms, func(a, b *switchyardv1.NodeModelStatus) int {
		return strings.Compare(a.GetName(), b.GetName())
	})
	return ms
}

func clampInt32[T int | int64 | float64](v T) int32 {
	switch {
	case float64(v) > math.MaxInt32:
		return math.MaxInt32
	case float64(v) < math.MinInt32:
		return math.MinInt32
	}
	return int32(v)
}

// snippet keeps the start of an error answer, printable and on one line, for
// the error text.
func snippet(data []byte) string {
	s := strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return ' '
		}
		if !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, string(data))
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 200 {
		s = string(r[:200]) + "…"
	}
	return s
}
