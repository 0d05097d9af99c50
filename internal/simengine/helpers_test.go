package simengine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// waitTimeout bounds every wait for a condition; generous, because the
// machine running the tests may be busy, and a passing test never waits it out.
const waitTimeout = 20 * time.Second

// hold is a delay long enough that a request given it stays in flight until
// the test changes a knob.
const hold = time.Hour

func newEngine(t testing.TB, cfg Config) (*Engine, *httptest.Server) {
	t.Helper()
	e := New(cfg, nil)
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	return e, srv
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

func post(ctx context.Context, url string, body any) (*http.Response, error) {
	var r io.Reader
	switch b := body.(type) {
	case string:
		r = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

// call posts body and returns the status and the decoded JSON answer.
func call(t *testing.T, url string, body any) (int, map[string]any) {
	t.Helper()
	resp, err := post(t.Context(), url, body)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, decode(t, resp.Body)
}

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading body: %v", url, err)
	}
	return resp.StatusCode, b
}

func getJSON(t *testing.T, url string, into any) {
	t.Helper()
	status, b := get(t, url)
	if status != http.StatusOK {
		t.Fatalf("GET %s: status %d: %s", url, status, b)
	}
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, b)
	}
}

func decode(t *testing.T, r io.Reader) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.NewDecoder(r).Decode(&v); err != nil {
		t.Fatalf("decoding JSON: %v", err)
	}
	return v
}

// sseStream reads a Server-Sent Events body one data line at a time.
type sseStream struct {
	sc *bufio.Scanner
}

func newSSE(r io.Reader) *sseStream {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	return &sseStream{sc: sc}
}

// next returns the next event's data, or an error: io.EOF at a clean end of
// the body, another error when the body breaks off.
func (s *sseStream) next() (string, error) {
	for s.sc.Scan() {
		line := s.sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			return "", errors.New("not an SSE data line: " + line)
		}
		return data, nil
	}
	if err := s.sc.Err(); err != nil {
		return "", err
	}
	return "", io.EOF
}

// streamResult is a whole stream, read to its end.
type streamResult struct {
	chunks  []map[string]any // every chunk before [DONE]
	done    bool             // [DONE] was received, and was the last event
	readErr error            // how the body ended, if not cleanly
}

func readStream(t *testing.T, body io.Reader) streamResult {
	t.Helper()
	var res streamResult
	s := newSSE(body)
	for {
		data, err := s.next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				res.readErr = err
			}
			return res
		}
		if res.done {
			t.Fatalf("event after [DONE]: %s", data)
		}
		if data == "[DONE]" {
			res.done = true
			continue
		}
		var c map[string]any
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk is not JSON: %v: %s", err, data)
		}
		res.chunks = append(res.chunks, c)
	}
}

// path walks decoded JSON: path(v, "choices", 0, "message", "content").
func path(v any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

func num(v any) int {
	f, _ := v.(float64)
	return int(f)
}

func chatBody(model, content string, extra map[string]any) map[string]any {
	b := map[string]any{"model": model, "messages": []map[string]any{{"role": "user", "content": content}}}
	for k, v := range extra {
		b[k] = v
	}
	return b
}
