// Package front is the engine front: the only door from the gateway into the
// node. It serves the four OpenAI routes the gateway uses — POST
// /v1/chat/completions, /v1/completions, /v1/embeddings and GET /v1/models —
// to callers presenting the node key, and forwards them to the local engine.
//
// Everything else is 404, so that a node key, should it leak, cannot pull,
// delete or copy models or reach an engine's native API (Ollama's /api/*).
// The node key stops here: the engine never sees it, and an engine started
// with an API key of its own gets that one instead.
//
// The front counts the requests it is serving, for the heartbeat and the
// drain: once Drain is called it answers new requests 503, so the gateway
// moves them elsewhere, and Wait returns when the last one in flight ends.
package front

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"
)

// allowed reports the only method and path pairs forwarded to the engine.
func allowed(method, path string) bool {
	switch path {
	case "/v1/chat/completions", "/v1/completions", "/v1/embeddings":
		return method == http.MethodPost
	case "/v1/models":
		return method == http.MethodGet
	}
	return false
}

// Options configure a Front.
type Options struct {
	// EngineURL is the engine's root (http://127.0.0.1:11434); the request
	// path is appended to it. A trailing /v1 is dropped, as operators often
	// copy the OpenAI base URL.
	EngineURL string
	// NodeKey is what callers must present as "Authorization: Bearer …".
	NodeKey string
	// EngineAPIKey, when set, is sent to the engine as its bearer token, for
	// engines started with an API key (vllm --api-key).
	EngineAPIKey string
	// Transport reaches the engine; nil means one without a proxy, since the
	// engine runs beside the agent.
	Transport http.RoundTripper
	Logger    *slog.Logger
}

// Front is the engine front's handler. Its methods are safe for concurrent
// use.
type Front struct {
	keyHash [sha256.Size]byte
	proxy   *httputil.ReverseProxy
	logger  *slog.Logger

	mu       sync.Mutex
	inFlight int
	draining bool
	idle     chan struct{} // made by Drain, closed when inFlight reaches 0
}

var _ http.Handler = (*Front)(nil)

// New returns the front for o; the engine URL must be http or https.
func New(o Options) (*Front, error) {
	target, err := url.Parse(strings.TrimSpace(o.EngineURL))
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		return nil, fmt.Errorf("engine URL %q: want an http:// or https:// URL with a host", o.EngineURL)
	}
	target.Path = strings.TrimSuffix(strings.TrimSuffix(target.Path, "/"), "/v1")
	target.RawPath, target.RawQuery, target.Fragment = "", "", ""
	if o.NodeKey == "" {
		return nil, errors.New("front: a node key is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Transport == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil
		tr.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		// Many concurrent streams to one engine: keep their connections.
		tr.MaxIdleConnsPerHost = 64
		o.Transport = tr
	}
	f := &Front{keyHash: sha256.Sum256([]byte(o.NodeKey)), logger: o.Logger}
	engineKey := o.EngineAPIKey
	f.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			// The node key is for this door only.
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("Proxy-Authorization")
			if engineKey != "" {
				pr.Out.Header.Set("Authorization", "Bearer "+engineKey)
			}
		},
		Transport: o.Transport,
		// Every write reaches the gateway at once: tokens stream as the
		// engine makes them.
		FlushInterval: -1,
		ErrorHandler:  f.engineFailed,
	}
	return f, nil
}

// ServeHTTP serves the allow-listed routes to callers with the node key.
func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte("ok\n"))
		return
	}
	if !allowed(r.Method, r.URL.Path) {
		writeError(w, http.StatusNotFound, "invalid_request_error", "not_found",
			"this node serves only POST /v1/chat/completions, POST /v1/completions, POST /v1/embeddings and GET /v1/models")
		return
	}
	if msg := f.checkKey(r); msg != "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="switchyard-node"`)
		writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", msg)
		return
	}
	if !f.enter() {
		writeError(w, http.StatusServiceUnavailable, "server_error", "node_draining",
			"this node is shutting down and takes no new requests")
		return
	}
	defer f.leave()
	// The request body is still being copied to the engine when the
	// engine's first bytes come back and are flushed. An HTTP/1 server
	// closes the request body at its first write unless told otherwise,
	// and the transport then drops the engine connection mid-answer.
	_ = http.NewResponseController(w).EnableFullDuplex()
	f.proxy.ServeHTTP(w, r)
}

// checkKey returns "" for the node key, else what is wrong, in words that
// never repeat what was sent.
func (f *Front) checkKey(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "missing node key: send Authorization: Bearer syn_…"
	}
	scheme, key, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "the Authorization header must be Bearer <node key>"
	}
	// Comparing digests takes the same time whatever the lengths, so the
	// answer's timing tells nothing about the key.
	sum := sha256.Sum256([]byte(strings.TrimSpace(key)))
	if subtle.ConstantTimeCompare(sum[:], f.keyHash[:]) != 1 {
		return "this is not this node's key"
	}
	return ""
}

// enter counts a request in, unless the front is draining.
func (f *Front) enter() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.draining {
		return false
	}
	f.inFlight++
	return true
}

func (f *Front) leave() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inFlight--
	if f.draining && f.inFlight == 0 {
		close(f.idle)
	}
}

// InFlight reports the requests being served now.
func (f *Front) InFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inFlight
}

// Drain makes the front answer new requests 503 while those in flight go on.
// It cannot be undone: it is the start of shutting down.
func (f *Front) Drain() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.draining {
		return
	}
	f.draining = true
	f.idle = make(chan struct{})
	if f.inFlight == 0 {
		close(f.idle)
	}
}

// Draining reports whether Drain was called.
func (f *Front) Draining() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.draining
}

// Wait drains the front and returns when no request is in flight, or with
// ctx's error and the number still running when ctx ends first.
func (f *Front) Wait(ctx context.Context) (int, error) {
	f.Drain()
	f.mu.Lock()
	idle := f.idle
	f.mu.Unlock()
	select {
	case <-idle:
		return 0, nil
	case <-ctx.Done():
		return f.InFlight(), ctx.Err()
	}
}

// engineFailed answers when the engine could not be reached or broke off.
func (f *Front) engineFailed(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		// The gateway went away; there is no one to answer.
		return
	}
	f.logger.Warn("the engine did not answer a forwarded request", "path", r.URL.Path, "error", err)
	writeError(w, http.StatusBadGateway, "server_error", "engine_unavailable", "the node's engine did not answer")
}

// writeError writes an OpenAI-style error body.
func writeError(w http.ResponseWriter, code int, typ, errCode, msg string) {
	body, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": msg, "type": typ, "param": nil, "code": errCode,
	}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
}

// NewServer wraps h in an http.Server with the timeouts an exposed listener
// needs. It has no write timeout: a long generation streams for minutes.
func NewServer(h http.Handler, logger *slog.Logger) *http.Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}
