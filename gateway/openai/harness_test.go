package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/gateway/auth"
	"github.com/switchyard-ai/switchyard/gateway/catalog"
	"github.com/switchyard-ai/switchyard/gateway/metrics"
	"github.com/switchyard-ai/switchyard/gateway/openai"
	"github.com/switchyard-ai/switchyard/gateway/redisstate"
	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/gateway/store/memory"
	"github.com/switchyard-ai/switchyard/gateway/upstream"
	"github.com/switchyard-ai/switchyard/internal/simengine"
	"github.com/switchyard-ai/switchyard/internal/testenv"
	"github.com/switchyard-ai/switchyard/keyring"
)

var actor = store.Actor{KeyID: "test"}

// logBuffer collects log lines from concurrent requests.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// meter records usage events as the metering writer would receive them.
type meter struct {
	mu     sync.Mutex
	events []store.UsageEvent
}

func (m *meter) Emit(e store.UsageEvent) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, e)
	return true
}

func (m *meter) all() []store.UsageEvent {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]store.UsageEvent(nil), m.events...)
}

// vendor is a simulated cloud vendor: a simengine behind a counting door.
type vendor struct {
	id     string
	engine *simengine.Engine
	srv    *httptest.Server
	hits   atomic.Int64
	key    string
}

// env is a gateway request path over real parts: the memory store, the
// keyring, the catalog, the key resolver, the upstream client, Redis limits.
type env struct {
	t       *testing.T
	store   *memory.Memory
	kr      *keyring.Keyring
	catalog *catalog.Catalog
	reg     *prometheus.Registry
	logs    *logBuffer
	meter   *meter
	up      *upstream.Client
	srv     *httptest.Server
	tenant  string
	key     string // the tenant's client key
	vendors map[string]*vendor
}

type envOptions struct {
	redis        bool
	breakerPause time.Duration
	idle         time.Duration
	firstByte    time.Duration
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	k, _ := keyring.Generate()
	kr, err := keyring.Parse("1:"+k, "")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, store: memory.New(), kr: kr, reg: prometheus.NewRegistry(), logs: &logBuffer{}, meter: &meter{}, vendors: map[string]*vendor{}, tenant: "acme"}
	logger := slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := context.Background()
	if _, err := e.store.UpsertTenant(ctx, actor, store.Tenant{ID: e.tenant}); err != nil {
		t.Fatal(err)
	}
	e.key = e.mintClientKey(e.tenant)

	m := metrics.New(e.reg)
	if o.breakerPause == 0 {
		o.breakerPause = 30 * time.Second
	}
	e.up = upstream.New(upstream.Options{
		Logger: logger, NodeNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		BreakerPause: o.breakerPause, IdleTimeout: o.idle,
	})
	t.Cleanup(e.up.Close)
	e.catalog = catalog.New(e.store, kr, catalog.Options{Logger: logger, OnVendorChanged: e.up.ResetVendor})
	var rs *redisstate.Redis
	if o.redis {
		client, prefix := testenv.Redis(t)
		rs = redisstate.New(client, redisstate.Options{Prefix: prefix})
	}
	h := openai.New(openai.Options{
		Logger:           logger,
		Metrics:          m,
		Keys:             auth.NewResolver(e.store, auth.ResolverOptions{Version: e.catalog.Version}),
		Config:           e.catalog,
		Limits:           redisstate.NewLimiter(rs, redisstate.LimiterOptions{BudgetOnFailure: "open"}),
		Sender:           e.up,
		Meter:            e.meter,
		FirstByteTimeout: o.firstByte,
	})
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	return e
}

func (e *env) mintClientKey(tenant string) string {
	e.t.Helper()
	m, err := auth.Mint(auth.Client)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.CreateKey(context.Background(), actor, store.Key{ID: m.ID, Kind: store.KeyClient, TenantID: tenant, SecretHash: m.SecretHash}); err != nil {
		e.t.Fatal(err)
	}
	return m.Plaintext
}

// addVendor starts a simulated vendor serving models and registers it.
func (e *env) addVendor(id string, cfg simengine.Config) *vendor {
	e.t.Helper()
	v := &vendor{id: id, engine: simengine.New(cfg, nil), key: "sk-canary-" + id + "-7f3a9c1e5b2d"}
	h := v.engine.Handler()
	v.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v.hits.Add(1)
		h.ServeHTTP(w, r)
	}))
	e.t.Cleanup(v.srv.Close)
	e.registerVendor(id, v.srv.URL+"/v1", v.key)
	e.vendors[id] = v
	return v
}

func (e *env) registerVendor(id, baseURL, key string) {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.store.UpsertVendor(ctx, actor, store.Vendor{ID: id, BaseURL: baseURL, Enabled: true}); err != nil {
		e.t.Fatal(err)
	}
	sealed, err := e.kr.Seal([]byte(key), "vendors", id, "api_key_sealed")
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.SetVendorKey(ctx, actor, id, sealed, e.kr.Primary()); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) addModel(m store.Model) {
	e.t.Helper()
	m.Enabled = true
	if _, err := e.store.UpsertModel(context.Background(), actor, m); err != nil {
		e.t.Fatal(err)
	}
}

// reload makes the catalog take the store's latest configuration.
func (e *env) reload() {
	e.t.Helper()
	if err := e.catalog.Load(context.Background(), false); err != nil {
		e.t.Fatal(err)
	}
}

type response struct {
	status int
	header http.Header
	body   string
	json   map[string]any
}

func (e *env) post(path, key string, body any, hdr ...string) response {
	e.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest("POST", e.srv.URL+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := response{status: resp.StatusCode, header: resp.Header, body: string(raw)}
	_ = json.Unmarshal(raw, &out.json)
	return out
}

func (r response) errorCode() string {
	if e, ok := r.json["error"].(map[string]any); ok {
		c, _ := e["code"].(string)
		return c
	}
	return ""
}

func (r response) errorMessage() string {
	if e, ok := r.json["error"].(map[string]any); ok {
		m, _ := e["message"].(string)
		return m
	}
	return ""
}

func chat(model string, extra ...any) map[string]any {
	m := map[string]any{"model": model, "messages": []map[string]any{{"role": "user", "content": "hello there"}}}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	return m
}

// metricValue sums the samples of a metric whose labels include want.
func (e *env) metricValue(name string, want map[string]string) float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// metricsText returns the registry's exposition.
func (e *env) metricsText() string {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		b.WriteString(mf.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// newRawUpstream answers every call with the given SSE body, as is.
func newRawUpstream(t *testing.T, body string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(s.Close)
	return s
}
