package front_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/agent/front"
	"github.com/switchyard-ai/switchyard/internal/simengine"
)

const (
	nodeKey   = "syn_aaaaaaaaaaaa_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	wrongKey  = "syn_aaaaaaaaaaaa_cccccccccccccccccccccccccccccccc"
	engineKey = "engine-secret"
	model     = "m1"
	// waitTimeout bounds every wait; a passing test never waits it out.
	waitTimeout = 20 * time.Second
)

type fixture struct {
	engine *simengine.Engine
	front  *front.Front
	url    string
}

func start(t *testing.T, cfg simengine.Config, o front.Options) fixture {
	t.Helper()
	cfg.Models = []string{model}
	e := simengine.New(cfg, nil)
	es := httptest.NewServer(e.Handler())
	t.Cleanup(es.Close)
	if o.EngineURL == "" {
		o.EngineURL = es.URL + "/v1/" // as operators copy it; the front drops /v1
	}
	o.NodeKey = nodeKey
	f, err := front.New(o)
	if err != nil {
		t.Fatal(err)
	}
	fs := httptest.NewServer(f)
	t.Cleanup(fs.Close)
	return fixture{engine: e, front: f, url: fs.URL}
}

func do(t *testing.T, method, url, key, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, data
}

// openAIError decodes an OpenAI-style error body and returns its code.
func openAIError(t *testing.T, data []byte) string {
	t.Helper()
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Code    string  `json:"code"`
			Param   *string `json:"param"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("not an OpenAI error body: %s (%v)", data, err)
	}
	return e.Error.Code
}

const chat = `{"model":"m1","messages":[{"role":"user","content":"hello there"}],"max_tokens":5}`

func TestAuth(t *testing.T) {
	fx := start(t, simengine.Config{Flavor: simengine.FlavorVLLM}, front.Options{})
	for _, tc := range []struct {
		name, auth string
		want       int
	}{
		{"missing", "", http.StatusUnauthorized},
		{"wrong key", "Bearer " + wrongKey, http.StatusUnauthorized},
		{"shorter key", "Bearer syn_x", http.StatusUnauthorized},
		{"not bearer", "Basic " + nodeKey, http.StatusUnauthorized},
		{"node key", "Bearer " + nodeKey, http.StatusOK},
		{"scheme in lower case", "bearer " + nodeKey, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, data := do(t, http.MethodGet, fx.url+"/v1/models", tc.auth, "")
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.want, data)
			}
			if tc.want == http.StatusUnauthorized {
				if code := openAIError(t, data); code != "invalid_api_key" {
					t.Errorf("code %q, want invalid_api_key", code)
				}
				if strings.Contains(string(data), "syn_") && strings.Contains(string(data), wrongKey[4:]) {
					t.Errorf("the answer repeats the key sent: %s", data)
				}
			}
		})
	}
	if got := fx.engine.Stats().LastRequestPath; got != "" {
		t.Errorf("the engine saw an inference request %q", got)
	}
}

func TestOnlyTheFourRoutesReachTheEngine(t *testing.T) {
	fx := start(t, simengine.Config{Flavor: simengine.FlavorOllama}, front.Options{})
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodGet, "/api/tags", ""},
		{http.MethodGet, "/api/ps", ""},
		{http.MethodPost, "/api/pull", `{"model":"evil"}`},
		{http.MethodDelete, "/api/delete", `{"model":"m1"}`},
		{http.MethodPost, "/api/copy", `{"source":"m1","destination":"m2"}`},
		{http.MethodPost, "/api/chat", `{"model":"m1"}`},
		{http.MethodPost, "/v1/other", `{}`},
		{http.MethodGet, "/v1/chat/completions", ""},
		{http.MethodPost, "/v1/models", `{}`},
		{http.MethodGet, "/v1/models/m1", ""},
		{http.MethodPost, "/v1/chat/completions/", chat},
		{http.MethodPost, "/v1/../api/pull", `{"model":"evil"}`},
		{http.MethodGet, "/", ""},
		{http.MethodGet, "/metrics", ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			resp, data := do(t, tc.method, fx.url+tc.path, "Bearer "+nodeKey, tc.body)
			if resp.StatusCode != http.StatusNotFound {
				t.Fatalf("status %d, want 404: %s", resp.StatusCode, data)
			}
			if code := openAIError(t, data); code != "not_found" {
				t.Errorf("code %q, want not_found", code)
			}
		})
	}
	st := fx.engine.Stats()
	if st.NativeRequests != 0 || st.LastRequestPath != "" {
		t.Errorf("the engine saw %d native requests, last inference path %q; want none", st.NativeRequests, st.LastRequestPath)
	}
}

func TestForwardsAndStripsTheNodeKey(t *testing.T) {
	for _, tc := range []struct {
		name, engineKey, wantAuth string
	}{
		{"no engine key", "", ""},
		{"engine key", engineKey, "Bearer " + engineKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := start(t, simengine.Config{Flavor: simengine.FlavorOllama}, front.Options{EngineAPIKey: tc.engineKey})
			for _, r := range []struct{ method, path, body string }{
				{http.MethodPost, "/v1/chat/completions", chat},
				{http.MethodPost, "/v1/completions", `{"model":"m1","prompt":"hi","max_tokens":3}`},
				{http.MethodPost, "/v1/embeddings", `{"model":"m1","input":"hi"}`},
				{http.MethodGet, "/v1/models", ""},
			} {
				resp, data := do(t, r.method, fx.url+r.path, "Bearer "+nodeKey, r.body)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s %s: status %d: %s", r.method, r.path, resp.StatusCode, data)
				}
				if r.method == http.MethodPost {
					h, body := fx.engine.LastRequest()
					if got := h.Get("Authorization"); got != tc.wantAuth {
						t.Errorf("%s: the engine got Authorization %q, want %q", r.path, got, tc.wantAuth)
					}
					if strings.Contains(strings.Join(flatten(h), " "), nodeKey) {
						t.Errorf("%s: the node key reached the engine", r.path)
					}
					if string(body) != r.body {
						t.Errorf("%s: the engine got body %s, want %s", r.path, body, r.body)
					}
				}
			}
			resp, data := do(t, http.MethodPost, fx.url+"/v1/chat/completions", "Bearer "+nodeKey, chat)
			var out struct {
				Choices []struct {
					Message struct{ Content string } `json:"message"`
				} `json:"choices"`
				Usage struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(data, &out); err != nil || resp.StatusCode != http.StatusOK || len(out.Choices) != 1 || out.Choices[0].Message.Content == "" || out.Usage.CompletionTokens != 5 {
				t.Fatalf("chat answer %d %s (%v)", resp.StatusCode, data, err)
			}
			// The handler returns just after the client has the answer.
			waitFor(t, "in flight to return to 0", func() bool { return fx.front.InFlight() == 0 })
		})
	}
}

func flatten(h http.Header) []string {
	var out []string
	for k, vs := range h {
		for _, v := range vs {
			out = append(out, k+": "+v)
		}
	}
	return out
}

// stream starts a streaming chat and returns its reader once the response
// headers are in.
func stream(t *testing.T, ctx context.Context, url string, maxTokens int) (*http.Response, *bufio.Reader) {
	t.Helper()
	body := `{"model":"m1","stream":true,"max_tokens":` + strconv.Itoa(maxTokens) + `,"messages":[{"role":"user","content":"tell me"}]}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+nodeKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: status %d: %s", resp.StatusCode, data)
	}
	return resp, bufio.NewReader(resp.Body)
}

// nextData returns the next SSE data payload.
func nextData(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended early: %v", err)
		}
		if d, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok {
			return d
		}
	}
}

func TestStreamsChunkByChunk(t *testing.T) {
	fx := start(t, simengine.Config{Flavor: simengine.FlavorVLLM}, front.Options{})
	// Every stream stops after two token chunks until released: if the
	// front buffered, the test would see nothing while the engine holds.
	fx.engine.StallAfter(2, time.Hour)
	resp, r := stream(t, t.Context(), fx.url, 6)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("Content-Type %q", ct)
	}
	var got int
	for got < 2 {
		d := nextData(t, r)
		if strings.Contains(d, `"content"`) && !strings.Contains(d, `"content":""`) {
			got++
		}
	}
	if fx.engine.Running() != 1 || fx.front.InFlight() != 1 {
		t.Fatalf("engine running %d, front in flight %d: want the stream still going", fx.engine.Running(), fx.front.InFlight())
	}
	fx.engine.StallAfter(0, 0)
	for {
		if d := nextData(t, r); d == "[DONE]" {
			break
		}
	}
	waitFor(t, "in flight to return to 0", func() bool { return fx.front.InFlight() == 0 })
}

func TestDrain(t *testing.T) {
	fx := start(t, simengine.Config{Flavor: simengine.FlavorVLLM}, front.Options{})
	fx.engine.StallAfter(1, time.Hour)
	_, r := stream(t, t.Context(), fx.url, 4)
	nextData(t, r)
	if fx.front.InFlight() != 1 {
		t.Fatalf("in flight %d, want 1", fx.front.InFlight())
	}

	fx.front.Drain()
	if !fx.front.Draining() {
		t.Fatal("not draining after Drain")
	}
	resp, data := do(t, http.MethodPost, fx.url+"/v1/chat/completions", "Bearer "+nodeKey, chat)
	if resp.StatusCode != http.StatusServiceUnavailable || openAIError(t, data) != "node_draining" {
		t.Fatalf("new request while draining: %d %s, want 503 node_draining", resp.StatusCode, data)
	}
	// A wrong key still gets 401, not a hint that the node is draining.
	if resp, _ := do(t, http.MethodGet, fx.url+"/v1/models", "Bearer "+wrongKey, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong key while draining: %d, want 401", resp.StatusCode)
	}

	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	left, err := fx.front.Wait(short)
	cancel()
	if err == nil || left != 1 {
		t.Fatalf("Wait with the stream held = %d, %v; want 1 and a deadline error; engine %+v", left, err, fx.engine.Stats())
	}

	waited := make(chan int, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		n, _ := fx.front.Wait(ctx)
		waited <- n
	}()
	fx.engine.StallAfter(0, 0)
	for nextData(t, r) != "[DONE]" {
	}
	select {
	case n := <-waited:
		if n != 0 {
			t.Fatalf("Wait returned %d in flight, want 0", n)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Wait did not return after the stream finished")
	}
}

func TestEngineDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	fx := start(t, simengine.Config{}, front.Options{EngineURL: dead})
	resp, data := do(t, http.MethodPost, fx.url+"/v1/chat/completions", "Bearer "+nodeKey, chat)
	if resp.StatusCode != http.StatusBadGateway || openAIError(t, data) != "engine_unavailable" {
		t.Fatalf("engine down: %d %s, want 502 engine_unavailable", resp.StatusCode, data)
	}
	if strings.Contains(string(data), dead) {
		t.Errorf("the answer names the engine's address: %s", data)
	}
}

func TestHealthz(t *testing.T) {
	fx := start(t, simengine.Config{}, front.Options{})
	resp, data := do(t, http.MethodGet, fx.url+"/healthz", "", "")
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(data)) != "ok" {
		t.Fatalf("healthz: %d %q", resp.StatusCode, data)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, o := range []front.Options{
		{EngineURL: "127.0.0.1:11434", NodeKey: nodeKey},
		{EngineURL: "ftp://x", NodeKey: nodeKey},
		{EngineURL: "http://127.0.0.1:11434"},
	} {
		if _, err := front.New(o); err == nil {
			t.Errorf("New(%+v) accepted", o.EngineURL)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestStreamsSurviveTheFirstFlush guards against an HTTP/1 server closing the
// request body at the response's first flush while the proxy is still
// copying it to the engine: the engine connection was then dropped in a few
// percent of streams.
func TestStreamsSurviveTheFirstFlush(t *testing.T) {
	// Streams that last a little, so that a dropped connection shows.
	fx := start(t, simengine.Config{Flavor: simengine.FlavorVLLM, TPS: 1000}, front.Options{})
	for i := range 40 {
		_, r := stream(t, t.Context(), fx.url, 10)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("stream %d broke off: %v", i, err)
			}
			if strings.TrimSpace(line) == "data: [DONE]" {
				break
			}
		}
	}
	// The engine counts a stream once its [DONE] is out, a moment after
	// the client has read it.
	waitFor(t, "the engine to count 40 streams served", func() bool { return fx.engine.Served() == 40 })
}
