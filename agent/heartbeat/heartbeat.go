// Package heartbeat tells the gateway, over NodeService.Heartbeat, what this
// node offers: its engine's models and queue, its GPUs, the URL of its engine
// front, how many requests the front is serving, and whether it is draining.
//
// One heartbeat goes out at once, then one every interval the gateway
// answered (5 s until it has answered). Errors are of two kinds. A key the
// gateway refuses (PERMISSION_DENIED, UNAUTHENTICATED) is a misconfiguration
// no retry will mend, so Run returns it and the agent stops. Anything else —
// the gateway restarting, the network gone — is waited out with backoff,
// logging once when heartbeats stop getting through and once when they
// resume, never once per attempt.
package heartbeat

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchyard-ai/switchyard/agent/engine"
	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

// Defaults for the zero Options fields.
const (
	// DefaultInterval is the cadence before the gateway has answered; the
	// gateway's default is the same.
	DefaultInterval = 5 * time.Second
	// DefaultCallTimeout bounds one Heartbeat call. A gateway slower than this
	// is as good as down for routing, which goes by heartbeats seconds old.
	DefaultCallTimeout = 10 * time.Second
)

// The answered interval is clamped: a zero or garbage figure must neither
// spin the loop nor silence the node past the gateway's 30 s offline mark
// for long.
const (
	minInterval = 10 * time.Millisecond
	maxInterval = 5 * time.Minute
	// firstBackoff is the first retry delay after a failed heartbeat, unless
	// the interval is shorter; it doubles up to the interval.
	firstBackoff = 500 * time.Millisecond
)

// ErrRefused wraps the gateway's refusal of this node's key: the key belongs
// to another node, was revoked, or is not a node key. The wrapped message is
// the gateway's own, which says which.
var ErrRefused = errors.New("the gateway refused this agent's key")

// Engine is what the heartbeat reads from the local engine.
type Engine interface {
	Kind() string
	Probe(ctx context.Context) (engine.Status, error)
}

// GPUs is what the heartbeat reads from the host's GPUs.
type GPUs interface {
	Collect(ctx context.Context) ([]*switchyardv1.GpuStats, error)
	Note() string
}

// Options configure a Sender. Client, Key, NodeID and Engine are required.
type Options struct {
	Client switchyardv1.NodeServiceClient
	// Reconnect, when set, is called just before each retry after a failure
	// so that the connection dials again now rather than after gRPC's own
	// reconnect backoff (grpc.ClientConn.ResetConnectBackoff): this loop's
	// backoff is the one that governs.
	Reconnect func()
	// Key is the node key, sent as "authorization: Bearer <Key>".
	Key          string
	NodeID       string
	AgentVersion string
	// URL is the engine front's base URL as the gateway reaches it.
	URL    string
	Engine Engine
	// GPUs may be nil: no GPU figures are sent.
	GPUs GPUs
	// InFlight reports the requests the front is serving; nil reports 0.
	InFlight func() int
	// Interval is the cadence until the gateway answers its own; 0 means
	// DefaultInterval.
	Interval time.Duration
	// CallTimeout bounds one call; 0 means DefaultCallTimeout.
	CallTimeout time.Duration
	Logger      *slog.Logger
}

// Sender sends heartbeats. Its methods are safe for concurrent use.
type Sender struct {
	o       Options
	logger  *slog.Logger
	trigger chan struct{}

	// send (a one-token semaphore) serialises heartbeats, so that a Beat
	// from the drain never races the loop's and the gateway sees them in the
	// order they were built; waiting for it heeds the caller's context.
	send chan struct{}

	mu           sync.Mutex
	interval     time.Duration
	localDrain   bool // this agent is shutting down
	gatewayDrain bool // the administrator drained the node (DrainNode)
	gatewayState string
	engineState  string
	cpuWarnings  string
	acceptedOnce bool
}

// New returns a Sender; nothing is sent until Run or Beat.
func New(o Options) *Sender {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	return &Sender{o: o, logger: o.Logger, trigger: make(chan struct{}, 1), send: make(chan struct{}, 1), interval: o.Interval}
}

// Run sends a heartbeat now and then every interval until ctx ends (nil) or
// the gateway refuses the key (an error wrapping ErrRefused).
func (s *Sender) Run(ctx context.Context) error {
	backoff := time.Duration(0)
	for {
		if backoff > 0 && s.o.Reconnect != nil {
			s.o.Reconnect()
		}
		_, err := s.Beat(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := s.Interval()
		switch {
		case errors.Is(err, ErrRefused):
			return err
		case err != nil:
			if backoff == 0 {
				backoff = min(firstBackoff, wait)
			} else {
				backoff = min(2*backoff, wait)
			}
			// Jitter keeps a fleet of nodes from coming back at one instant
			// after a gateway restart.
			wait = backoff/2 + rand.N(backoff/2+1)
		default:
			backoff = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-s.trigger:
			t.Stop()
		case <-t.C:
		}
	}
}

// Trigger makes Run send its next heartbeat now instead of at the end of
// the interval. It never blocks; triggers that pile up make one heartbeat.
func (s *Sender) Trigger() {
	select {
	case s.trigger <- struct{}{}:
	default:
	}
}

// SetDraining sets the draining flag this agent reports, on top of any drain
// the gateway asked for.
func (s *Sender) SetDraining(d bool) {
	s.mu.Lock()
	s.localDrain = d
	s.mu.Unlock()
}

// Draining reports whether the heartbeats say draining: the agent is shutting
// down, or the gateway asked the node to drain.
func (s *Sender) Draining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.localDrain || s.gatewayDrain
}

// Interval is the cadence the gateway last answered (clamped), or the
// starting one.
func (s *Sender) Interval() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.interval
}

// Beat reads the engine and GPUs and sends one heartbeat now. Errors from the
// gateway are logged once per change of state; a refused key wraps
// ErrRefused.
func (s *Sender) Beat(ctx context.Context) (*switchyardv1.HeartbeatResponse, error) {
	select {
	case s.send <- struct{}{}:
		defer func() { <-s.send }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	req := s.build(ctx)
	resp, err := Send(ctx, s.o.Client, s.o.Key, req, s.o.CallTimeout)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err != nil {
		s.gatewayFailed(err)
		return nil, err
	}
	s.accepted(resp)
	return resp, nil
}

// build reads the engine, the GPUs and the front into a heartbeat.
func (s *Sender) build(ctx context.Context) *switchyardv1.HeartbeatRequest {
	req := &switchyardv1.HeartbeatRequest{
		NodeId:       s.o.NodeID,
		AgentVersion: s.o.AgentVersion,
		Engine:       s.o.Engine.Kind(),
		Url:          s.o.URL,
		Draining:     s.Draining(),
	}
	st, err := s.o.Engine.Probe(ctx)
	if err == nil || errors.Is(err, engine.ErrQueueUnknown) {
		// With the queue unknown the models are still right; the gateway
		// reads the unset queue as unknown, not idle.
		req.Models = st.Models
	}
	s.engineProbed(st, err)
	if s.o.GPUs != nil {
		gpus, _ := s.o.GPUs.Collect(ctx)
		req.Gpus = gpus
		req.GpuNote = s.o.GPUs.Note()
	}
	if s.o.InFlight != nil {
		req.InFlight = int32(min(s.o.InFlight(), 1<<31-1))
	}
	return req
}

// Send makes one Heartbeat call with the node key, bounded by timeout. A
// refused key comes back wrapping ErrRefused and the gRPC status, so that
// status.Code still reads it; other errors are the call's own.
func Send(ctx context.Context, client switchyardv1.NodeServiceClient, key string, req *switchyardv1.HeartbeatRequest, timeout time.Duration) (*switchyardv1.HeartbeatResponse, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
	resp, err := client.Heartbeat(ctx, req)
	if err != nil {
		if c := status.Code(err); c == codes.PermissionDenied || c == codes.Unauthenticated {
			return nil, &refusedError{st: status.Convert(err)}
		}
		return nil, err
	}
	return resp, nil
}

// refusedError is a refused key: errors.Is(ErrRefused) and a gRPC status.
type refusedError struct{ st *status.Status }

func (e *refusedError) Error() string {
	return fmt.Sprintf("%v: %s", ErrRefused, e.st.Message())
}

func (e *refusedError) Is(target error) bool { return target == ErrRefused }

// GRPCStatus lets status.Code and status.Convert read the gateway's answer.
func (e *refusedError) GRPCStatus() *status.Status { return e.st }

func (s *Sender) accepted(resp *switchyardv1.HeartbeatResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ms := resp.GetIntervalMs(); ms > 0 {
		s.interval = min(max(time.Duration(ms)*time.Millisecond, minInterval), maxInterval)
	}
	switch {
	case !s.acceptedOnce:
		s.acceptedOnce = true
		s.logger.Info("the gateway accepted this node's heartbeat", "node_id", s.o.NodeID, "url", s.o.URL, "interval", s.interval)
	case s.gatewayState != "":
		s.logger.Info("heartbeats reach the gateway again", "node_id", s.o.NodeID)
	}
	s.gatewayState = ""
	if resp.GetDrain() != s.gatewayDrain {
		s.gatewayDrain = resp.GetDrain()
		if s.gatewayDrain {
			s.logger.Warn("the gateway asked this node to drain (DrainNode): it sends no new requests; those that arrive are still served", "node_id", s.o.NodeID)
		} else {
			s.logger.Info("the gateway lifted this node's drain: it sends requests again", "node_id", s.o.NodeID)
		}
	}
}

func (s *Sender) gatewayFailed(err error) {
	st := status.Convert(err)
	// An outage shows as several errors in turn (the connection reset, then
	// refused, then timing out); it is one state for the log.
	state := "unreachable"
	if c := st.Code(); c != codes.Unavailable && c != codes.DeadlineExceeded {
		state = c.String() + ": " + st.Message()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if state == s.gatewayState {
		s.logger.Debug("heartbeat failed again", "code", st.Code().String(), "error", st.Message())
		return
	}
	s.gatewayState = state
	switch {
	case errors.Is(err, ErrRefused):
		s.logger.Error("the gateway refused this node's key: "+st.Message(), "node_id", s.o.NodeID, "code", st.Code().String())
	case st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded:
		s.logger.Warn("the gateway is not reachable; heartbeats will be retried until it is", "node_id", s.o.NodeID, "code", st.Code().String(), "error", st.Message())
	default:
		s.logger.Warn("the gateway did not accept the heartbeat; retrying", "node_id", s.o.NodeID, "code", st.Code().String(), "error", st.Message())
	}
}

// engineProbed logs the engine's state when it changes: unreachable, queue
// unknown, readable again, and models running on the CPU.
func (s *Sender) engineProbed(st engine.Status, err error) {
	state := ""
	if err != nil {
		state = err.Error()
	}
	warnings := ""
	for _, w := range st.CPUWarnings() {
		warnings += w + "\n"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if state != s.engineState {
		switch {
		case err == nil && s.engineState != "":
			s.logger.Info("the engine answers again", "engine", s.o.Engine.Kind(), "models", len(st.Models))
		case errors.Is(err, engine.ErrQueueUnknown):
			s.logger.Warn("the engine's queue could not be read; heartbeats carry its models with the queue unknown", "error", state)
		case errors.Is(err, engine.ErrUnreachable):
			s.logger.Error("the engine is not answering; heartbeats carry no models until it does", "error", state)
		case err != nil:
			s.logger.Error("the engine could not be read; heartbeats carry no models until it can", "error", state)
		}
		s.engineState = state
	}
	if warnings != s.cpuWarnings {
		for _, w := range st.CPUWarnings() {
			s.logger.Warn(w)
		}
		s.cpuWarnings = warnings
	}
}

// Dial returns a client connection to the gateway's gRPC address (host:port),
// in plaintext or, with useTLS, TLS verified against the system's roots. It
// connects lazily: a gateway that is down is an error of the first call, not
// of Dial.
func Dial(target string, useTLS bool, userAgent string) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if useTLS {
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	}
	return grpc.NewClient(target,
		grpc.WithTransportCredentials(creds),
		grpc.WithUserAgent(userAgent),
		// gRPC's own reconnect backoff grows to two minutes by default; a
		// gateway back from a restart must see this node well before its
		// 30 s offline mark.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  250 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   DefaultInterval,
			},
			MinConnectTimeout: DefaultInterval,
		}),
	)
}
