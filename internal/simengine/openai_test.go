package simengine

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestGenerationShapesAndUsage(t *testing.T) {
	_, srv := newEngine(t, Config{Models: []string{"m"}})
	// "one two three" is 3 words; a chat prompt adds 4 per message and 3 for
	// the reply, so 10 prompt tokens. A completions prompt is its words.
	chat := chatBody("m", "one two three", nil)
	text := map[string]any{"model": "m", "prompt": "one two three"}
	tests := []struct {
		name         string
		endpoint     string
		body         map[string]any
		stream       bool
		includeUsage bool
		wantPrompt   int
	}{
		{"chat", "/v1/chat/completions", chat, false, false, 10},
		{"chat stream", "/v1/chat/completions", chat, true, false, 10},
		{"chat stream with usage", "/v1/chat/completions", chat, true, true, 10},
		{"completions", "/v1/completions", text, false, false, 3},
		{"completions stream with usage", "/v1/completions", text, true, true, 3},
		{"completions stream", "/v1/completions", text, true, false, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{}
			for k, v := range tc.body {
				body[k] = v
			}
			if tc.stream {
				body["stream"] = true
			}
			if tc.includeUsage {
				body["stream_options"] = map[string]any{"include_usage": true}
			}
			isChat := strings.Contains(tc.endpoint, "chat")
			var got string
			var u any
			var finish any
			if !tc.stream {
				status, resp := call(t, srv.URL+tc.endpoint, body)
				if status != http.StatusOK {
					t.Fatalf("status %d: %v", status, resp)
				}
				wantObject := map[bool]string{true: "chat.completion", false: "text_completion"}[isChat]
				if resp["object"] != wantObject || resp["model"] != "m" || resp["id"] == "" {
					t.Errorf("envelope: %v", resp)
				}
				if isChat {
					got, _ = path(resp, "choices", 0, "message", "content").(string)
					if path(resp, "choices", 0, "message", "role") != "assistant" {
						t.Errorf("role: %v", resp)
					}
				} else {
					got, _ = path(resp, "choices", 0, "text").(string)
				}
				finish = path(resp, "choices", 0, "finish_reason")
				u = resp["usage"]
			} else {
				resp, err := post(t.Context(), srv.URL+tc.endpoint, body)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
					t.Errorf("Content-Type %q", ct)
				}
				res := readStream(t, resp.Body)
				if !res.done || res.readErr != nil {
					t.Fatalf("stream did not end with [DONE]: done=%v err=%v", res.done, res.readErr)
				}
				chunks := res.chunks
				if tc.includeUsage {
					last := chunks[len(chunks)-1]
					if cs, _ := last["choices"].([]any); len(cs) != 0 {
						t.Errorf("usage chunk has choices: %v", last)
					}
					u = last["usage"]
					chunks = chunks[:len(chunks)-1]
				}
				for i, c := range chunks {
					if _, has := c["usage"]; has {
						t.Errorf("chunk %d carries usage: %v", i, c)
					}
					wantObject := map[bool]string{true: "chat.completion.chunk", false: "text_completion"}[isChat]
					if c["object"] != wantObject {
						t.Errorf("chunk %d object %v", i, c["object"])
					}
					var piece any
					if isChat {
						piece = path(c, "choices", 0, "delta", "content")
					} else {
						piece = path(c, "choices", 0, "text")
					}
					if i < len(chunks)-1 {
						s, _ := piece.(string)
						if s == "" || strings.Count(strings.TrimSpace(s), " ") != 0 {
							t.Errorf("chunk %d is not one word: %q", i, s)
						}
						got += s
					} else {
						finish = path(c, "choices", 0, "finish_reason")
					}
				}
				if isChat && path(chunks[0], "choices", 0, "delta", "role") != "assistant" {
					t.Errorf("first chunk has no assistant role: %v", chunks[0])
				}
			}
			words := strings.Fields(got)
			if len(words) != DefaultMaxTokens {
				t.Errorf("got %d words (%q), want %d", len(words), got, DefaultMaxTokens)
			}
			if finish != "stop" {
				t.Errorf("finish_reason %v, want stop", finish)
			}
			if !tc.stream || tc.includeUsage {
				if num(path(u, "prompt_tokens")) != tc.wantPrompt ||
					num(path(u, "completion_tokens")) != len(words) ||
					num(path(u, "total_tokens")) != tc.wantPrompt+len(words) {
					t.Errorf("usage %v, want prompt %d, completion %d", u, tc.wantPrompt, len(words))
				}
			}
		})
	}
}

// TestStreamIsIncrementalAndStalls proves chunks reach the client while the
// answer is still being generated: the stream is stalled after two chunks,
// and those two are read before it is released.
func TestStreamIsIncrementalAndStalls(t *testing.T) {
	e, srv := newEngine(t, Config{Models: []string{"m"}})
	e.StallAfter(2, hold)
	resp, err := post(t.Context(), srv.URL+"/v1/chat/completions", chatBody("m", "hi", map[string]any{"stream": true, "max_tokens": 5}))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	s := newSSE(resp.Body)
	for i := range 2 {
		data, err := s.next()
		if err != nil || data == "[DONE]" {
			t.Fatalf("chunk %d: %q, %v", i, data, err)
		}
	}
	if e.Running() != 1 || e.Served() != 0 {
		t.Fatalf("while stalled: running %d served %d, want 1 and 0", e.Running(), e.Served())
	}
	e.StallAfter(0, 0)
	res := readStream(t, resp.Body)
	// 3 more tokens and the finish chunk.
	if !res.done || len(res.chunks) != 4 {
		t.Fatalf("after release: %d chunks, done %v, err %v", len(res.chunks), res.done, res.readErr)
	}
	waitFor(t, "the stream to be counted as served", func() bool { return e.Served() == 1 })
}

func TestStallAfterPauses(t *testing.T) {
	e, srv := newEngine(t, Config{Models: []string{"m"}})
	const pause = 300 * time.Millisecond
	e.StallAfter(1, pause)
	start := time.Now()
	resp, err := post(t.Context(), srv.URL+"/v1/chat/completions", chatBody("m", "hi", map[string]any{"stream": true, "max_tokens": 3}))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	res := readStream(t, resp.Body)
	if !res.done {
		t.Fatalf("stream did not finish: %v", res.readErr)
	}
	// Only a lower bound: a busy machine can make it slower, never faster.
	if elapsed := time.Since(start); elapsed < pause {
		t.Errorf("stream took %v, want at least the %v stall", elapsed, pause)
	}
}

func TestDeterministicText(t *testing.T) {
	_, srv := newEngine(t, Config{Models: []string{"a", "b"}})
	content := func(model, prompt string) string {
		status, resp := call(t, srv.URL+"/v1/chat/completions", chatBody(model, prompt, nil))
		if status != http.StatusOK {
			t.Fatalf("status %d: %v", status, resp)
		}
		s, _ := path(resp, "choices", 0, "message", "content").(string)
		return s
	}
	first := content("a", "tell me about trains")
	if again := content("a", "tell me about trains"); again != first {
		t.Errorf("same request, different text: %q vs %q", first, again)
	}
	if other := content("a", "tell me about boats"); other == first {
		t.Errorf("different prompt, same text %q", first)
	}
	if other := content("b", "tell me about trains"); other == first {
		t.Errorf("different model, same text %q", first)
	}
	// Another engine with another seed produces the same text: the text
	// depends on the model and the prompt only.
	_, srv2 := newEngine(t, Config{Models: []string{"a"}, Seed: 99})
	status, resp := call(t, srv2.URL+"/v1/chat/completions", chatBody("a", "tell me about trains", nil))
	if got, _ := path(resp, "choices", 0, "message", "content").(string); status != http.StatusOK || got != first {
		t.Errorf("other engine: %d %q, want %q", status, got, first)
	}
}

func TestOutputLength(t *testing.T) {
	_, srv := newEngine(t, Config{Models: []string{"m"}, ContextWindow: 100, DefaultMaxTokens: 12})
	// The prompt "hi" is 1 + 4 + 3 = 8 tokens.
	long := strings.Repeat("word ", 85) // 85 + 4 + 3 = 92 prompt tokens
	tests := []struct {
		name       string
		prompt     string
		extra      map[string]any
		wantStatus int
		wantCode   string
		wantTokens int
		wantFinish string
	}{
		{"default", "hi", nil, 200, "", 12, "stop"},
		{"max_tokens", "hi", map[string]any{"max_tokens": 5}, 200, "", 5, "length"},
		{"max_completion_tokens wins", "hi", map[string]any{"max_tokens": 3, "max_completion_tokens": 7}, 200, "", 7, "length"},
		{"fills the window exactly", "hi", map[string]any{"max_tokens": 92}, 200, "", 92, "length"},
		{"default cut by the window", long, nil, 200, "", 8, "length"},
		{"over the window", "hi", map[string]any{"max_tokens": 93}, 400, "context_length_exceeded", 0, ""},
		{"prompt fills the window", strings.Repeat("word ", 93), nil, 400, "context_length_exceeded", 0, ""},
		{"zero", "hi", map[string]any{"max_tokens": 0}, 400, "invalid_request", 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, resp := call(t, srv.URL+"/v1/chat/completions", chatBody("m", tc.prompt, tc.extra))
			if status != tc.wantStatus {
				t.Fatalf("status %d, want %d: %v", status, tc.wantStatus, resp)
			}
			if status != 200 {
				if path(resp, "error", "code") != tc.wantCode || path(resp, "error", "message") == nil {
					t.Errorf("error %v, want code %s", resp, tc.wantCode)
				}
				return
			}
			text, _ := path(resp, "choices", 0, "message", "content").(string)
			if n := len(strings.Fields(text)); n != tc.wantTokens || num(path(resp, "usage", "completion_tokens")) != n {
				t.Errorf("%d words, usage %v; want %d", n, resp["usage"], tc.wantTokens)
			}
			if f := path(resp, "choices", 0, "finish_reason"); f != tc.wantFinish {
				t.Errorf("finish_reason %v, want %s", f, tc.wantFinish)
			}
		})
	}
}

func TestPromptTokens(t *testing.T) {
	_, srv := newEngine(t, Config{Models: []string{"m"}})
	tests := []struct {
		name     string
		endpoint string
		body     map[string]any
		want     int
	}{
		{"two messages", "/v1/chat/completions", map[string]any{"model": "m", "messages": []map[string]any{
			{"role": "system", "content": "be brief"},
			{"role": "user", "content": "what is a switch yard"},
		}}, 3 + (4 + 2) + (4 + 5)},
		{"content parts", "/v1/chat/completions", map[string]any{"model": "m", "messages": []map[string]any{
			{"role": "user", "content": []map[string]any{
				{"type": "text", "text": "look at this"},
				{"type": "image_url", "image_url": map[string]string{"url": "data:image/png;base64,AAAA"}},
			}},
		}}, 3 + 4 + 3 + tokensPerImage},
		{"prompt array", "/v1/completions", map[string]any{"model": "m", "prompt": []string{"a b", "c d e"}}, 5},
		{"token ids", "/v1/completions", map[string]any{"model": "m", "prompt": []int{1, 2, 3, 4}}, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, resp := call(t, srv.URL+tc.endpoint, tc.body)
			if status != http.StatusOK {
				t.Fatalf("status %d: %v", status, resp)
			}
			if got := num(path(resp, "usage", "prompt_tokens")); got != tc.want {
				t.Errorf("prompt_tokens %d, want %d", got, tc.want)
			}
		})
	}
}

func TestRequestErrors(t *testing.T) {
	_, srv := newEngine(t, Config{Models: []string{"m"}})
	tests := []struct {
		name       string
		endpoint   string
		body       any
		wantStatus int
		wantCode   string
	}{
		{"unknown model", "/v1/chat/completions", chatBody("nope", "hi", nil), 404, "model_not_found"},
		{"unknown model, completions", "/v1/completions", map[string]any{"model": "nope", "prompt": "x"}, 404, "model_not_found"},
		{"unknown model, embeddings", "/v1/embeddings", map[string]any{"model": "nope", "input": "x"}, 404, "model_not_found"},
		{"malformed JSON", "/v1/chat/completions", `{"model": "m", "messages": [`, 400, "invalid_request"},
		{"wrong type", "/v1/chat/completions", `{"model": "m", "messages": "hi"}`, 400, "invalid_request"},
		{"no model", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}]}`, 400, "invalid_request"},
		{"no messages", "/v1/chat/completions", `{"model": "m", "messages": []}`, 400, "invalid_request"},
		{"no prompt", "/v1/completions", `{"model": "m"}`, 400, "invalid_request"},
		{"no input", "/v1/embeddings", `{"model": "m"}`, 400, "invalid_request"},
		{"bad content", "/v1/chat/completions", `{"model": "m", "messages": [{"role": "user", "content": 7}]}`, 400, "invalid_request"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, resp := call(t, srv.URL+tc.endpoint, tc.body)
			if status != tc.wantStatus {
				t.Fatalf("status %d, want %d: %v", status, tc.wantStatus, resp)
			}
			if path(resp, "error", "code") != tc.wantCode || path(resp, "error", "message") == "" ||
				path(resp, "error", "type") == nil {
				t.Errorf("error JSON %v, want code %s", resp, tc.wantCode)
			}
			if _, ok := path(resp, "error").(map[string]any)["param"]; !ok {
				t.Errorf("error JSON lacks param: %v", resp)
			}
		})
	}
	t.Run("unknown endpoint", func(t *testing.T) {
		status, b := get(t, srv.URL+"/v1/nothing")
		if status != 404 || !strings.Contains(string(b), `"error"`) {
			t.Errorf("status %d: %s", status, b)
		}
	})
	t.Run("openai flavour has no metrics", func(t *testing.T) {
		if status, _ := get(t, srv.URL+"/metrics"); status != 404 {
			t.Errorf("GET /metrics: %d", status)
		}
	})
}

func TestReject429(t *testing.T) {
	e, srv := newEngine(t, Config{Models: []string{"m"}})
	e.Reject429(time.Hour, 7*time.Second)
	for _, endpoint := range []string{"/v1/chat/completions", "/v1/embeddings"} {
		body := any(chatBody("m", "hi", nil))
		if strings.Contains(endpoint, "embeddings") {
			body = map[string]any{"model": "m", "input": "hi"}
		}
		resp, err := post(t.Context(), srv.URL+endpoint, body)
		if err != nil {
			t.Fatal(err)
		}
		got := decode(t, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "7" {
			t.Fatalf("%s: status %d Retry-After %q", endpoint, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if path(got, "error", "code") != "rate_limit_exceeded" {
			t.Errorf("%s: error JSON %v", endpoint, got)
		}
	}
	if s := e.Stats(); s.Rejected != 2 || s.ByModel["m"].Rejected != 2 || s.Served != 0 {
		t.Errorf("stats after the window: %+v", s)
	}
	e.Reject429(0, 0)
	if status, resp := call(t, srv.URL+"/v1/chat/completions", chatBody("m", "hi", nil)); status != http.StatusOK {
		t.Errorf("after the window: %d %v", status, resp)
	}

	// Without an explicit Retry-After the rest of the window is advertised.
	e.Reject429(90*time.Second, 0)
	resp, err := post(t.Context(), srv.URL+"/v1/chat/completions", chatBody("m", "hi", nil))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ra := resp.Header.Get("Retry-After"); ra != "90" && ra != "89" {
		t.Errorf("Retry-After %q, want the window's 90 s", ra)
	}
}

func TestFailRate(t *testing.T) {
	t.Run("always", func(t *testing.T) {
		e, srv := newEngine(t, Config{Models: []string{"m"}, FailRate: 1})
		for _, stream := range []bool{false, true} {
			status, resp := call(t, srv.URL+"/v1/chat/completions", chatBody("m", "hi", map[string]any{"stream": stream}))
			if status != http.StatusInternalServerError || path(resp, "error", "type") != "server_error" ||
				path(resp, "error", "message") == "" {
				t.Errorf("stream=%v: %d %v", stream, status, resp)
			}
		}
		if s := e.Stats(); s.Failed != 2 || s.ByModel["m"].Failed != 2 || s.Running != 0 {
			t.Errorf("stats: %+v", s)
		}
		e.SetFailRate(0)
		if status, _ := call(t, srv.URL+"/v1/chat/completions", chatBody("m", "hi", nil)); status != http.StatusOK {
			t.Errorf("after SetFailRate(0): %d", status)
		}
	})
	t.Run("seeded", func(t *testing.T) {
		outcomes := func(seed int64) string {
			_, srv := newEngine(t, Config{Models: []string{"m"}, FailRate: 0.5, Seed: seed})
			var b strings.Builder
			for range 40 {
				status, _ := call(t, srv.URL+"/v1/chat/completions", chatBody("m", "hi", map[string]any{"max_tokens": 1}))
				b.WriteString(map[bool]string{true: "x", false: "."}[status == http.StatusInternalServerError])
			}
			return b.String()
		}
		a, b := outcomes(7), outcomes(7)
		if a != b {
			t.Errorf("same seed, different failures:\n%s\n%s", a, b)
		}
		if !strings.Contains(a, "x") || !strings.Contains(a, ".") {
			t.Errorf("rate 0.5 gave %s", a)
		}
	})
}

func TestCutAfter(t *testing.T) {
	e, srv := newEngine(t, Config{Models: []string{"m"}})
	e.CutAfter(3)
	resp, err := post(t.Context(), srv.URL+"/v1/chat/completions", chatBody("m", "hi", map[string]any{"stream": true, "max_tokens": 10}))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	res := readStream(t, resp.Body)
	if res.done {
		t.Fatal("a cut stream sent [DONE]")
	}
	if len(res.chunks) != 3 {
		t.Errorf("got %d chunks before the cut, want 3", len(res.chunks))
	}
	if !errors.Is(res.readErr, io.ErrUnexpectedEOF) {
		t.Errorf("body ended with %v, want an unexpected EOF", res.readErr)
	}
	waitFor(t, "the cut request to free its slot", func() bool { return e.Running() == 0 })
	if s := e.Stats(); s.Cut != 1 || s.Served != 0 {
		t.Errorf("stats: cut %d served %d", s.Cut, s.Served)
	}

	// Non-streaming answers are not cut, and CutAfter(-1) turns cutting off.
	if status, _ := call(t, srv.URL+"/v1/chat/completions", chatBody("m", "hi", map[string]any{"max_tokens": 10})); status != 200 {
		t.Errorf("non-stream while cutting: %d", status)
	}
	e.CutAfter(-1)
	resp2, err := post(t.Context(), srv.URL+"/v1/chat/completions", chatBody("m", "hi", map[string]any{"stream": true, "max_tokens": 10}))
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	if res := readStream(t, resp2.Body); !res.done {
		t.Errorf("stream after CutAfter(-1) did not finish: %v", res.readErr)
	}
}

func TestEmbeddings(t *testing.T) {
	_, srv := newEngine(t, Config{Models: []string{"m", "other"}, EmbeddingDim: 16})
	vectors := func(body map[string]any) ([][]float64, map[string]any) {
		t.Helper()
		status, resp := call(t, srv.URL+"/v1/embeddings", body)
		if status != http.StatusOK {
			t.Fatalf("status %d: %v", status, resp)
		}
		var out [][]float64
		for i, d := range resp["data"].([]any) {
			if num(path(d, "index")) != i || path(d, "object") != "embedding" {
				t.Errorf("data[%d]: %v", i, d)
			}
			var v []float64
			for _, x := range path(d, "embedding").([]any) {
				v = append(v, x.(float64))
			}
			out = append(out, v)
		}
		return out, resp
	}
	single, resp := vectors(map[string]any{"model": "m", "input": "a freight train"})
	if len(single) != 1 || len(single[0]) != 16 || num(path(resp, "usage", "prompt_tokens")) != 3 || resp["object"] != "list" {
		t.Fatalf("single input: %v", resp)
	}
	batch, resp := vectors(map[string]any{"model": "m", "input": []string{"a freight train", "a slow boat", "a freight train"}})
	if len(batch) != 3 || num(path(resp, "usage", "prompt_tokens")) != 9 {
		t.Fatalf("batch: %v", resp)
	}
	for i, v := range batch {
		var norm float64
		for _, x := range v {
			norm += x * x
		}
		if math.Abs(math.Sqrt(norm)-1) > 1e-9 {
			t.Errorf("vector %d has length %v", i, math.Sqrt(norm))
		}
	}
	equal := func(a, b []float64) bool {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
		return true
	}
	if !equal(batch[0], single[0]) || !equal(batch[0], batch[2]) {
		t.Error("the same input gave different vectors")
	}
	if equal(batch[0], batch[1]) {
		t.Error("different inputs gave the same vector")
	}
	if other, _ := vectors(map[string]any{"model": "other", "input": "a freight train"}); equal(other[0], single[0]) {
		t.Error("different models gave the same vector")
	}
	if dims, _ := vectors(map[string]any{"model": "m", "input": "x", "dimensions": 4}); len(dims[0]) != 4 {
		t.Errorf("dimensions 4 gave %d", len(dims[0]))
	}

	status, b64 := call(t, srv.URL+"/v1/embeddings", map[string]any{"model": "m", "input": "a freight train", "encoding_format": "base64"})
	raw, err := base64.StdEncoding.DecodeString(path(b64, "data", 0, "embedding").(string))
	if status != http.StatusOK || err != nil || len(raw) != 16*4 {
		t.Fatalf("base64: %d %v %d bytes", status, err, len(raw))
	}
	for i := range 16 {
		f := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		if f != float32(single[0][i]) {
			t.Errorf("base64 component %d is %v, float answer %v", i, f, single[0][i])
		}
	}
}

func TestToolCalls(t *testing.T) {
	_, srv := newEngine(t, Config{Models: []string{"m"}})
	tools := []map[string]any{
		{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": map[string]any{"type": "object"}}},
		{"type": "function", "function": map[string]any{"name": "get_time"}},
	}
	named := map[string]any{"type": "function", "function": map[string]any{"name": "get_time"}}
	tests := []struct {
		name     string
		choice   any
		wantTool string // "" for a text answer
	}{
		{"no choice", nil, "get_weather"},
		{"auto", "auto", "get_weather"},
		{"required", "required", "get_weather"},
		{"named", named, "get_time"},
		{"none", "none", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			extra := map[string]any{"tools": tools}
			if tc.choice != nil {
				extra["tool_choice"] = tc.choice
			}
			status, resp := call(t, srv.URL+"/v1/chat/completions", chatBody("m", "weather?", extra))
			if status != http.StatusOK {
				t.Fatalf("status %d: %v", status, resp)
			}
			msg := path(resp, "choices", 0, "message")
			if tc.wantTool == "" {
				if path(msg, "tool_calls") != nil || path(msg, "content") == nil {
					t.Errorf("want a text answer: %v", msg)
				}
				return
			}
			call0 := path(msg, "tool_calls", 0)
			args, _ := path(call0, "function", "arguments").(string)
			var obj map[string]any
			if path(call0, "function", "name") != tc.wantTool || path(call0, "type") != "function" ||
				json.Unmarshal([]byte(args), &obj) != nil {
				t.Errorf("tool call %v, want %s with a JSON object", call0, tc.wantTool)
			}
			id, _ := path(call0, "id").(string)
			if !strings.HasPrefix(id, "call_") {
				t.Errorf("tool call id %q", id)
			}
			if path(msg, "content") != nil || path(resp, "choices", 0, "finish_reason") != "tool_calls" {
				t.Errorf("content %v, finish %v", path(msg, "content"), path(resp, "choices", 0, "finish_reason"))
			}
			// The id is deterministic: the same request gets the same id.
			_, again := call(t, srv.URL+"/v1/chat/completions", chatBody("m", "weather?", extra))
			if path(again, "choices", 0, "message", "tool_calls", 0, "id") != id {
				t.Errorf("second call id %v, want %s", path(again, "choices", 0, "message", "tool_calls", 0, "id"), id)
			}
		})
	}
	t.Run("stream", func(t *testing.T) {
		body := chatBody("m", "weather?", map[string]any{"tools": tools, "stream": true, "stream_options": map[string]any{"include_usage": true}})
		resp, err := post(t.Context(), srv.URL+"/v1/chat/completions", body)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		res := readStream(t, resp.Body)
		if !res.done {
			t.Fatalf("no [DONE]: %v", res.readErr)
		}
		var name, args, id string
		var finish any
		for _, c := range res.chunks {
			if tc := path(c, "choices", 0, "delta", "tool_calls", 0); tc != nil {
				if num(path(tc, "index")) != 0 {
					t.Errorf("tool call index %v", path(tc, "index"))
				}
				if s, ok := path(tc, "id").(string); ok {
					id = s
				}
				n, _ := path(tc, "function", "name").(string)
				a, _ := path(tc, "function", "arguments").(string)
				name += n
				args += a
			}
			if f := path(c, "choices", 0, "finish_reason"); f != nil {
				finish = f
			}
		}
		if name != "get_weather" || args != "{}" || !strings.HasPrefix(id, "call_") || finish != "tool_calls" {
			t.Errorf("streamed call: name %q args %q id %q finish %v", name, args, id, finish)
		}
		u := res.chunks[len(res.chunks)-1]["usage"]
		if num(path(u, "completion_tokens")) != toolCallTokens {
			t.Errorf("usage %v", u)
		}
	})
}

func TestModelsEndpoint(t *testing.T) {
	for _, flavor := range Flavors() {
		t.Run(flavor, func(t *testing.T) {
			_, srv := newEngine(t, Config{Models: []string{"m1", "org/m2"}, Flavor: flavor, ContextWindow: 4096})
			var list struct {
				Object string           `json:"object"`
				Data   []map[string]any `json:"data"`
			}
			getJSON(t, srv.URL+"/v1/models", &list)
			if list.Object != "list" || len(list.Data) != 2 || list.Data[0]["id"] != "m1" || list.Data[1]["id"] != "org/m2" {
				t.Fatalf("models: %+v", list)
			}
			for _, m := range list.Data {
				if m["object"] != "model" || m["owned_by"] == nil {
					t.Errorf("entry %v", m)
				}
				if flavor == FlavorVLLM && num(m["max_model_len"]) != 4096 {
					t.Errorf("vLLM entry without max_model_len: %v", m)
				}
			}
			var one map[string]any
			getJSON(t, srv.URL+"/v1/models/org/m2", &one)
			if one["id"] != "org/m2" {
				t.Errorf("GET /v1/models/org/m2: %v", one)
			}
		})
	}
}

func TestLastRequestEcho(t *testing.T) {
	e, srv := newEngine(t, Config{Models: []string{"m"}})
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"unknown_field":{"kept":true}}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer forwarded-key")
	req.Header.Set("X-Custom", "yes")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// Status endpoints polled by an agent must not overwrite the record.
	get(t, srv.URL+"/v1/models")

	headers, raw := e.LastRequest()
	if headers.Get("Authorization") != "Bearer forwarded-key" || string(raw) != body {
		t.Errorf("LastRequest: %v %s", headers, raw)
	}
	var stats struct {
		Path    string              `json:"last_request_path"`
		Headers map[string][]string `json:"last_request_headers"`
		Body    map[string]any      `json:"last_request_body_json"`
	}
	getJSON(t, srv.URL+"/sim/stats", &stats)
	if stats.Path != "/v1/chat/completions" || stats.Headers["X-Custom"][0] != "yes" ||
		path(stats.Body, "unknown_field", "kept") != true {
		t.Errorf("stats echo: %+v", stats)
	}

	// A body that is not JSON is still echoed, as a string.
	call(t, srv.URL+"/v1/chat/completions", "not json")
	var s2 struct {
		Body string `json:"last_request_body_json"`
	}
	getJSON(t, srv.URL+"/sim/stats", &s2)
	if s2.Body != "not json" {
		t.Errorf("non-JSON body echoed as %q", s2.Body)
	}
}
