// Package redisstate keeps the gateway's short-lived shared state in Redis:
// tenant limit counters, the cache of key lookups, node slot leases and the
// shared node pool (SPEC §4.2, §4.6, §6, §8). Several replicas share one
// Redis, so these are the figures they agree on.
//
// Redis is never allowed to take a request down with it. Every call goes
// through one door, (*Redis).Do, which puts a per-call timeout and a circuit
// breaker in front of the client: after three consecutive network errors the
// breaker opens and, for two seconds, every call fails at once with
// ErrUnavailable without touching the network, so a hung Redis costs a
// request at most one timeout rather than one per command; PerRequest makes
// that hold for the requests that meet the hang before the breaker opens.
// Each user then falls back to per-replica state. A nil *Redis (no Redis
// configured) is valid everywhere and means "per-replica only".
package redisstate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
)

// ErrUnavailable says Redis could not be used for this call: the breaker is
// open, the call failed on the network, or no Redis is configured. Callers
// fall back to per-replica state when errors.Is(err, ErrUnavailable).
var ErrUnavailable = errors.New("redis unavailable")

// errSkipped marks a call the open breaker refused without network I/O.
var errSkipped = errors.New("skipped after repeated network errors")

// errSpent marks a call skipped because an earlier call of the same request
// already failed on the network (PerRequest).
var errSpent = errors.New("skipped: this request already met a Redis failure")

// Breaker settings (SPEC §8). They are fixed rather than options because the
// spec states them and /readyz semantics depend on them.
const (
	breakerFailures = 3               // consecutive network errors that open it
	breakerOpenFor  = 2 * time.Second // how long Redis is skipped before one probe
	// DefaultTimeout bounds one Do call when Options.Timeout is zero.
	DefaultTimeout = 100 * time.Millisecond
)

// Options configures a Redis.
type Options struct {
	// Prefix starts every key, e.g. "switchyard:", so that several
	// deployments (or tests) can share one Redis.
	Prefix string
	// Timeout bounds one Do call, every retry and dial included. Every user
	// keeps a call to one round trip, so this is the per-command timeout.
	// Zero means DefaultTimeout.
	Timeout time.Duration
	// Logger receives breaker state changes; nil discards them.
	Logger *slog.Logger
	// OnError is told of every failed call that reached Redis (network
	// errors and error replies, not redis.Nil, not calls refused by the open
	// breaker, not calls whose caller gave up), so that the app can count
	// switchyard_dependency_errors_total{dependency="redis",operation}.
	OnError func(operation string, err error)
	// Now is the clock the users of this Redis read (window and day
	// boundaries); nil means time.Now. The breaker keeps real time.
	Now func() time.Time
}

func (o Options) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return DefaultTimeout
}

// Redis is the guarded client: every call goes through Do.
type Redis struct {
	client  redis.UniversalClient
	prefix  string
	timeout time.Duration
	logger  *slog.Logger
	onError func(string, error)
	now     func() time.Time
	breaker *gobreaker.CircuitBreaker[struct{}]
}

// Open connects to the Redis named by rawURL: "redis://…" or "rediss://…"
// for one server (a URL with addr= query parameters names Cluster seeds, as
// go-redis reads it), or comma-separated host:port seeds for Redis Cluster.
// The client is set up for the breaker: context deadlines honoured, one
// retry, every timeout equal to Options.Timeout.
//
// Only a malformed URL is an error. A Redis that does not answer yet is
// logged and left to the breaker, because no dependency failure may stop
// the gateway or need a restart (SPEC §8).
func Open(ctx context.Context, rawURL string, o Options) (*Redis, error) {
	client, err := newClient(rawURL, o.timeout(), nil)
	if err != nil {
		return nil, err
	}
	r := New(client, o)
	if err := r.Ping(ctx); err != nil {
		r.logger.WarnContext(ctx, "Redis does not answer yet; shared state is per-replica until it does", "err", err)
	}
	return r, nil
}

// dialFunc lets tests count dials.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

func newClient(rawURL string, timeout time.Duration, dial dialFunc) (redis.UniversalClient, error) {
	rawURL = strings.TrimSpace(rawURL)
	if rawURL == "" {
		return nil, errors.New("redisstate: empty Redis URL")
	}
	if !strings.Contains(rawURL, "://") {
		var seeds []string
		for s := range strings.SplitSeq(rawURL, ",") {
			s = strings.TrimSpace(s)
			if _, _, err := net.SplitHostPort(s); err != nil {
				return nil, fmt.Errorf("redisstate: Redis Cluster seed %q is not host:port", s)
			}
			seeds = append(seeds, s)
		}
		opt := &redis.ClusterOptions{Addrs: seeds}
		configureCluster(opt, timeout, dial)
		return redis.NewClusterClient(opt), nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the whole URL, password included; keep only why.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("redisstate: malformed Redis URL: %v", err)
	}
	if u.Query().Has("addr") {
		opt, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redisstate: malformed Redis Cluster URL: %v", redactErr(err))
		}
		configureCluster(opt, timeout, dial)
		return redis.NewClusterClient(opt), nil
	}
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redisstate: malformed Redis URL: %v", redactErr(err))
	}
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = 1
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = timeout, timeout, timeout, timeout
	// go-redis retries a failed dial five times with backoff by default; one
	// attempt lets a refused connection fail now and count towards the breaker.
	opt.DialerRetries = 1
	opt.ReadBufferSize, opt.WriteBufferSize = connBufferSize, connBufferSize
	opt.PipelineReadBufferSize, opt.PipelineWriteBufferSize = connBufferSize, connBufferSize
	if dial != nil {
		opt.Dialer = dial
	}
	return redis.NewClient(opt), nil
}

func configureCluster(opt *redis.ClusterOptions, timeout time.Duration, dial dialFunc) {
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = 1
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = timeout, timeout, timeout, timeout
	opt.DialerRetries = 1
	opt.ReadBufferSize, opt.WriteBufferSize = connBufferSize, connBufferSize
	if dial != nil {
		opt.Dialer = dial
	}
}

// connBufferSize is each Redis connection's read and write buffer, where
// go-redis would give 32 KiB (and 128 KiB to its pipeline connections).
// Every command and reply here is a few hundred bytes, and the pool grows
// with concurrent requests; a longer reply is read in several pieces.
const connBufferSize = 4 << 10

func redactErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// New wraps a client built elsewhere (tests). Open configures its own client
// so that a command honours the per-call deadline; a client given here
// should set ContextTimeoutEnabled for the same guarantee.
func New(client redis.UniversalClient, o Options) *Redis {
	r := &Redis{
		client:  client,
		prefix:  o.Prefix,
		timeout: o.timeout(),
		logger:  o.Logger,
		onError: o.OnError,
		now:     o.Now,
	}
	if r.logger == nil {
		r.logger = slog.New(slog.DiscardHandler)
	}
	if r.now == nil {
		r.now = time.Now
	}
	r.breaker = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "redis",
		MaxRequests: 1, // one probe when half-open
		Timeout:     breakerOpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= breakerFailures
		},
		IsSuccessful: func(err error) bool {
			var o *outage
			return !errors.As(err, &o)
		},
		IsExcluded: func(err error) bool {
			var g *callerGone
			return errors.As(err, &g)
		},
		OnStateChange: func(_ string, from, to gobreaker.State) {
			switch to {
			case gobreaker.StateOpen:
				r.logger.Warn("Redis breaker open: shared state is per-replica for now", "from", from.String(), "retry_in", breakerOpenFor)
			case gobreaker.StateClosed:
				r.logger.Info("Redis breaker closed: shared state is back", "from", from.String())
			}
		},
	})
	return r
}

// outage marks a network failure for the breaker.
type outage struct{ err error }

func (e *outage) Error() string { return e.err.Error() }

// callerGone marks a call whose own context ended: the caller left, which
// says nothing about Redis, so the breaker ignores it.
type callerGone struct{ err error }

func (e *callerGone) Error() string { return e.err.Error() }

// requestKey is the context key of PerRequest's mark.
type requestKey struct{}

// PerRequest marks ctx as one request's, so that the request pays for at
// most one Redis failure: once a call made under ctx has failed on the
// network (against a hung Redis, a whole timeout), every later call under
// it skips Redis at once and its user falls back to per-replica state, as
// with the breaker open. The breaker alone needs three failures in a row
// to open, and one request makes several calls (key cache, limits, slot
// lease and its release, usage), so without this the first requests to
// meet a hung Redis would each wait one timeout per call. Calls made
// without the mark (lease renewals, the node pool's refresh) are not
// affected.
func PerRequest(ctx context.Context) context.Context {
	if _, ok := ctx.Value(requestKey{}).(*atomic.Bool); ok {
		return ctx
	}
	return context.WithValue(ctx, requestKey{}, new(atomic.Bool))
}

// Do runs fn against the client behind the breaker, with a context bounded
// by the timeout. op names the operation for OnError and error messages.
// It returns ErrUnavailable (wrapped) when the breaker is open, when fn
// failed on the network, when an earlier call of the same request did
// (PerRequest), or when r is nil; other errors (redis.Nil, error replies)
// come back as fn returned them.
func (r *Redis) Do(ctx context.Context, op string, fn func(ctx context.Context, c redis.UniversalClient) error) error {
	if r == nil {
		return fmt.Errorf("redis %s: %w: not configured", op, ErrUnavailable)
	}
	failedBefore, _ := ctx.Value(requestKey{}).(*atomic.Bool)
	if failedBefore != nil && failedBefore.Load() {
		return fmt.Errorf("redis %s: %w: %w", op, ErrUnavailable, errSpent)
	}
	_, err := r.breaker.Execute(func() (struct{}, error) {
		cctx, cancel := context.WithTimeout(ctx, r.timeout)
		defer cancel()
		err := fn(cctx, r.client)
		switch {
		case err == nil:
			return struct{}{}, nil
		case ctx.Err() != nil:
			return struct{}{}, &callerGone{err}
		case isNetworkError(err):
			return struct{}{}, &outage{err}
		}
		return struct{}{}, err
	})
	if err == nil {
		return nil
	}
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return fmt.Errorf("redis %s: %w: %w", op, ErrUnavailable, errSkipped)
	}
	var g *callerGone
	if errors.As(err, &g) {
		return g.err
	}
	var o *outage
	if errors.As(err, &o) {
		if failedBefore != nil {
			failedBefore.Store(true)
		}
		err = fmt.Errorf("redis %s: %w: %w", op, ErrUnavailable, o.err)
	} else if errors.Is(err, redis.Nil) {
		return err
	}
	if r.onError != nil {
		r.onError(op, err)
	}
	return err
}

// Available reports whether calls go to Redis: false while the breaker is
// open or waiting for its probe to succeed, and for a nil Redis. /readyz
// reports "degraded" when it is false.
func (r *Redis) Available() bool {
	return r != nil && r.breaker.State() == gobreaker.StateClosed
}

// Ping checks Redis through the breaker; a readiness check may use it to
// probe a half-open breaker when no other traffic does.
func (r *Redis) Ping(ctx context.Context) error {
	return r.Do(ctx, "ping", func(ctx context.Context, c redis.UniversalClient) error {
		return c.Ping(ctx).Err()
	})
}

// Close closes the client; a nil Redis has nothing to close.
func (r *Redis) Close() error {
	if r == nil {
		return nil
	}
	return r.client.Close()
}

// isNetworkError tells failures of the path to Redis, which trip the
// breaker, from answers Redis gave (redis.Nil, a script's error reply, a
// wrong type), which say Redis is up.
func isNetworkError(err error) bool {
	switch {
	case errors.Is(err, redis.Nil):
		return false
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, redis.ErrPoolExhausted),
		errors.Is(err, redis.ErrClosed),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE):
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	// These replies mean the server cannot serve now (loading its data set,
	// a failover or a cluster healing in progress): as unusable as a
	// timeout, and they last long enough to be worth skipping.
	for _, p := range [...]string{"LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}
