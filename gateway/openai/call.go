package openai

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/gateway/catalog"
	"github.com/switchyard-ai/switchyard/gateway/route"
	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/gateway/upstream"
	"github.com/switchyard-ai/switchyard/scheduler"
)

// call is everything one request collects on its way, for the response
// headers, the metering event, the metrics and the log line.
type call struct {
	ep        endpoint
	start     time.Time
	requestID string
	key       store.Key
	tenant    store.Tenant
	authed    bool
	req       *request

	model     store.Model // the model that served (or was last tried)
	target    string      // node:<id> or vendor:<id>
	fallbacks []string    // "<model>=<reason>" for every candidate passed over
	status    int
	code      string

	ttft         time.Duration
	sent         time.Time     // when the serving candidate was called
	upstreamWait time.Duration // time blocked on the upstream: headers and body reads
	inputTokens  int
	outputTokens int
	estimated    bool
	attrs        map[string]string
}

// maxResponseBytes bounds a non-streaming answer the gateway holds to read
// its usage; embeddings of big batches are the largest legitimate ones.
const maxResponseBytes = 64 << 20

func (h *Handler) serveCall(w http.ResponseWriter, r *http.Request, ep endpoint) {
	c := &call{ep: ep, start: h.o.Now(), requestID: requestID(r)}
	w.Header().Set("X-Request-Id", c.requestID)
	h.o.Metrics.InFlight.WithLabelValues(ep.String()).Inc()
	defer h.o.Metrics.InFlight.WithLabelValues(ep.String()).Dec()
	defer h.finish(r.Context(), c)

	if aerr := h.run(w, r, c); aerr != nil {
		c.status, c.code = aerr.status, aerr.code
		writeError(w, aerr)
	}
}

// run is the request pipeline of SPEC §3.3. It returns an error for the
// client only while nothing has been written yet.
func (h *Handler) run(w http.ResponseWriter, r *http.Request, c *call) *apiError {
	ctx := r.Context()
	body, aerr := h.readBody(w, r)
	if aerr != nil {
		return aerr
	}
	req, aerr := parseRequest(c.ep, body)
	if aerr != nil {
		return aerr
	}
	c.req = req
	snap := h.o.Config.Current()
	key, tenant, aerr := h.authenticate(ctx, r, snap)
	if aerr != nil {
		return aerr
	}
	c.key, c.tenant, c.authed = key, tenant, true
	c.attrs = attributes(r.Header)

	spec, err := route.Resolve(req.model,
		route.Hints{Policy: req.placement, Effort: req.reasoningEffort},
		route.Hints{Policy: r.Header.Get("X-Switchyard-Policy"), Effort: r.Header.Get("X-Switchyard-Effort")},
		snap.Routes.Registered)
	if err != nil {
		return routeError(err)
	}
	chain, err := snap.Routes.Chain(spec, tenant, req.needs(c.ep))
	if err != nil {
		return routeError(err)
	}
	c.model = chain[0].Model

	if h.o.Limits != nil {
		d, err := h.o.Limits.Admit(ctx, tenant)
		if err != nil {
			h.o.Logger.WarnContext(ctx, "limit check failed; admitting", slog.String("request_id", c.requestID), slog.String("error", err.Error()))
		} else if !d.Allowed {
			h.o.Metrics.LimitRejections.WithLabelValues(tenant.ID, d.Limit).Inc()
			status := http.StatusTooManyRequests
			return &apiError{status: status, code: d.Code, retryAfter: d.RetryAfter,
				message: fmt.Sprintf("tenant %q is over its %s; retry after %ds", tenant.ID, d.Limit, retryAfterSeconds(d.RetryAfter))}
		}
	}
	return h.serveChain(ctx, w, r, c, snap, spec, chain)
}

func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	tooBig := &apiError{status: http.StatusRequestEntityTooLarge, code: CodeInvalidRequest,
		message: fmt.Sprintf("the request body is larger than %d bytes", h.o.MaxBodyBytes)}
	if r.ContentLength > h.o.MaxBodyBytes {
		return nil, tooBig
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.o.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooBig
		}
		return nil, badRequest("the request body could not be read", "")
	}
	return b, nil
}

func routeError(err error) *apiError {
	msg := err.Error()
	switch {
	case errors.Is(err, route.ErrModelNotFound):
		return &apiError{status: http.StatusNotFound, code: CodeModelNotFound, message: msg, param: "model"}
	case errors.Is(err, route.ErrModelNotAllowed):
		return &apiError{status: http.StatusForbidden, code: CodeModelNotAllowed, message: msg, param: "model"}
	case errors.Is(err, route.ErrNoCandidate):
		return &apiError{status: http.StatusNotFound, code: CodeModelNotFound, message: msg, param: "model"}
	}
	return &apiError{status: http.StatusBadRequest, code: CodeInvalidRequest, message: msg, param: "model"}
}

// attempt is one candidate's failure before anything reached the client.
type attempt struct {
	link       route.Link
	reason     string
	retryAfter time.Duration
	err        *upstream.Error
	refused    bool // a node refusal (no slot, wait too long), not a failure
}

// serveChain tries each candidate of the chain in order until one answers.
func (h *Handler) serveChain(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call, snap *catalog.Snapshot, spec route.Spec, chain []route.Link) *apiError {
	var failed []attempt
	interactive := c.tenant.Interactive
	if v, err := strconv.ParseBool(r.Header.Get("X-Switchyard-Interactive")); err == nil {
		interactive = v
	}
	for i, link := range chain {
		c.model = link.Model
		var target upstream.Target
		var lease NodeLease
		if link.Local {
			if h.o.Nodes == nil {
				failed = append(failed, attempt{link: link, reason: "no_nodes", refused: true})
				continue
			}
			l, err := h.o.Nodes.Place(ctx, NodeRequest{
				Model: link.Model, InputTokens: c.req.inputTokens, MaxOutputTokens: c.req.maxTokens, Interactive: interactive,
			})
			if err != nil {
				a := attempt{link: link, reason: "no_node", refused: true}
				var rej *scheduler.Rejection
				if errors.As(err, &rej) {
					a.reason = string(rej.Reason)
					a.retryAfter = rej.ExpectedWait - rej.Limit
					h.o.Metrics.AdmissionRejections.WithLabelValues(link.Model.ID, string(rej.Reason)).Inc()
				} else {
					h.o.Logger.WarnContext(ctx, "node placement failed", slog.String("request_id", c.requestID), slog.String("error", err.Error()))
				}
				failed = append(failed, a)
				continue
			}
			lease = l
			target = l.Target()
		} else {
			v, ok := snap.Vendors[link.Model.Vendor]
			switch {
			case !ok || !v.Enabled:
				failed = append(failed, attempt{link: link, reason: "vendor_disabled"})
				continue
			case v.APIKey == "":
				failed = append(failed, attempt{link: link, reason: "vendor_no_key"})
				continue
			}
			target = upstream.Target{Kind: upstream.TargetVendor, ID: v.ID, BaseURL: v.BaseURL, APIKey: v.APIKey, FirstByteTimeout: h.o.FirstByteTimeout}
		}
		c.target = target.Label()
		body, err := c.req.upstreamBody(link.Upstream)
		if err != nil {
			if lease != nil {
				lease.Done(NodeResult{Failed: true})
			}
			return &apiError{status: http.StatusInternalServerError, code: CodeInternal, message: "the request could not be prepared"}
		}
		sent := h.o.Now()
		c.sent = sent
		resp, err := h.o.Sender.Send(ctx, target, c.ep.path(), body, r.Header)
		c.upstreamWait += h.o.Now().Sub(sent)
		if err != nil {
			var ue *upstream.Error
			if !errors.As(err, &ue) {
				ue = &upstream.Error{Kind: upstream.Connect, Target: target.Label(), Message: "the call failed"}
			}
			if lease != nil {
				lease.Done(NodeResult{Failed: ue.Kind != upstream.BadRequest && ue.Kind != upstream.Canceled, Status: ue.Status})
			}
			if ue.Kind == upstream.Canceled {
				return &apiError{status: statusClientClosed, code: CodeInvalidRequest, message: "the client went away"}
			}
			if !ue.Retryable() {
				return upstreamRejected(ue)
			}
			failed = append(failed, attempt{link: link, reason: string(ue.Kind), retryAfter: ue.RetryAfter, err: ue})
			h.countFallback(link, chain, i, string(ue.Kind))
			continue
		}
		h.setRouteHeaders(w, c, failed)
		h.deliver(ctx, w, c, resp, lease)
		return nil
	}
	return h.exhausted(c, spec, failed)
}

// statusClientClosed is what the log and the metering record when the
// client went away (nginx's convention); the client never sees it.
const statusClientClosed = 499

func (h *Handler) countFallback(link route.Link, chain []route.Link, i int, reason string) {
	to := "none"
	if i+1 < len(chain) {
		to = chain[i+1].Model.ID
	}
	h.o.Metrics.Fallbacks.WithLabelValues(link.Model.ID, to, reason).Inc()
}

func (h *Handler) setRouteHeaders(w http.ResponseWriter, c *call, failed []attempt) {
	hd := w.Header()
	hd.Set("X-Switchyard-Model", c.model.ID)
	hd.Set("X-Switchyard-Target", c.target)
	if len(failed) > 0 {
		parts := make([]string, 0, len(failed))
		for _, f := range failed {
			parts = append(parts, f.link.Model.ID+"="+f.reason)
		}
		c.fallbacks = parts
		hd.Set("X-Switchyard-Fallback-Reason", strings.Join(parts, ", "))
	}
}

// upstreamRejected passes on an upstream's refusal of the request itself
// (a 4xx other than 401/403/429): the client's request is at fault, and
// another candidate would refuse it too. The message is the upstream's,
// with its key already redacted.
func upstreamRejected(ue *upstream.Error) *apiError {
	status := ue.Status
	if status < 400 || status > 499 {
		status = http.StatusBadGateway
	}
	code := CodeUpstreamError
	if status == http.StatusBadRequest || status == http.StatusUnprocessableEntity {
		code = CodeInvalidRequest
	}
	return &apiError{status: status, code: code, message: ue.Target + " refused the request: " + ue.Message}
}

// exhausted answers when no candidate served: 503 no_capacity when local
// nodes were the only hope and none admitted in time, 504 when the last
// failure was a timeout, 502 otherwise.
func (h *Handler) exhausted(c *call, spec route.Spec, failed []attempt) *apiError {
	c.fallbacks = c.fallbacks[:0]
	var parts []string
	allRefused := len(failed) > 0
	var retry time.Duration
	for _, f := range failed {
		parts = append(parts, f.link.Model.ID+"="+f.reason)
		allRefused = allRefused && f.refused
		if f.retryAfter > retry {
			retry = f.retryAfter
		}
	}
	c.fallbacks = parts
	summary := strings.Join(parts, ", ")
	if allRefused || spec.Policy == route.PolicyNodesOnly {
		if retry < time.Second {
			retry = time.Second
		}
		return &apiError{status: http.StatusServiceUnavailable, code: CodeNoCapacity, retryAfter: retry,
			message: "no local node can take this request in time (" + summary + "); retry later"}
	}
	last := failed[len(failed)-1]
	if last.err != nil && last.err.Kind == upstream.Timeout {
		return &apiError{status: http.StatusGatewayTimeout, code: CodeUpstreamTimeout,
			message: "the upstream did not answer in time (" + summary + ")"}
	}
	status := http.StatusBadGateway
	if last.err != nil && last.err.Kind == upstream.Paused {
		status = http.StatusServiceUnavailable
	}
	return &apiError{status: status, code: CodeUpstreamError, retryAfter: retry,
		message: "no candidate could serve the request (" + summary + ")"}
}

// deliver copies a successful upstream answer to the client.
func (h *Handler) deliver(ctx context.Context, w http.ResponseWriter, c *call, resp *upstream.Response, lease NodeLease) {
	defer resp.Body.Close()
	copyHeaders(w.Header(), resp.Header)
	if resp.Stream {
		h.stream(ctx, w, c, resp, lease)
		return
	}
	read := h.o.Now()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	now := h.o.Now()
	c.upstreamWait += now.Sub(read)
	c.ttft = now.Sub(c.start)
	if err != nil {
		c.status, c.code = http.StatusBadGateway, CodeUpstreamError
		var ue *upstream.Error
		if errors.As(err, &ue) && ue.Kind == upstream.Canceled {
			c.status = statusClientClosed
		}
		if lease != nil {
			lease.Done(NodeResult{Failed: true})
		}
		w.Header().Del("Content-Length")
		writeError(w, &apiError{status: http.StatusBadGateway, code: CodeUpstreamError, message: "the upstream's answer broke off"})
		return
	}
	c.status = resp.Status
	if u, ok := usageOf(b); ok {
		c.inputTokens, c.outputTokens = u.PromptTokens, u.CompletionTokens
		if c.ep == endpointEmbeddings && u.PromptTokens == 0 {
			c.inputTokens = u.TotalTokens
		}
	} else {
		c.inputTokens, c.outputTokens, c.estimated = c.req.inputTokens, estimateOutput(b), true
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(resp.Status)
	_, _ = w.Write(b)
	// The answer goes out now: what follows (the slot's release, token
	// counts, metering, the log line) must not hold the client.
	_ = http.NewResponseController(w).Flush()
	if lease != nil {
		// A whole answer at once cannot tell the first token from the
		// rest: its speed is the output over the whole call, and it says
		// nothing of time to first token.
		lease.Done(NodeResult{Status: resp.Status, InputTokens: c.inputTokens, OutputTokens: c.outputTokens, Generation: now.Sub(c.sent)})
	}
}

// copyHeaders copies the upstream's response headers a client may see. The
// vendor's own rate-limit and account headers describe the gateway's
// account with the vendor, not the tenant's, so they stay behind, as do
// headers that would pass for ours.
func copyHeaders(dst, src http.Header) {
	from := http.Header{}
	upstream.CopyResponseHeaders(from, src)
	for k, vs := range from {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "x-ratelimit-") || strings.HasPrefix(lk, "openai-organization") || strings.HasPrefix(lk, "openai-project") ||
			lk == "x-request-id" || strings.HasPrefix(lk, "x-switchyard-") || lk == "retry-after" {
			continue
		}
		dst[k] = vs
	}
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func usageOf(body []byte) (usage, bool) {
	var v struct {
		Usage *usage `json:"usage"`
	}
	if json.Unmarshal(body, &v) != nil || v.Usage == nil {
		return usage{}, false
	}
	return *v.Usage, true
}

// estimateOutput estimates the output tokens of an answer without usage.
func estimateOutput(body []byte) int {
	var v struct {
		Choices []struct {
			Text    string `json:"text"`
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(body, &v) != nil {
		return 0
	}
	n := 0
	for _, ch := range v.Choices {
		n += route.EstimateTokens(ch.Text) + route.EstimateTokens(ch.Message.Content)
	}
	return n
}

// requestID keeps a client's X-Request-Id when it is sane (short, plain
// characters), so that it can be logged and echoed safely; otherwise it
// makes one.
func requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" && len(id) <= 128 && plain(id) {
		return id
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_' || ch == '.' || ch == ':') {
			return false
		}
	}
	return true
}

// attributes collects the client's X-Switchyard-Attr-* headers for
// metering: at most 16, names lower-cased, values cut at 256 bytes.
func attributes(hd http.Header) map[string]string {
	var out map[string]string
	for k, vs := range hd {
		if len(vs) == 0 || len(k) <= len("X-Switchyard-Attr-") || !strings.EqualFold(k[:len("X-Switchyard-Attr-")], "X-Switchyard-Attr-") {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		if len(out) == 16 {
			break
		}
		v := vs[0]
		if len(v) > 256 {
			v = v[:256]
		}
		out[strings.ToLower(k[len("X-Switchyard-Attr-"):])] = v
	}
	return out
}
