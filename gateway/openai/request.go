package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/switchyard-ai/switchyard/gateway/route"
)

// endpoint is one of the OpenAI API's POST routes.
type endpoint int

const (
	endpointChat endpoint = iota
	endpointCompletions
	endpointEmbeddings
)

func (e endpoint) path() string {
	switch e {
	case endpointCompletions:
		return "/completions"
	case endpointEmbeddings:
		return "/embeddings"
	}
	return "/chat/completions"
}

func (e endpoint) String() string { return strings.TrimPrefix(e.path(), "/") }

// request is a parsed client request. Fields keeps every top-level field as
// received, so that unknown ones pass through untouched.
type request struct {
	fields map[string]json.RawMessage

	model           string
	stream          bool
	includeUsage    bool // the client asked for the usage chunk
	maxTokens       int  // max_completion_tokens, else max_tokens; 0 = not given
	placement       string
	reasoningEffort string
	tools           bool
	images          bool
	inputTokens     int // estimated, for the context-window check and when usage is absent
}

// known are the fields the gateway reads; everything else passes through.
type known struct {
	Model           *string         `json:"model"`
	Stream          *bool           `json:"stream"`
	StreamOptions   json.RawMessage `json:"stream_options"`
	MaxTokens       *int            `json:"max_tokens"`
	MaxCompletion   *int            `json:"max_completion_tokens"`
	Placement       *string         `json:"placement"`
	ReasoningEffort *string         `json:"reasoning_effort"`
	Tools           json.RawMessage `json:"tools"`
	Messages        json.RawMessage `json:"messages"`
	Prompt          json.RawMessage `json:"prompt"`
	Input           json.RawMessage `json:"input"`
}

// fieldWants says what a known field must be, for type errors.
var fieldWants = map[string]string{
	"model": "a string", "placement": "a string", "reasoning_effort": "a string",
	"stream": "true or false", "max_tokens": "a whole number", "max_completion_tokens": "a whole number",
}

// parseRequest reads the body: once into the fields the gateway needs, once
// into raw top-level fields for the pass-through. A syntax error names its
// position: clients hand-writing JSON need to find it.
func parseRequest(ep endpoint, body []byte) (*request, *apiError) {
	r := &request{}
	if err := json.Unmarshal(body, &r.fields); err != nil {
		return nil, jsonError(body, err)
	}
	if r.fields == nil {
		return nil, badRequest("the request body must be a JSON object", "")
	}
	var k known
	if err := json.Unmarshal(body, &k); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && fieldWants[te.Field] != "" {
			return nil, badRequest(fmt.Sprintf("%s must be %s", te.Field, fieldWants[te.Field]), te.Field)
		}
		return nil, badRequest("the request body has a field of the wrong type", "")
	}
	if k.Model != nil {
		r.model = *k.Model
	}
	if r.model == "" {
		return nil, badRequest("model is required", "model")
	}
	if k.Placement != nil {
		r.placement = *k.Placement
	}
	if k.ReasoningEffort != nil {
		r.reasoningEffort = *k.ReasoningEffort
	}
	if ep == endpointEmbeddings {
		r.inputTokens = estimateAny(k.Input)
		return r, nil
	}
	if k.Stream != nil {
		r.stream = *k.Stream
	}
	if len(k.StreamOptions) > 0 && !isNull(k.StreamOptions) {
		var so struct {
			IncludeUsage bool `json:"include_usage"`
		}
		if err := json.Unmarshal(k.StreamOptions, &so); err != nil {
			return nil, badRequest("stream_options must be an object", "stream_options")
		}
		r.includeUsage = so.IncludeUsage
	}
	if k.MaxTokens != nil {
		r.maxTokens = *k.MaxTokens
	}
	if k.MaxCompletion != nil && *k.MaxCompletion > 0 {
		r.maxTokens = *k.MaxCompletion
	}
	if r.maxTokens < 0 || (k.MaxCompletion != nil && *k.MaxCompletion < 0) {
		return nil, badRequest("max_tokens must not be negative", "max_tokens")
	}
	if len(k.Tools) > 0 && !isNull(k.Tools) {
		r.tools = !bytes.Equal(bytes.TrimSpace(k.Tools), []byte("[]"))
	}
	if ep == endpointChat {
		if len(k.Messages) == 0 || isNull(k.Messages) {
			return nil, badRequest("messages is required", "messages")
		}
		var msgs []struct {
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(k.Messages, &msgs); err != nil {
			return nil, badRequest("messages must be an array of message objects", "messages")
		}
		for _, m := range msgs {
			tokens, images := estimateContent(m.Content)
			r.inputTokens += tokens + 4
			r.images = r.images || images
		}
	} else {
		r.inputTokens = estimateAny(k.Prompt)
	}
	return r, nil
}

// needs says what a model must be able to do for this request (auto chains).
func (r *request) needs(ep endpoint) route.Needs {
	n := route.Needs{Tools: r.tools, Vision: r.images}
	if ep == endpointEmbeddings {
		n.Kind = route.KindEmbeddings
	}
	return n
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

func jsonError(body []byte, err error) *apiError {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := position(body, se.Offset)
		return badRequest(fmt.Sprintf("invalid JSON at line %d, column %d (byte %d): %s", line, col, se.Offset, se.Error()), "")
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return badRequest("the request body must be a JSON object", "")
	}
	return badRequest("invalid JSON: "+err.Error(), "")
}

// position turns a byte offset into a 1-based line and column.
func position(body []byte, off int64) (line, col int) {
	if off > int64(len(body)) {
		off = int64(len(body))
	}
	line, col = 1, 1
	for _, c := range body[:off] {
		if c == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}

// estimateContent estimates a message content's tokens: a string, or an
// array of parts (text parts counted, image parts noted).
func estimateContent(raw json.RawMessage) (tokens int, images bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return 0, false
	}
	switch raw[0] {
	case '"':
		if bytes.IndexByte(raw, '\\') < 0 {
			// No escapes: the text is the bytes between the quotes.
			return route.EstimateTokens(string(raw[1 : len(raw)-1])), false
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return route.EstimateTokens(s), false
		}
	case '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(raw, &parts) == nil {
			for _, p := range parts {
				switch p.Type {
				case "image_url", "input_image", "image":
					images = true
					tokens += 85
				default:
					tokens += route.EstimateTokens(p.Text)
				}
			}
			return tokens, images
		}
	}
	return route.EstimateTokens(string(raw)), false
}

// estimateAny estimates a prompt or input: a string, or an array of strings
// (token arrays count their length).
func estimateAny(raw json.RawMessage) int {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || isNull(raw) {
		return 0
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return route.EstimateTokens(s)
		}
	}
	if raw[0] == '[' {
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) == nil {
			n := 0
			for _, it := range items {
				it = bytes.TrimSpace(it)
				if len(it) > 0 && (it[0] == '"' || it[0] == '[') {
					n += estimateAny(it)
				} else {
					n++ // a token id
				}
			}
			return n
		}
	}
	return route.EstimateTokens(string(raw))
}

// upstreamBody is the body sent to one candidate: model rewritten, our own
// fields removed, and the usage chunk asked for on streams so that tokens
// can be counted.
func (r *request) upstreamBody(upstreamModel string) ([]byte, error) {
	out := make(map[string]json.RawMessage, len(r.fields)+1)
	for k, v := range r.fields {
		out[k] = v
	}
	delete(out, "placement")
	m, err := json.Marshal(upstreamModel)
	if err != nil {
		return nil, err
	}
	out["model"] = m
	if r.stream && !r.includeUsage {
		opts := map[string]json.RawMessage{}
		if raw, ok := r.fields["stream_options"]; ok && !isNull(raw) {
			_ = json.Unmarshal(raw, &opts)
		}
		opts["include_usage"] = json.RawMessage("true")
		b, err := json.Marshal(opts)
		if err != nil {
			return nil, err
		}
		out["stream_options"] = b
	}
	return json.Marshal(out)
}
