// Package upstream makes the one HTTP call of a request to where it is
// served: a cloud vendor's OpenAI-compatible API or a node agent's engine
// front. It injects the target's credentials and forwards only the client
// headers that are safe to forward, never follows a redirect, bounds every
// wait (connect, first byte, stream idle), refuses node addresses outside the
// allowed networks at dial time, classifies failures so that the caller knows
// whether to move on to the next candidate, pauses failing vendors with a
// circuit breaker, and reads Server-Sent Events with an explicit line cap.
//
// It does not retry and does not choose targets: the request pipeline walks
// the candidate chain and calls Send once per candidate.
package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Target kinds.
const (
	TargetVendor = "vendor"
	TargetNode   = "node"
)

// Defaults for the zero values of Options and Target.
const (
	DefaultConnectTimeout   = 5 * time.Second
	DefaultFirstByteTimeout = 60 * time.Second
	DefaultIdleTimeout      = 60 * time.Second
	DefaultMaxLineBytes     = 4 << 20
	DefaultBreakerFailures  = 5
	DefaultBreakerPause     = 30 * time.Second
)

// errorBodyLimit bounds how much of an upstream error body is read: enough
// for any real error JSON, small enough that a hostile upstream cannot make
// us hold its whole answer.
const errorBodyLimit = 64 << 10

// Target is one place a request can be sent.
type Target struct {
	Kind string // TargetVendor or TargetNode
	ID   string // vendor id or node id
	// BaseURL is the API root the path is appended to, e.g.
	// https://api.openai.com/v1 or http://10.0.0.5:8081/v1.
	BaseURL string
	// APIKey is sent as "Authorization: Bearer <APIKey>": the vendor key or
	// the node key. Empty sends no Authorization at all.
	APIKey string
	// FirstByteTimeout bounds the wait for the response headers, connecting
	// included; 0 means DefaultFirstByteTimeout. It is per target because
	// it is configured per model.
	FirstByteTimeout time.Duration
}

// Label names the target as the X-Switchyard-Target header and metrics do:
// "vendor:<id>" or "node:<id>".
func (t Target) Label() string { return t.Kind + ":" + t.ID }

// Options configure a Client. The zero value works: every zero field takes
// its default.
type Options struct {
	Logger *slog.Logger
	// NodeNetworks are the networks node targets may be dialled in; empty
	// means DefaultNodeNetworks. Link-local, cloud-metadata, unspecified
	// and multicast addresses are refused whatever it says, and loopback
	// is allowed only by a loopback prefix listed explicitly.
	NodeNetworks []netip.Prefix
	// ConnectTimeout bounds DNS resolution, the TCP connect and the TLS
	// handshake.
	ConnectTimeout time.Duration
	// IdleTimeout bounds each wait for response body bytes; it restarts on
	// every read, so a long stream that keeps producing is never cut.
	IdleTimeout time.Duration
	// MaxLineBytes caps one SSE line (see SSEReader).
	MaxLineBytes int
	// BreakerFailures is how many consecutive failures pause a vendor.
	BreakerFailures int
	// BreakerPause is how long a vendor stays paused, at least; a longer
	// Retry-After on the failure that paused it wins.
	BreakerPause time.Duration
	// OnPause is called (outside any lock) each time a vendor is paused.
	OnPause func(vendorID string, until time.Time)
	// Now is the clock for pauses and Retry-After dates; nil is time.Now.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if len(o.NodeNetworks) == 0 {
		o.NodeNetworks = DefaultNodeNetworks()
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxLineBytes <= 0 {
		o.MaxLineBytes = DefaultMaxLineBytes
	}
	if o.BreakerFailures <= 0 {
		o.BreakerFailures = DefaultBreakerFailures
	}
	if o.BreakerPause <= 0 {
		o.BreakerPause = DefaultBreakerPause
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Client sends requests to targets. It is safe for concurrent use; one
// Client is shared by the whole gateway so that connections are pooled.
type Client struct {
	o      Options
	log    *slog.Logger
	vendor *http.Client
	node   *http.Client

	mu       sync.Mutex
	breakers map[string]*vendorBreaker // by target label, created on first use
}

// New returns a Client.
func New(o Options) *Client {
	o = o.withDefaults()
	guard := nodeGuard{allowed: normalisePrefixes(o.NodeNetworks)}
	return &Client{
		o:   o,
		log: o.Logger,
		// Vendors may sit behind the operator's egress proxy; nodes never:
		// a proxy would dial for us and the node network check would be
		// looking at the proxy's address instead of the node's.
		vendor:   newHTTPClient(o.ConnectTimeout, nil, http.ProxyFromEnvironment),
		node:     newHTTPClient(o.ConnectTimeout, guard.control, nil),
		breakers: map[string]*vendorBreaker{},
	}
}

func newHTTPClient(connect time.Duration, control func(network, address string, c syscall.RawConn) error, proxy func(*http.Request) (*url.URL, error)) *http.Client {
	d := &net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second, Control: control}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:       proxy,
			DialContext: d.DialContext,
			// A custom DialContext turns HTTP/2 off unless asked for.
			ForceAttemptHTTP2:   true,
			TLSHandshakeTimeout: connect,
			// Idle connections are cheap; reopening them is not. The default
			// of 2 per host — or any limit below the calls in flight to one
			// upstream (rate × its latency) — makes a busy upstream open and
			// close a connection for nearly every request.
			MaxIdleConns:        8192,
			MaxIdleConnsPerHost: 1024,
			IdleConnTimeout:     90 * time.Second,
			// Each connection keeps its buffers for as long as it lives, and
			// an open stream holds its connection: with net/http's 4 KiB
			// defaults the two came to a fifth of a stream's memory. The
			// write buffer only ever holds a request's head and the start of
			// its body (the rest of a larger body is written straight
			// through, one more write per request); the read buffer only
			// has to hold a response's head, since body reads larger than it
			// go straight to the socket.
			WriteBufferSize: 1 << 10,
			ReadBufferSize:  2 << 10,
		},
		// Following a redirect would carry the injected credentials to a
		// host nobody configured, so the 3xx comes back as an answer and is
		// classified as a failure of this target.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Close drops idle pooled connections; in-flight calls are not affected.
func (c *Client) Close() {
	c.vendor.CloseIdleConnections()
	c.node.CloseIdleConnections()
}

// Response is a 2xx answer whose headers have arrived. The caller must close
// Body. Reading Body is bounded by the idle timeout, and a read error is an
// *Error (Timeout when the upstream went quiet, Canceled when the caller's
// context ended, Connect when the connection broke).
type Response struct {
	Status int
	// Header is the upstream's, unfiltered; copy it to a client with
	// CopyResponseHeaders.
	Header http.Header
	Body   io.ReadCloser
	// Stream is set when the body is text/event-stream.
	Stream bool

	maxLine int
}

// Events reads Body as Server-Sent Events with the client's line cap.
func (r *Response) Events() *SSEReader { return NewSSEReader(r.Body, r.maxLine) }

// Send makes one call to t: a POST of body to BaseURL+path, or a GET when
// body is nil (as for "/models"). in are the client's request headers; only
// what ForwardHeaders keeps is sent, plus the target's key and, with a body,
// Content-Type: application/json.
//
// A non-2xx answer, a failure to get one, a refused node address or a paused
// vendor is an *Error; see (*Error).Retryable for which of them should move
// the request to the next candidate. Cancelling ctx cancels the upstream call
// at once, streams included.
//
// For vendor targets Send consults and feeds the vendor's circuit breaker.
// The outcome is recorded when the headers arrive: a 2xx is a success then,
// and a stream that breaks later is not counted again.
func (c *Client) Send(ctx context.Context, t Target, path string, body []byte, in http.Header) (*Response, error) {
	label := t.Label()
	var hc *http.Client
	switch t.Kind {
	case TargetVendor:
		hc = c.vendor
	case TargetNode:
		hc = c.node
	default:
		return nil, fmt.Errorf("upstream: target %q has unknown kind %q", t.ID, t.Kind)
	}
	u, err := requestURL(t.BaseURL, path)
	if err != nil {
		// Configuration, not the upstream's health: it is not fed to the
		// breaker, and the message does not repeat the URL, which an
		// operator may have put credentials into.
		return nil, &Error{Kind: Connect, Target: label, Message: err.Error()}
	}
	if ctx.Err() != nil {
		return nil, &Error{Kind: Canceled, Target: label, Message: "request canceled before it was sent", err: context.Cause(ctx)}
	}
	var report func(*Error)
	if t.Kind == TargetVendor {
		report, err = c.admit(c.breakerFor(t.ID))
		if err != nil {
			return nil, err
		}
	}
	resp, uerr := c.do(ctx, hc, t, u, body, in)
	if report != nil {
		report(uerr)
	}
	if uerr != nil {
		return nil, uerr
	}
	return resp, nil
}

func requestURL(base, path string) (string, error) {
	raw := strings.TrimRight(base, "/") + path
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "", errors.New("the target's base URL does not parse")
	case u.Scheme != "http" && u.Scheme != "https":
		return "", errors.New("the target's base URL is not http or https")
	case u.Host == "":
		return "", errors.New("the target's base URL has no host")
	case u.User != nil:
		// Basic credentials in the URL would travel beside the bearer key.
		return "", errors.New("the target's base URL carries user credentials")
	}
	return raw, nil
}

// Causes recorded on the request context, so that a canceled call can be
// told apart from the caller going away.
var (
	errFirstByteTimeout = errors.New("no response headers within the first-byte timeout")
	errIdleTimeout      = errors.New("no response bytes within the idle timeout")
)

func (c *Client) do(ctx context.Context, hc *http.Client, t Target, u string, body []byte, in http.Header) (*Response, *Error) {
	label := t.Label()
	method, rd := http.MethodGet, io.Reader(nil)
	if body != nil {
		method, rd = http.MethodPost, bytes.NewReader(body)
	}
	rctx, cancel := context.WithCancelCause(ctx)
	req, err := http.NewRequestWithContext(rctx, method, u, rd)
	if err != nil {
		cancel(nil)
		return nil, &Error{Kind: Connect, Target: label, Message: "cannot build the request", err: err}
	}
	req.Header = ForwardHeaders(in)
	if t.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+t.APIKey)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}

	fbt := t.FirstByteTimeout
	if fbt <= 0 {
		fbt = DefaultFirstByteTimeout
	}
	timer := time.AfterFunc(fbt, func() { cancel(errFirstByteTimeout) })
	resp, err := hc.Do(req)
	fired := !timer.Stop()

	if err != nil || fired {
		if resp != nil {
			resp.Body.Close()
		}
		e := c.classifyTransport(ctx, rctx, t, fbt, err)
		cancel(nil)
		return nil, e
	}

	b := newIdleBody(ctx, rctx, cancel, resp.Body, c.o.IdleTimeout, label)
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return &Response{
			Status:  resp.StatusCode,
			Header:  resp.Header,
			Body:    b,
			Stream:  isEventStream(resp.Header.Get("Content-Type")),
			maxLine: c.o.MaxLineBytes,
		}, nil
	}
	raw, _ := io.ReadAll(io.LimitReader(b, errorBodyLimit))
	b.Close()
	return nil, statusError(label, resp.StatusCode, resp.Header, raw, t.APIKey, c.o.Now())
}

// classifyTransport turns a failure to get response headers into an *Error.
// The order matters: the caller leaving wins over everything, then our own
// first-byte deadline, then the dial guard, and anything else is a failure
// to connect or to get an answer on the connection.
func (c *Client) classifyTransport(parent, rctx context.Context, t Target, fbt time.Duration, err error) *Error {
	label := t.Label()
	if parent.Err() != nil {
		return &Error{Kind: Canceled, Target: label, Message: "request canceled by the client", err: context.Cause(parent)}
	}
	if errors.Is(context.Cause(rctx), errFirstByteTimeout) {
		return &Error{Kind: Timeout, Target: label, Message: fmt.Sprintf("no response within %s", fbt), err: errFirstByteTimeout}
	}
	var blocked *BlockedAddressError
	if errors.As(err, &blocked) {
		return &Error{Kind: Blocked, Target: label, Message: blocked.Error(), err: blocked}
	}
	msg := "connection failed"
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		msg = "cannot connect"
		if op.Timeout() {
			msg = "connect timed out"
		}
	}
	if err != nil {
		msg += ": " + redact(rootCause(err).Error(), t.APIKey)
	}
	return &Error{Kind: Connect, Target: label, Message: msg, err: err}
}

// rootCause drops the *url.Error wrapper, whose message repeats the URL.
func rootCause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func isEventStream(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "text/event-stream"
}

// idleBody bounds each read of a response body with the idle timeout and
// turns read failures into *Error.
type idleBody struct {
	rc     io.ReadCloser
	parent context.Context // the caller's: ended means the client left
	rctx   context.Context // the request's: its cause says who ended it
	cancel context.CancelCauseFunc
	idle   time.Duration
	timer  *time.Timer
	label  string
	once   sync.Once
}

var _ io.ReadCloser = (*idleBody)(nil)

func newIdleBody(parent, rctx context.Context, cancel context.CancelCauseFunc, rc io.ReadCloser, idle time.Duration, label string) *idleBody {
	b := &idleBody{rc: rc, parent: parent, rctx: rctx, cancel: cancel, idle: idle, label: label}
	b.timer = time.AfterFunc(idle, func() { cancel(errIdleTimeout) })
	// Armed only while a Read is waiting: a client that is slow to take
	// what we already have is not the upstream going quiet.
	b.timer.Stop()
	return b
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.idle)
	n, err := b.rc.Read(p)
	b.timer.Stop()
	if err == nil || err == io.EOF {
		return n, err
	}
	switch {
	case b.parent.Err() != nil:
		err = &Error{Kind: Canceled, Target: b.label, Message: "request canceled by the client", err: context.Cause(b.parent)}
	case errors.Is(context.Cause(b.rctx), errIdleTimeout):
		err = &Error{Kind: Timeout, Target: b.label, Message: fmt.Sprintf("upstream sent nothing for %s", b.idle), err: errIdleTimeout}
	default:
		err = &Error{Kind: Connect, Target: b.label, Message: "connection lost while reading the response", err: err}
	}
	return n, err
}

func (b *idleBody) Close() error {
	var err error
	b.once.Do(func() {
		b.timer.Stop()
		err = b.rc.Close()
		b.cancel(nil)
	})
	return err
}
