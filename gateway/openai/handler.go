// Package openai serves Switchyard's OpenAI-compatible API: authentication,
// routing to a chain of candidates, limits, the proxy itself (streaming
// passed through chunk by chunk), fallbacks, metering, metrics and the
// one log line per request. It is the one place where the request path's
// errors become OpenAI error JSON with the stable codes of the SPEC.
package openai

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/switchyard-ai/switchyard/gateway/auth"
	"github.com/switchyard-ai/switchyard/gateway/catalog"
	"github.com/switchyard-ai/switchyard/gateway/metrics"
	"github.com/switchyard-ai/switchyard/gateway/redisstate"
	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/gateway/upstream"
)

// KeyResolver authenticates client keys.
type KeyResolver interface {
	Resolve(ctx context.Context, presented string, want auth.Kind) (store.Key, error)
}

// Config hands out the current configuration snapshot.
type Config interface {
	Current() *catalog.Snapshot
}

// Limiter enforces tenant limits and budgets.
type Limiter interface {
	Admit(ctx context.Context, t store.Tenant) (redisstate.Decision, error)
	Record(ctx context.Context, tenantID string, tokens int64, costUSD float64)
}

// Sender makes one upstream call.
type Sender interface {
	Send(ctx context.Context, t upstream.Target, path string, body []byte, in http.Header) (*upstream.Response, error)
}

// Meter takes one usage event per call; it never blocks.
type Meter interface {
	Emit(e store.UsageEvent) bool
}

// NodeRequest asks for a node to serve one request of a local model.
type NodeRequest struct {
	Model           store.Model
	InputTokens     int
	MaxOutputTokens int
	Interactive     bool
}

// NodeResult is how a call on a node went, for the node's speed figures
// and health.
type NodeResult struct {
	// Failed is set when the node did not answer (before the first byte).
	Failed       bool
	Status       int
	InputTokens  int
	OutputTokens int
	TTFT         time.Duration // zero when unknown
	Generation   time.Duration // from the first token to the last
}

// NodeLease is a slot held on a node for one call.
type NodeLease interface {
	Target() upstream.Target
	// Done releases the slot and reports the outcome.
	Done(r NodeResult)
}

// NodePlacer chooses a node and takes a slot on it (SPEC §4.4–4.6). Its
// refusal is a *scheduler.Rejection (errors.As), whose reason becomes the
// fallback reason and whose expected wait becomes Retry-After.
type NodePlacer interface {
	Place(ctx context.Context, req NodeRequest) (NodeLease, error)
}

// Options wire a Handler. Keys, Config, Sender are required; the rest may
// be nil (no limits, no metering, no nodes, no metrics).
type Options struct {
	Logger       *slog.Logger
	Metrics      *metrics.Metrics
	Keys         KeyResolver
	Config       Config
	Limits       Limiter
	Sender       Sender
	Meter        Meter
	Nodes        NodePlacer
	MaxBodyBytes int64 // default 8 MiB
	// FirstByteTimeout bounds the wait for an upstream's answer headers
	// (default 60 s).
	FirstByteTimeout time.Duration
	Now              func() time.Time
}

// Handler is the OpenAI-compatible API.
type Handler struct {
	o   Options
	mux *http.ServeMux
}

// DefaultMaxBodyBytes is the largest request body accepted by default.
const DefaultMaxBodyBytes = 8 << 20

// New returns the API handler: /v1/chat/completions, /v1/completions,
// /v1/embeddings and /v1/models.
func New(o Options) *Handler {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.FirstByteTimeout <= 0 {
		o.FirstByteTimeout = upstream.DefaultFirstByteTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Metrics == nil {
		o.Metrics = metrics.New(nil)
	}
	h := &Handler{o: o, mux: http.NewServeMux()}
	h.mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { h.serveCall(w, r, endpointChat) })
	h.mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { h.serveCall(w, r, endpointCompletions) })
	h.mux.HandleFunc("POST /v1/embeddings", func(w http.ResponseWriter, r *http.Request) { h.serveCall(w, r, endpointEmbeddings) })
	h.mux.HandleFunc("GET /v1/models", h.serveModels)
	h.mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", requestID(r))
		writeError(w, &apiError{status: http.StatusNotFound, code: CodeInvalidRequest,
			message: "unknown route " + r.Method + " " + r.URL.Path + "; this gateway serves POST /v1/chat/completions, /v1/completions, /v1/embeddings and GET /v1/models"})
	})
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// authenticate resolves the client's key to its tenant.
func (h *Handler) authenticate(ctx context.Context, r *http.Request, snap *catalog.Snapshot) (store.Key, store.Tenant, *apiError) {
	if snap.Version < 0 {
		// No configuration loaded yet (the database was down at start-up):
		// no key can be trusted, none is refused as invalid either.
		return store.Key{}, store.Tenant{}, &apiError{status: http.StatusServiceUnavailable, code: CodeAuthUnavailable, retryAfter: 5 * time.Second,
			message: "the gateway is starting and cannot check keys yet; retry shortly"}
	}
	presented := auth.FromHeader(r.Header.Get("Authorization"))
	if presented == "" {
		presented = r.Header.Get("Api-Key")
	}
	k, err := h.o.Keys.Resolve(ctx, presented, auth.Client)
	switch {
	case errors.Is(err, auth.ErrMissingKey):
		return k, store.Tenant{}, &apiError{status: http.StatusUnauthorized, code: CodeInvalidAPIKey,
			message: "missing API key: send it as `Authorization: Bearer syk_…`"}
	case errors.Is(err, auth.ErrRevokedKey):
		return k, store.Tenant{}, &apiError{status: http.StatusUnauthorized, code: CodeInvalidAPIKey, message: "this API key has been revoked"}
	case errors.Is(err, auth.ErrInvalidKey):
		return k, store.Tenant{}, &apiError{status: http.StatusUnauthorized, code: CodeInvalidAPIKey, message: "invalid API key"}
	case errors.Is(err, auth.ErrUnavailable):
		return k, store.Tenant{}, &apiError{status: http.StatusServiceUnavailable, code: CodeAuthUnavailable, retryAfter: 5 * time.Second,
			message: "the gateway cannot check this key right now; retry shortly"}
	case err != nil:
		return k, store.Tenant{}, &apiError{status: http.StatusServiceUnavailable, code: CodeAuthUnavailable, retryAfter: 5 * time.Second,
			message: "the gateway cannot check this key right now; retry shortly"}
	}
	t, ok := snap.Tenants[k.TenantID]
	if !ok {
		// The key outlived its tenant in a cache: the tenant is gone.
		return k, store.Tenant{}, &apiError{status: http.StatusUnauthorized, code: CodeInvalidAPIKey, message: "invalid API key"}
	}
	return k, t, nil
}
