package simengine

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestControlEndpoint(t *testing.T) {
	e, srv := newEngine(t, Config{Models: []string{"m"}, TPS: 5, Slots: 2})
	var kn Knobs
	getJSON(t, srv.URL+"/sim/config", &kn)
	if *kn.TPS != 5 || *kn.Slots != 2 || *kn.CutAfter != -1 || *kn.FailRate != 0 {
		t.Fatalf("initial knobs: %+v", kn)
	}

	tests := []struct {
		name       string
		body       string
		wantStatus int
		check      func(k knobs) bool
	}{
		{"durations as strings", `{"ttft": "250ms", "latency": "60ms", "ttft_per_1k_input": "1s"}`, 200,
			func(k knobs) bool {
				return k.ttft == 250*time.Millisecond && k.latency == 60*time.Millisecond && k.ttftPer1k == time.Second
			}},
		{"durations as milliseconds", `{"ttft": 40}`, 200, func(k knobs) bool { return k.ttft == 40*time.Millisecond }},
		{"rates and slots", `{"tps": 0, "fail_rate": 0.25, "slots": 0}`, 200,
			func(k knobs) bool { return k.tps == 0 && k.failRate == 0.25 && k.slots == 0 }},
		{"stall and cut", `{"stall_after": {"chunks": 3, "for": "2s"}, "cut_after": 7}`, 200,
			func(k knobs) bool { return k.stallAfter == 3 && k.stallFor == 2*time.Second && k.cutAfter == 7 }},
		{"429 window", `{"reject_429": {"for": "1m", "retry_after": "5s"}}`, 200,
			func(k knobs) bool { return time.Until(k.rejectUntil) > 50*time.Second && k.retryAfter == 5*time.Second }},
		{"close the window", `{"reject_429": {"for": 0}}`, 200, func(k knobs) bool { return k.rejectUntil.IsZero() }},
		{"absent fields are kept", `{}`, 200, func(k knobs) bool { return k.cutAfter == 7 && k.failRate == 0.25 }},
		{"bad rate", `{"fail_rate": 2}`, 400, nil},
		{"negative slots", `{"slots": -1}`, 400, nil},
		{"negative duration", `{"ttft": "-1s"}`, 400, nil},
		{"misspelt knob", `{"ttfft": "1s"}`, 400, nil},
		{"not JSON", `ttft=1s`, 400, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := e.snapshot()
			status, resp := call(t, srv.URL+"/sim/config", tc.body)
			if status != tc.wantStatus {
				t.Fatalf("status %d, want %d: %v", status, tc.wantStatus, resp)
			}
			after, _ := e.snapshot()
			if tc.check == nil {
				if after != before {
					t.Errorf("a refused change applied: %+v → %+v", before, after)
				}
				return
			}
			if !tc.check(after) {
				t.Errorf("knobs after %s: %+v", tc.body, after)
			}
		})
	}
}

func TestStatsEndpoint(t *testing.T) {
	e, srv := newEngine(t, Config{Models: []string{"a", "b"}})
	call(t, srv.URL+"/v1/chat/completions", chatBody("a", "one two", map[string]any{"max_tokens": 4}))
	e.Reject429(time.Hour, 0)
	call(t, srv.URL+"/v1/chat/completions", chatBody("b", "x", nil))
	var raw map[string]any
	getJSON(t, srv.URL+"/sim/stats", &raw)
	for _, key := range []string{"running", "waiting", "served", "rejected", "by_model", "last_request_headers", "last_request_body_json"} {
		if _, ok := raw[key]; !ok {
			t.Errorf("stats lack %q: %v", key, raw)
		}
	}
	if num(raw["served"]) != 1 || num(raw["rejected"]) != 1 ||
		num(path(raw, "by_model", "a", "completion_tokens")) != 4 || num(path(raw, "by_model", "a", "prompt_tokens")) != 9 ||
		num(path(raw, "by_model", "b", "rejected")) != 1 {
		t.Errorf("stats: %v", raw)
	}
}

// TestMainCommand starts the command in-process on a free port, reads its
// announcement, serves a request and stops it.
func TestMainCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdoutR, stdoutW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- Main(ctx, []string{"--listen", "127.0.0.1:0", "--model", "a, b", "--flavor", "vllm", "--slots", "2",
			"--max-tokens", "3", "--log-level", "warn"}, stdoutW, io.Discard)
		stdoutW.Close()
	}()
	line, err := bufio.NewReader(stdoutR).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the announcement: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdoutR) }()
	url, rest, ok := strings.Cut(strings.TrimPrefix(line, "simengine listening on "), " ")
	if !ok || !strings.HasPrefix(url, "http://127.0.0.1:") || rest != "(flavor vllm, models a,b)\n" {
		t.Fatalf("announcement %q", line)
	}
	status, resp := call(t, url+"/v1/chat/completions", chatBody("b", "hi", nil))
	if status != http.StatusOK || num(path(resp, "usage", "completion_tokens")) != 3 {
		t.Errorf("chat: %d %v", status, resp)
	}
	var kn Knobs
	getJSON(t, url+"/sim/config", &kn)
	if *kn.Slots != 2 {
		t.Errorf("slots %d", *kn.Slots)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Main returned %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Main did not return after its context ended")
	}
}

func TestMainFlagErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no model", []string{"--listen", "127.0.0.1:0"}, "--model"},
		{"bad flavor", []string{"--model", "m", "--flavor", "triton"}, "--flavor"},
		{"bad rate", []string{"--model", "m", "--fail-rate", "1.5"}, "--fail-rate"},
		{"bad level", []string{"--model", "m", "--log-level", "loud"}, "--log-level"},
		{"unknown flag", []string{"--model", "m", "--gpus", "2"}, "gpus"},
		{"stray argument", []string{"--model", "m", "serve"}, "unexpected"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Main(t.Context(), tc.args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

func TestNewDefaultsAndPanics(t *testing.T) {
	e := New(Config{Models: []string{"m", "m", ""}}, nil)
	if e.Flavor() != FlavorOpenAI || len(e.Models()) != 1 || e.contextWindow != DefaultContextWindow ||
		e.defaultMaxTokens != DefaultMaxTokens || e.embeddingDim != DefaultEmbeddingDim {
		t.Errorf("defaults: flavor %s models %v", e.Flavor(), e.Models())
	}
	defer func() {
		if recover() == nil {
			t.Error("New accepted an unknown flavour")
		}
	}()
	New(Config{Flavor: "triton"}, nil)
}

func TestDurationJSON(t *testing.T) {
	for in, want := range map[string]time.Duration{`"1.5s"`: 1500 * time.Millisecond, `250`: 250 * time.Millisecond, `0.5`: 500 * time.Microsecond} {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err != nil || time.Duration(d) != want {
			t.Errorf("%s: %v %v", in, time.Duration(d), err)
		}
	}
	var d Duration
	if err := json.Unmarshal([]byte(`"soon"`), &d); err == nil {
		t.Error(`accepted "soon"`)
	}
	if b, _ := json.Marshal(Duration(time.Second)); string(b) != `"1s"` {
		t.Errorf("marshalled as %s", b)
	}
}
