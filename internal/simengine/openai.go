package simengine

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxBodyBytes bounds a request body; real engines accept large prompts, and
// anything above this is a broken client, not a test of prompt size.
const maxBodyBytes = 32 << 20

// OpenAI error types and codes the simulator answers with.
const (
	errTypeInvalid   = "invalid_request_error"
	errTypeNotFound  = "not_found_error"
	errTypeRateLimit = "rate_limit_error"
	errTypeServer    = "server_error"
)

type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	writeJSON(w, status, map[string]apiError{"error": {Message: msg, Type: typ, Code: code}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// readInference reads an inference request's body and records it, with its
// headers, as the last request; it also numbers the request for its response
// id. It answers 413 itself when the body is too large.
func (e *Engine) readInference(w http.ResponseWriter, r *http.Request) ([]byte, uint64, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	e.mu.Lock()
	e.seq++
	seq := e.seq
	e.lastPath = r.URL.Path
	e.lastHeaders = r.Header.Clone()
	e.lastBody = body
	e.mu.Unlock()
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, errTypeInvalid, "invalid_request", "request body too large")
		}
		return nil, 0, false
	}
	return body, seq, true
}

// resolveModel maps the request's model name to a served model, answering 400
// or 404 itself when there is none. Unlike llama.cpp and TGI, which answer any
// name with their one model, every flavour refuses an unknown name, so that a
// request routed to the wrong engine fails loudly in tests.
func (e *Engine) resolveModel(w http.ResponseWriter, name string) (string, bool) {
	if name == "" {
		writeError(w, http.StatusBadRequest, errTypeInvalid, "invalid_request", "you must provide a model parameter")
		return "", false
	}
	m, ok := e.names[name]
	if !ok {
		writeError(w, http.StatusNotFound, errTypeNotFound, "model_not_found",
			fmt.Sprintf("the model %q does not exist on this engine", name))
		return "", false
	}
	return m, true
}

// admit applies the 429 window and the failure rate, answering the request
// itself when it is refused. It runs before queueing: a real engine rejects
// an overload or fails a request without first holding it in its queue.
func (e *Engine) admit(w http.ResponseWriter, model string) bool {
	e.mu.Lock()
	now := time.Now()
	if now.Before(e.k.rejectUntil) {
		retry := e.k.retryAfter
		if retry <= 0 {
			retry = e.k.rejectUntil.Sub(now)
		}
		e.rejected++
		e.byModel[model].rejected++
		e.mu.Unlock()
		secs := max(int64((retry+time.Second-1)/time.Second), 1)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		writeError(w, http.StatusTooManyRequests, errTypeRateLimit, "rate_limit_exceeded",
			"the engine is overloaded; retry later")
		return false
	}
	if e.k.failRate > 0 && e.rng.Float64() < e.k.failRate {
		e.failed++
		e.byModel[model].failed++
		e.mu.Unlock()
		writeError(w, http.StatusInternalServerError, errTypeServer, "internal_error", "simulated engine failure")
		return false
	}
	e.mu.Unlock()
	return true
}

// responseID makes an id that is unique within the engine and the same for
// the same seed and arrival order.
func (e *Engine) responseID(prefix string, seq uint64) string {
	g := splitmix64(e.seed ^ seq*0x2545f4914f6cdd1d)
	return fmt.Sprintf("%s-%016x", prefix, g.next())
}

type generationKind int

const (
	kindChat generationKind = iota
	kindText
)

type generationRequest struct {
	Model         string          `json:"model"`
	Messages      []chatMessage   `json:"messages"`
	Prompt        json.RawMessage `json:"prompt"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           *int `json:"max_tokens"`
	MaxCompletionTokens *int `json:"max_completion_tokens"`
	Tools               []struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
}

// generation is one planned answer: what will be produced, before timing.
type generation struct {
	kind         generationKind
	id           string
	created      int64
	model        string // as the client named it, echoed back
	served       string // the served model it resolved to
	promptTokens int
	words        []string  // the text, one token per word; nil for a tool call
	tool         *toolCall // the tool call, if the answer is one
	finish       string
	includeUsage bool
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// toolCallTokens is what a tool call costs: it streams as two chunks, the
// call's name and id, then its arguments.
const toolCallTokens = 2

func (g *generation) steps() int {
	if g.tool != nil {
		return toolCallTokens
	}
	return len(g.words)
}

// piece is the text of token i as it appears in the output.
func (g *generation) piece(i int) string {
	if i == 0 && g.kind == kindChat {
		return g.words[0]
	}
	// Text completions continue the prompt, so every word starts with a space.
	return " " + g.words[i]
}

func (g *generation) text() string {
	var b strings.Builder
	for i := range g.words {
		b.WriteString(g.piece(i))
	}
	return b.String()
}

func (g *generation) usage() usage {
	n := g.steps()
	return usage{PromptTokens: g.promptTokens, CompletionTokens: n, TotalTokens: g.promptTokens + n}
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// chosenTool returns the tool the answer calls, or "" for a text answer: the
// function tool_choice names, else the first tool, unless tool_choice is
// "none".
func chosenTool(req *generationRequest) (string, error) {
	if len(req.Tools) == 0 {
		return "", nil
	}
	choice := strings.TrimSpace(string(req.ToolChoice))
	if choice != "" && choice != "null" {
		var s string
		if err := json.Unmarshal(req.ToolChoice, &s); err == nil {
			if s == "none" {
				return "", nil
			}
		} else {
			var named struct {
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if err := json.Unmarshal(req.ToolChoice, &named); err != nil {
				return "", errors.New(`tool_choice must be "none", "auto", "required" or a named function`)
			}
			if named.Function.Name != "" {
				return named.Function.Name, nil
			}
		}
	}
	if name := req.Tools[0].Function.Name; name != "" {
		return name, nil
	}
	return "tool", nil
}

// outputLength decides how many tokens to produce and why generation stops:
// the requested limit ("length"), else DefaultMaxTokens as the natural end of
// the answer ("stop") unless the context window cuts it short ("length"). On
// a refusal it returns the OpenAI error code with the error.
func (e *Engine) outputLength(req *generationRequest, promptTokens int) (int, string, string, error) {
	requested := req.MaxCompletionTokens
	if requested == nil {
		requested = req.MaxTokens
	}
	if requested != nil && *requested < 1 {
		return 0, "", "invalid_request", fmt.Errorf("max_tokens must be at least 1, got %d", *requested)
	}
	room := e.contextWindow - promptTokens
	if room <= 0 {
		return 0, "", "context_length_exceeded", fmt.Errorf(
			"this model's maximum context length is %d tokens, but the prompt has %d tokens", e.contextWindow, promptTokens)
	}
	if requested == nil {
		if e.defaultMaxTokens > room {
			return room, "length", "", nil
		}
		return e.defaultMaxTokens, "stop", "", nil
	}
	if *requested > room {
		return 0, "", "context_length_exceeded", fmt.Errorf(
			"this model's maximum context length is %d tokens; however, you requested %d tokens "+
				"(%d in the prompt, %d for the completion)", e.contextWindow, promptTokens+*requested, promptTokens, *requested)
	}
	return *requested, "length", "", nil
}

func (e *Engine) handleGeneration(kind generationKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, seq, ok := e.readInference(w, r)
		if !ok {
			return
		}
		var req generationRequest
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, errTypeInvalid, "invalid_request", "invalid JSON body: "+err.Error())
			return
		}
		model, ok := e.resolveModel(w, req.Model)
		if !ok {
			return
		}
		g := &generation{kind: kind, created: time.Now().Unix(), model: req.Model, served: model}
		var prompt string
		var err error
		switch kind {
		case kindChat:
			g.id = e.responseID("chatcmpl", seq)
			if len(req.Messages) == 0 {
				err = errors.New("messages must be a non-empty array")
				break
			}
			prompt, g.promptTokens, err = chatPrompt(req.Messages)
		case kindText:
			g.id = e.responseID("cmpl", seq)
			var texts []string
			var counts []int
			texts, counts, err = inputs(req.Prompt)
			if err != nil {
				err = fmt.Errorf("prompt %w", err)
				break
			}
			prompt = strings.Join(texts, "\n")
			for _, c := range counts {
				g.promptTokens += c
			}
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, errTypeInvalid, "invalid_request", err.Error())
			return
		}
		n, finish, code, err := e.outputLength(&req, g.promptTokens)
		if err != nil {
			writeError(w, http.StatusBadRequest, errTypeInvalid, code, err.Error())
			return
		}
		g.finish = finish
		if kind == kindChat {
			name, err := chosenTool(&req)
			if err != nil {
				writeError(w, http.StatusBadRequest, errTypeInvalid, "invalid_request", err.Error())
				return
			}
			if name != "" {
				g.tool = &toolCall{ID: fmt.Sprintf("call_%016x", hashOf("tool", model, prompt)), Type: "function"}
				g.tool.Function.Name = name
				g.tool.Function.Arguments = "{}"
				g.finish = "tool_calls"
			}
		}
		if g.tool == nil {
			g.words = generateWords(e.vocab, model, prompt, n)
		}
		g.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage

		if !e.admit(w, model) {
			return
		}
		if err := e.acquire(r.Context(), model); err != nil {
			e.logger.Debug("client left while waiting", "model", model, "err", err)
			return
		}
		defer e.release(model)
		e.markLoaded(model)
		if req.Stream {
			e.stream(w, r, g)
		} else {
			e.respond(w, r, g)
		}
	}
}

// generate paces the answer's tokens, calling emit for each; before token i
// (and before the end, i == steps) it applies the stall and cut knobs when
// streaming. It returns false when the client left.
func (e *Engine) generate(w http.ResponseWriter, r *http.Request, g *generation, streaming bool, emit func(i int) bool) bool {
	ctx := r.Context()
	admitted := time.Now()
	at, err := e.waitUntil(ctx, func(k knobs) time.Time { return admitted.Add(k.firstTokenDelay(g.promptTokens)) })
	if err != nil {
		return false
	}
	last := onSchedule(at)
	steps := g.steps()
	for i := 0; i <= steps; i++ {
		if i > 0 && i < steps {
			prev := last
			if at, err = e.waitUntil(ctx, func(k knobs) time.Time { return prev.Add(k.tokenInterval()) }); err != nil {
				return false
			}
			last = onSchedule(at)
		}
		if streaming {
			stalled, err := e.checkpoint(w, r, i)
			if err != nil {
				return false
			}
			if stalled {
				// Carry on at the normal pace, not in a burst that makes up
				// for the pause.
				last = time.Now()
			}
		}
		if i < steps && !emit(i) {
			return false
		}
	}
	return true
}

// scheduleSlack is how far behind schedule token pacing may fall and still
// catch up. Catching up absorbs timer lateness, so that a high TPS is met on a
// busy machine; the bound keeps a knob change (a held request released by a
// higher TPS) from producing a burst of every token it "owed".
const scheduleSlack = 50 * time.Millisecond

func onSchedule(at time.Time) time.Time {
	if floor := time.Now().Add(-scheduleSlack); at.Before(floor) {
		return floor
	}
	return at
}

// checkpoint applies StallAfter and CutAfter once sent token chunks are out.
func (e *Engine) checkpoint(w http.ResponseWriter, r *http.Request, sent int) (bool, error) {
	k, _ := e.snapshot()
	stalled := false
	if k.stallFor > 0 && k.stallAfter == sent {
		stalled = true
		from := time.Now()
		if _, err := e.waitUntil(r.Context(), func(k knobs) time.Time {
			if k.stallFor <= 0 || k.stallAfter != sent {
				return from
			}
			return from.Add(k.stallFor)
		}); err != nil {
			return stalled, err
		}
	}
	k, _ = e.snapshot()
	if k.cutAfter >= 0 && k.cutAfter == sent {
		e.mu.Lock()
		e.cut++
		e.mu.Unlock()
		_ = http.NewResponseController(w).Flush()
		// The documented way to make net/http drop the connection without
		// finishing the response: the client sees the body break off, as when
		// an engine crashes mid-stream.
		panic(http.ErrAbortHandler)
	}
	return stalled, nil
}

// finish counts a request answered in full.
func (e *Engine) finish(model string, promptTokens, completionTokens int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.served++
	mc := e.byModel[model]
	mc.served++
	mc.promptTokens += int64(promptTokens)
	mc.completionTokens += int64(completionTokens)
}

type chatChoice struct {
	Index        int            `json:"index"`
	Message      chatMessageOut `json:"message"`
	Logprobs     any            `json:"logprobs"`
	FinishReason string         `json:"finish_reason"`
}

type chatMessageOut struct {
	Role      string     `json:"role"`
	Content   *string    `json:"content"`
	ToolCalls []toolCall `json:"tool_calls,omitempty"`
}

type textChoice struct {
	Index        int    `json:"index"`
	Text         string `json:"text"`
	Logprobs     any    `json:"logprobs"`
	FinishReason string `json:"finish_reason"`
}

type completionResponse struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices any    `json:"choices"`
	Usage   usage  `json:"usage"`
}

// respond answers without streaming, after the whole generation and Latency.
func (e *Engine) respond(w http.ResponseWriter, r *http.Request, g *generation) {
	if !e.generate(w, r, g, false, func(int) bool { return true }) {
		return
	}
	done := time.Now()
	if _, err := e.waitUntil(r.Context(), func(k knobs) time.Time { return done.Add(k.latency) }); err != nil {
		return
	}
	resp := completionResponse{ID: g.id, Created: g.created, Model: g.model, Usage: g.usage()}
	switch g.kind {
	case kindChat:
		resp.Object = "chat.completion"
		msg := chatMessageOut{Role: "assistant"}
		if g.tool != nil {
			msg.ToolCalls = []toolCall{*g.tool}
		} else {
			text := g.text()
			msg.Content = &text
		}
		resp.Choices = []chatChoice{{Message: msg, FinishReason: g.finish}}
	case kindText:
		resp.Object = "text_completion"
		resp.Choices = []textChoice{{Text: g.text(), FinishReason: g.finish}}
	}
	writeJSON(w, http.StatusOK, resp)
	e.finish(g.served, g.promptTokens, g.steps())
}

type chunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *usage        `json:"usage,omitempty"`
}

// chunkChoice serves both chunk kinds: chat chunks carry a delta, text
// completion chunks a text.
type chunkChoice struct {
	Index        int     `json:"index"`
	Delta        *delta  `json:"delta,omitempty"`
	Text         *string `json:"text,omitempty"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

type delta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []toolCallDelta `json:"tool_calls,omitempty"`
}

type toolCallDelta struct {
	Index    int    `json:"index"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// stream answers with Server-Sent Events: one chunk per token, a chunk with
// the finish reason, the usage chunk when asked for, then [DONE].
func (e *Engine) stream(w http.ResponseWriter, r *http.Request, g *generation) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	object := "chat.completion.chunk"
	if g.kind == kindText {
		object = "text_completion"
	}
	send := func(choices []chunkChoice, u *usage) bool {
		b, err := json.Marshal(chunk{ID: g.id, Object: object, Created: g.created, Model: g.model, Choices: choices, Usage: u})
		if err != nil {
			return false
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	emit := func(i int) bool {
		c := chunkChoice{}
		switch {
		case g.kind == kindText:
			text := g.piece(i)
			c.Text = &text
		case g.tool != nil:
			d := toolCallDelta{}
			if i == 0 {
				d.ID, d.Type = g.tool.ID, g.tool.Type
				d.Function.Name = g.tool.Function.Name
			} else {
				d.Function.Arguments = g.tool.Function.Arguments
			}
			c.Delta = &delta{ToolCalls: []toolCallDelta{d}}
		default:
			text := g.piece(i)
			c.Delta = &delta{Content: &text}
		}
		if i == 0 && c.Delta != nil {
			c.Delta.Role = "assistant"
		}
		return send([]chunkChoice{c}, nil)
	}
	if !e.generate(w, r, g, true, emit) {
		return
	}
	last := chunkChoice{FinishReason: &g.finish}
	if g.kind == kindChat {
		last.Delta = &delta{}
	} else {
		empty := ""
		last.Text = &empty
	}
	if !send([]chunkChoice{last}, nil) {
		return
	}
	if g.includeUsage {
		u := g.usage()
		if !send([]chunkChoice{}, &u) {
			return
		}
	}
	if _, err := io.WriteString(w, "data: [DONE]\n\n"); err != nil || rc.Flush() != nil {
		return
	}
	e.finish(g.served, g.promptTokens, g.steps())
}

type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

type embeddingData struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

// maxEmbeddingDim bounds the "dimensions" a request may ask for.
const maxEmbeddingDim = 8192

func (e *Engine) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	body, _, ok := e.readInference(w, r)
	if !ok {
		return
	}
	var req embeddingRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, errTypeInvalid, "invalid_request", "invalid JSON body: "+err.Error())
		return
	}
	model, ok := e.resolveModel(w, req.Model)
	if !ok {
		return
	}
	texts, counts, err := inputs(req.Input)
	if err == nil && len(texts) == 0 {
		err = errors.New("must not be empty")
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, errTypeInvalid, "invalid_request", "input "+err.Error())
		return
	}
	dim := e.embeddingDim
	if req.Dimensions != nil {
		if *req.Dimensions < 1 || *req.Dimensions > maxEmbeddingDim {
			writeError(w, http.StatusBadRequest, errTypeInvalid, "invalid_request",
				fmt.Sprintf("dimensions must be between 1 and %d", maxEmbeddingDim))
			return
		}
		dim = *req.Dimensions
	}
	if req.EncodingFormat != "" && req.EncodingFormat != "float" && req.EncodingFormat != "base64" {
		writeError(w, http.StatusBadRequest, errTypeInvalid, "invalid_request", `encoding_format must be "float" or "base64"`)
		return
	}
	tokens := 0
	for _, c := range counts {
		tokens += c
	}
	if tokens > e.contextWindow {
		writeError(w, http.StatusBadRequest, errTypeInvalid, "context_length_exceeded",
			fmt.Sprintf("this model's maximum context length is %d tokens, but the input has %d tokens", e.contextWindow, tokens))
		return
	}
	if !e.admit(w, model) {
		return
	}
	if err := e.acquire(r.Context(), model); err != nil {
		return
	}
	defer e.release(model)
	e.markLoaded(model)
	// An embedding is one forward pass: it costs the time to first token,
	// then the fixed response latency.
	admitted := time.Now()
	if _, err := e.waitUntil(r.Context(), func(k knobs) time.Time {
		return admitted.Add(k.firstTokenDelay(tokens) + k.latency)
	}); err != nil {
		return
	}
	data := make([]embeddingData, len(texts))
	for i, t := range texts {
		v := embed(model, t, dim)
		data[i] = embeddingData{Object: "embedding", Index: i, Embedding: v}
		if req.EncodingFormat == "base64" {
			data[i].Embedding = base64.StdEncoding.EncodeToString(embeddingBase64(v))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data":   data,
		"model":  req.Model,
		"usage":  map[string]int{"prompt_tokens": tokens, "total_tokens": tokens},
	})
	e.finish(model, tokens, 0)
}
