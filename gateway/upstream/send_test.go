package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestSendForwardsOnlySafeHeaders(t *testing.T) {
	got := make(chan *http.Request, 1)
	var gotBody []byte
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		gotBody, _ = io.ReadAll(r.Body)
		got <- r
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	})
	in := http.Header{
		"Authorization":       {"Bearer syk_client_secret"},
		"Api-Key":             {"syk_client_secret"},
		"Cookie":              {"session=1"},
		"Connection":          {"X-Private-Hop"},
		"X-Private-Hop":       {"1"},
		"Keep-Alive":          {"timeout=5"},
		"Proxy-Authorization": {"Basic Zm9vOmJhcg=="},
		"Upgrade":             {"websocket"},
		"X-Switchyard-Policy": {"nodes-only"},
		"X-Forwarded-For":     {"10.9.9.9"},
		"Openai-Organization": {"org-client"},
		"Accept-Encoding":     {"br"},
		"Content-Type":        {"text/plain"},
		"Accept":              {"text/event-stream"},
		"User-Agent":          {"OpenAI/Python 1.99"},
		"X-Stainless-Lang":    {"python"},
	}
	body := []byte(`{"model":"m","messages":[]}`)
	resp, err := newTestClient(Options{}).Send(context.Background(), vendorAt(s), "/chat/completions", body, in)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	r := <-got

	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		t.Errorf("request = %s %s, want POST /v1/chat/completions", r.Method, r.URL.Path)
	}
	if !bytes.Equal(gotBody, body) {
		t.Errorf("body = %q, want %q", gotBody, body)
	}
	want := map[string]string{
		"Authorization":    "Bearer " + testKey, // injected, the client's replaced
		"Content-Type":     "application/json",
		"Accept":           "text/event-stream",
		"User-Agent":       "OpenAI/Python 1.99",
		"X-Stainless-Lang": "python",
		"Accept-Encoding":  "gzip", // the transport's own, which it decodes
	}
	for k, v := range want {
		if g := r.Header.Values(k); len(g) != 1 || g[0] != v {
			t.Errorf("%s = %q, want [%q]", k, g, v)
		}
	}
	for _, k := range []string{"Api-Key", "Cookie", "X-Private-Hop", "Keep-Alive", "Proxy-Authorization",
		"Upgrade", "X-Switchyard-Policy", "X-Forwarded-For", "Openai-Organization"} {
		if v, ok := r.Header[k]; ok {
			t.Errorf("%s forwarded: %q", k, v)
		}
	}
}

// The transport's buffers are small (a request's head, a response's head):
// bodies and heads larger than them pass whole, over one kept connection.
func TestSendLargerThanTheConnectionBuffers(t *testing.T) {
	bigHeader := strings.Repeat("h", 6<<10)
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Big", bigHeader)
		w.Header().Set("Content-Type", "application/json")
		io.Copy(w, r.Body) // echo
	})
	c := newTestClient(Options{})
	for _, n := range []int{100, 900, 1 << 10, 3 << 10, 300 << 10} {
		body := []byte(`{"model":"m","pad":"` + strings.Repeat("x", n) + `"}`)
		resp, err := c.Send(context.Background(), vendorAt(s), "/chat/completions", body, nil)
		if err != nil {
			t.Fatalf("%d bytes: %v", len(body), err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("%d bytes sent, %d echoed (err %v)", len(body), len(got), err)
		}
		if h := resp.Header.Get("X-Big"); h != bigHeader {
			t.Errorf("%d bytes: a %d-byte response header arrived as %d bytes", len(body), len(bigHeader), len(h))
		}
	}
	if n := s.conns.Load(); n != 1 {
		t.Errorf("%d connections opened, want 1 kept for every call", n)
	}
}

func TestSendWithoutBodyIsGET(t *testing.T) {
	got := make(chan *http.Request, 1)
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		got <- r
		io.WriteString(w, `{"data":[]}`)
	})
	resp, err := newTestClient(Options{}).Send(context.Background(), vendorAt(s), "/models", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r := <-got
	if r.Method != http.MethodGet || r.URL.Path != "/v1/models" || r.Header.Get("Content-Type") != "" {
		t.Errorf("request = %s %s Content-Type %q, want GET /v1/models without one", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
	}
	if string(b) != `{"data":[]}` || resp.Status != 200 || resp.Stream {
		t.Errorf("response = %d %q stream=%v", resp.Status, b, resp.Stream)
	}
}

func TestSendClassifiesStatus(t *testing.T) {
	clock := newFakeClock()
	tests := []struct {
		name       string
		status     int
		header     http.Header
		body       string
		kind       ErrorKind
		retryable  bool
		retryAfter time.Duration
		message    string
	}{
		{name: "500", status: 500, body: `{"error":{"message":"engine crashed","type":"server_error"}}`, kind: Status5xx, retryable: true, message: "engine crashed"},
		{name: "502 html", status: 502, body: "<html>bad gateway</html>", kind: Status5xx, retryable: true, message: "<html>bad gateway</html>"},
		{name: "503 retry-after", status: 503, header: http.Header{"Retry-After": {"7"}}, kind: Status5xx, retryable: true, retryAfter: 7 * time.Second, message: "Service Unavailable"},
		{name: "429 seconds", status: 429, header: http.Header{"Retry-After": {"20"}}, body: `{"error":{"message":"slow down"}}`, kind: RateLimited, retryable: true, retryAfter: 20 * time.Second, message: "slow down"},
		{name: "429 http-date", status: 429, header: http.Header{"Retry-After": {clock.Now().Add(90 * time.Second).Format(http.TimeFormat)}}, kind: RateLimited, retryable: true, retryAfter: 90 * time.Second},
		{name: "429 milliseconds", status: 429, header: http.Header{"Retry-After-Ms": {"1500"}, "Retry-After": {"2"}}, kind: RateLimited, retryable: true, retryAfter: 1500 * time.Millisecond},
		{name: "401", status: 401, body: `{"error":{"message":"invalid key"}}`, kind: Auth, retryable: true, message: "invalid key"},
		{name: "403", status: 403, body: `{"error":"forbidden region"}`, kind: Auth, retryable: true, message: "forbidden region"},
		{name: "400", status: 400, body: `{"error":{"message":"messages: field required","type":"invalid_request_error"}}`, kind: BadRequest, retryable: false, message: "messages: field required"},
		{name: "404", status: 404, body: `{"detail":"Not Found"}`, kind: BadRequest, retryable: false, message: "Not Found"},
		{name: "422", status: 422, body: `{"message":"bad value"}`, kind: BadRequest, retryable: false, message: "bad value"},
		{name: "408", status: 408, kind: Timeout, retryable: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tt.header {
					w.Header()[k] = v
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			c := newTestClient(Options{Now: clock.Now})
			_, err := c.Send(context.Background(), vendorAt(s), "/chat/completions", []byte(`{}`), nil)
			e := asError(t, err, tt.kind)
			if e.Retryable() != tt.retryable {
				t.Errorf("Retryable() = %v, want %v", e.Retryable(), tt.retryable)
			}
			if e.Status != tt.status {
				t.Errorf("Status = %d, want %d", e.Status, tt.status)
			}
			if e.RetryAfter != tt.retryAfter {
				t.Errorf("RetryAfter = %s, want %s", e.RetryAfter, tt.retryAfter)
			}
			if tt.message != "" && e.Message != tt.message {
				t.Errorf("Message = %q, want %q", e.Message, tt.message)
			}
			if e.Target != "vendor:acme" {
				t.Errorf("Target = %q", e.Target)
			}
		})
	}
}

func TestSendRedactsEchoedKey(t *testing.T) {
	masked := testKey[:8] + "************************" + testKey[len(testKey)-8:]
	bodies := map[string]string{
		"json whole key":   fmt.Sprintf(`{"error":{"message":"Incorrect API key provided: %s."}}`, testKey),
		"json masked":      fmt.Sprintf(`{"error":{"message":"Incorrect API key provided: %s."}}`, masked),
		"text inner piece": "key fragment " + testKey[5:19] + " refused",
		"text bearer":      "Authorization: Bearer " + testKey,
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusUnauthorized)
				io.WriteString(w, body)
			})
			_, err := newTestClient(Options{}).Send(context.Background(), vendorAt(s), "/chat/completions", []byte(`{}`), nil)
			e := asError(t, err, Auth)
			for _, leak := range []string{testKey, testKey[:8], testKey[len(testKey)-8:], testKey[5:19]} {
				if strings.Contains(e.Message, leak) || strings.Contains(e.Error(), leak) {
					t.Errorf("message %q contains %q", e.Error(), leak)
				}
			}
			if !strings.Contains(e.Message, "[redacted]") {
				t.Errorf("message %q has no [redacted]", e.Message)
			}
		})
	}
}

func TestSendNeverFollowsRedirects(t *testing.T) {
	for _, status := range []int{301, 302, 303, 307, 308} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			elsewhere := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
			s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, elsewhere.URL+"/steal", status)
			})
			_, err := newTestClient(Options{}).Send(context.Background(), vendorAt(s), "/chat/completions", []byte(`{}`), nil)
			e := asError(t, err, Redirect)
			if !e.Retryable() || e.Status != status {
				t.Errorf("Retryable() = %v, Status = %d", e.Retryable(), e.Status)
			}
			if n := elsewhere.hits.Load() + elsewhere.conns.Load(); n != 0 {
				t.Errorf("redirect target saw %d requests/connections, want none", n)
			}
		})
	}
}

func TestSendConnectRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	tgt := Target{Kind: TargetVendor, ID: "gone", BaseURL: "http://" + addr + "/v1", APIKey: testKey}
	_, err = newTestClient(Options{}).Send(context.Background(), tgt, "/chat/completions", []byte(`{}`), nil)
	e := asError(t, err, Connect)
	if !e.Retryable() {
		t.Error("connect failure not retryable")
	}
}

func TestSendBadBaseURL(t *testing.T) {
	for _, base := range []string{"ftp://x/v1", "http://user:pw@host/v1", "://nope", "http:///v1"} {
		t.Run(base, func(t *testing.T) {
			tgt := Target{Kind: TargetVendor, ID: "x", BaseURL: base}
			_, err := newTestClient(Options{}).Send(context.Background(), tgt, "/models", nil, nil)
			e := asError(t, err, Connect)
			if strings.Contains(e.Error(), "pw") {
				t.Errorf("message repeats the URL: %v", e)
			}
		})
	}
}

func TestSendFirstByteTimeout(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers; ends when the client hangs up
	})
	tgt := vendorAt(s)
	tgt.FirstByteTimeout = 100 * time.Millisecond
	start := time.Now()
	_, err := newTestClient(Options{}).Send(context.Background(), tgt, "/chat/completions", []byte(`{}`), nil)
	e := asError(t, err, Timeout)
	if el := time.Since(start); el < 100*time.Millisecond || el > 2*time.Second {
		t.Errorf("gave up after %s, want about 100ms", el)
	}
	if !e.Retryable() {
		t.Error("timeout not retryable")
	}
}

func TestStreamIdleTimeout(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	c := newTestClient(Options{IdleTimeout: 100 * time.Millisecond})
	resp, err := c.Send(context.Background(), vendorAt(s), "/chat/completions", []byte(`{"stream":true}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if !resp.Stream {
		t.Fatal("text/event-stream not detected")
	}
	ev := resp.Events()
	if e, err := ev.Next(); err != nil || string(e.Data()) != `{"n":1}` {
		t.Fatalf("first event = %q, %v", e.Data(), err)
	}
	start := time.Now()
	_, err = ev.Next()
	asError(t, err, Timeout)
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("idle stream ended after %s, want about 100ms", el)
	}
}

func TestStreamSlowReaderIsNotIdle(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: 1\n\ndata: 2\n\n")
	})
	c := newTestClient(Options{IdleTimeout: 50 * time.Millisecond})
	resp, err := c.Send(context.Background(), vendorAt(s), "/chat/completions", []byte(`{}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	time.Sleep(150 * time.Millisecond) // the client is slow, not the upstream
	b, err := io.ReadAll(resp.Body)
	if err != nil || string(b) != "data: 1\n\ndata: 2\n\n" {
		t.Fatalf("body = %q, %v", b, err)
	}
}

func TestSendCancelReachesUpstream(t *testing.T) {
	tests := []struct {
		name   string
		stream bool // cancel after the headers, while reading the stream
	}{
		{name: "before headers"},
		{name: "during stream", stream: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			arrived, gone := make(chan struct{}), make(chan struct{})
			s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.stream {
					w.Header().Set("Content-Type", "text/event-stream")
					io.WriteString(w, "data: 1\n\n")
					w.(http.Flusher).Flush()
				}
				close(arrived)
				<-r.Context().Done()
				close(gone)
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c := newTestClient(Options{})
			type result struct {
				resp *Response
				err  error
			}
			done := make(chan result, 1)
			go func() {
				resp, err := c.Send(ctx, vendorAt(s), "/chat/completions", []byte(`{}`), nil)
				done <- result{resp, err}
			}()
			waitFor(t, arrived, 5*time.Second, "the request to arrive")
			if !tt.stream {
				cancel()
				r := <-done
				asError(t, r.err, Canceled)
				if r.err.(*Error).Retryable() {
					t.Error("canceled call is retryable")
				}
				waitFor(t, gone, 5*time.Second, "the upstream to see the cancel")
				return
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			defer r.resp.Body.Close()
			ev := r.resp.Events()
			if _, err := ev.Next(); err != nil {
				t.Fatal(err)
			}
			cancel()
			waitFor(t, gone, 5*time.Second, "the upstream to see the cancel")
			_, err := ev.Next()
			asError(t, err, Canceled)
		})
	}
}

func TestSendCanceledContextSendsNothing(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := newTestClient(Options{}).Send(ctx, vendorAt(s), "/chat/completions", []byte(`{}`), nil)
	asError(t, err, Canceled)
	if s.hits.Load() != 0 {
		t.Error("a canceled call reached the upstream")
	}
}

func TestStreamPassesEventsAsTheyArrive(t *testing.T) {
	events := []string{
		": keep-alive\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n",
		"event: message\r\nid: 7\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\r\n\r\n",
		"data: [DONE]\n\n",
	}
	next := make(chan struct{})
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.WriteHeader(200)
		for _, e := range events {
			io.WriteString(w, e)
			w.(http.Flusher).Flush()
			// The next event is written only once the client has read this
			// one: a reader that waited for more would hang here.
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
	})
	resp, err := newTestClient(Options{}).Send(context.Background(), vendorAt(s), "/chat/completions", []byte(`{}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ev := resp.Events()
	var out bytes.Buffer
	for i, want := range events {
		e, err := ev.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		var one bytes.Buffer
		WriteEvent(&one, e)
		if one.String() != want {
			t.Errorf("event %d = %q, want %q", i, one.String(), want)
		}
		out.Write(one.Bytes())
		if i == len(events)-1 && !IsDone(e) {
			t.Error("last event is not [DONE]")
		}
		next <- struct{}{}
	}
	if _, err := ev.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("after the last event: %v, want io.EOF", err)
	}
	if out.String() != strings.Join(events, "") {
		t.Error("re-serialised stream differs from what was sent")
	}
}

func TestSendUnknownKind(t *testing.T) {
	_, err := newTestClient(Options{}).Send(context.Background(), Target{Kind: "gpu", ID: "x", BaseURL: "http://10.0.0.1"}, "/models", nil, nil)
	if err == nil {
		t.Fatal("unknown target kind accepted")
	}
}

func TestTargetLabel(t *testing.T) {
	for _, tt := range []struct {
		t    Target
		want string
	}{
		{Target{Kind: TargetVendor, ID: "openai"}, "vendor:openai"},
		{Target{Kind: TargetNode, ID: "anna-mac"}, "node:anna-mac"},
	} {
		if got := tt.t.Label(); got != tt.want {
			t.Errorf("Label() = %q, want %q", got, tt.want)
		}
	}
}
