package openai

import (
	"encoding/json"
	"testing"
)

// FuzzParseRequest: whatever the body, parsing never panics; an accepted
// request has a model, and the body rebuilt for an upstream is valid JSON
// carrying the upstream model name and no gateway-only field.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"auto:nodes-only:high","stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"data:,"}}]}],"tools":[{"type":"function"}]}`,
		`{"model":"m","prompt":["a","b",[1,2,3]],"max_tokens":5,"placement":"cloud-first"}`,
		`{"model":"e","input":"x"}`,
		`{"model":"m","stream":true,"stream_options":{"include_usage":false,"extra":1},"messages":[]}`,
		`[`,
		`{"model":1}`,
		`{"model":"m","messages":"not an array"}`,
		`{"model":"m","max_tokens":-1,"messages":[]}`,
		"{\"model\":\"m\",\n\"messages\":[{\"content\":\"\\u0000\"}]}",
	} {
		f.Add(uint8(0), []byte(s))
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		ep := endpoint(int(which) % 3)
		r, aerr := parseRequest(ep, body)
		if aerr != nil {
			if aerr.status != 400 || aerr.code != CodeInvalidRequest || aerr.message == "" {
				t.Fatalf("bad error %+v", aerr)
			}
			return
		}
		if r.model == "" {
			t.Fatal("accepted without a model")
		}
		if r.inputTokens < 0 || r.maxTokens < 0 {
			t.Fatalf("negative figures %+v", r)
		}
		out, err := r.upstreamBody("upstream-name")
		if err != nil {
			t.Fatalf("upstreamBody: %v", err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("rebuilt body is not JSON: %v", err)
		}
		if string(m["model"]) != `"upstream-name"` {
			t.Fatalf("model = %s", m["model"])
		}
		if _, ok := m["placement"]; ok {
			t.Fatal("placement forwarded")
		}
		if r.stream && ep != endpointEmbeddings {
			var so struct {
				IncludeUsage bool `json:"include_usage"`
			}
			if json.Unmarshal(m["stream_options"], &so) != nil || !so.IncludeUsage {
				t.Fatalf("stream without include_usage upstream: %s", m["stream_options"])
			}
		}
	})
}
