package openai_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/gateway/auth"
	"github.com/switchyard-ai/switchyard/gateway/catalog"
	"github.com/switchyard-ai/switchyard/gateway/metrics"
	"github.com/switchyard-ai/switchyard/gateway/openai"
	"github.com/switchyard-ai/switchyard/gateway/redisstate"
	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/gateway/store/memory"
	"github.com/switchyard-ai/switchyard/gateway/upstream"
	"github.com/switchyard-ai/switchyard/keyring"
)

// cannedSender answers at once, so that a benchmark measures the gateway's
// own work: auth (cache hit), parse, route, limit check, body rewrite,
// response handling, metering and metrics.
type cannedSender struct{ body string }

func (c cannedSender) Send(_ context.Context, _ upstream.Target, _ string, _ []byte, _ http.Header) (*upstream.Response, error) {
	return &upstream.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(c.body))}, nil
}

type discardMeter struct{}

func (discardMeter) Emit(store.UsageEvent) bool { return true }

func BenchmarkHotPath(b *testing.B) {
	st := memory.New()
	ctx := context.Background()
	k, _ := keyring.Generate()
	kr, _ := keyring.Parse("1:"+k, "")
	_, _ = st.UpsertTenant(ctx, actor, store.Tenant{ID: "acme", RequestsPerMinute: 1 << 40})
	m, _ := auth.Mint(auth.Client)
	_, _ = st.CreateKey(ctx, actor, store.Key{ID: m.ID, Kind: store.KeyClient, TenantID: "acme", SecretHash: m.SecretHash})
	_, _ = st.UpsertVendor(ctx, actor, store.Vendor{ID: "openai", BaseURL: "http://127.0.0.1:1/v1", Enabled: true})
	sealed, _ := kr.Seal([]byte("sk-x"), "vendors", "openai", "api_key_sealed")
	_, _ = st.SetVendorKey(ctx, actor, "openai", sealed, 1)
	for _, id := range []string{"gpt-4o", "gpt-4o-mini", "o3", "claude", "llama"} {
		_, _ = st.UpsertModel(ctx, actor, store.Model{ID: id, Vendor: "openai", Enabled: true})
	}
	cat := catalog.New(st, kr, catalog.Options{})
	if err := cat.Load(ctx, true); err != nil {
		b.Fatal(err)
	}
	h := openai.New(openai.Options{
		Metrics: metrics.New(nil),
		Keys:    auth.NewResolver(st, auth.ResolverOptions{Version: cat.Version}),
		Config:  cat,
		Limits:  redisstate.NewLimiter(nil, redisstate.LimiterOptions{}),
		Sender: cannedSender{body: `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],` +
			`"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`},
		Meter: discardMeter{},
	})
	body := `{"model":"gpt-4o","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hi to the benchmark."}],"max_tokens":16,"temperature":0.2}`
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+m.Plaintext)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("status %d: %s", w.Code, w.Body.String())
		}
	}
}

// BenchmarkHarnessOnly measures what BenchmarkHotPath spends outside the
// gateway (building the request and the recorder, the canned answer), to
// be subtracted from it.
func BenchmarkHarnessOnly(b *testing.B) {
	s := cannedSender{body: `{"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`}
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer x")
		w := httptest.NewRecorder()
		resp, _ := s.Send(req.Context(), upstream.Target{}, "", nil, nil)
		_, _ = io.Copy(w, resp.Body)
	}
}
