// Package fakegateway is a stand-in for the gateway's NodeService, for the
// agent's tests: it checks node keys as the gateway does, records every
// heartbeat, answers a chosen interval, drains on demand, and can be stopped
// and started again on the same address to play a gateway restart.
//
// It is a real gRPC server on a loopback port, so the agent under test dials
// it exactly as it dials the gateway.
package fakegateway

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

// Gateway is a running fake NodeService. Its methods are safe for concurrent
// use.
type Gateway struct {
	switchyardv1.UnimplementedNodeServiceServer

	mu       sync.Mutex
	addr     string
	srv      *grpc.Server
	keys     map[string]string // node key → node id
	interval time.Duration
	drain    bool
	beats    []*switchyardv1.HeartbeatRequest
	arrived  chan struct{} // closed and replaced on every accepted heartbeat
}

var _ switchyardv1.NodeServiceServer = (*Gateway)(nil)

// Start serves a fake NodeService on a free loopback port. keys maps each
// accepted node key to the node id it belongs to. The gateway answers
// interval (0 means 5 s, as the real one does by default).
func Start(keys map[string]string, interval time.Duration) (*Gateway, error) {
	if interval <= 0 {
		interval = 5 * time.Second
	}
	g := &Gateway{keys: keys, interval: interval, arrived: make(chan struct{})}
	if err := g.listen("127.0.0.1:0"); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *Gateway) listen(addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	switchyardv1.RegisterNodeServiceServer(srv, g)
	g.mu.Lock()
	g.addr, g.srv = lis.Addr().String(), srv
	g.mu.Unlock()
	go func() { _ = srv.Serve(lis) }()
	return nil
}

// Addr is the host:port the gateway listens on; it stays the same across
// Stop and Restart.
func (g *Gateway) Addr() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.addr
}

// Stop closes the listener and every connection, as a gateway going down.
func (g *Gateway) Stop() {
	g.mu.Lock()
	srv := g.srv
	g.srv = nil
	g.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

// Restart serves again on the address of the first Start. The port may be
// taken by then in theory; on loopback in a test it is not.
func (g *Gateway) Restart() error {
	g.Stop()
	return g.listen(g.Addr())
}

// SetDrain sets what the next answers say in drain, as DrainNode does.
func (g *Gateway) SetDrain(drain bool) {
	g.mu.Lock()
	g.drain = drain
	g.mu.Unlock()
}

// Heartbeats returns every accepted heartbeat so far, oldest first.
func (g *Gateway) Heartbeats() []*switchyardv1.HeartbeatRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*switchyardv1.HeartbeatRequest, len(g.beats))
	for i, b := range g.beats {
		out[i] = proto.CloneOf(b)
	}
	return out
}

// WaitFor returns the first accepted heartbeat, from the from-th on
// (0-based), for which match is true; it fails when ctx ends first.
func (g *Gateway) WaitFor(ctx context.Context, from int, match func(*switchyardv1.HeartbeatRequest) bool) (*switchyardv1.HeartbeatRequest, int, error) {
	for {
		g.mu.Lock()
		for i := from; i < len(g.beats); i++ {
			if match == nil || match(g.beats[i]) {
				b := proto.CloneOf(g.beats[i])
				g.mu.Unlock()
				return b, i, nil
			}
		}
		from = max(from, len(g.beats))
		arrived := g.arrived
		g.mu.Unlock()
		select {
		case <-arrived:
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("no matching heartbeat (%d received): %w", len(g.Heartbeats()), ctx.Err())
		}
	}
}

// Heartbeat checks the key as the gateway does and records the request.
func (g *Gateway) Heartbeat(ctx context.Context, req *switchyardv1.HeartbeatRequest) (*switchyardv1.HeartbeatResponse, error) {
	key, err := bearer(ctx)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	owner, ok := g.keys[key]
	switch {
	case !ok:
		return nil, status.Error(codes.Unauthenticated, "invalid key")
	case req.GetNodeId() == "":
		return nil, status.Error(codes.InvalidArgument, "node_id: is required")
	case owner != req.GetNodeId():
		return nil, status.Errorf(codes.PermissionDenied, "this key belongs to node %q, not %q", owner, req.GetNodeId())
	}
	g.beats = append(g.beats, proto.CloneOf(req))
	close(g.arrived)
	g.arrived = make(chan struct{})
	return &switchyardv1.HeartbeatResponse{Drain: g.drain, IntervalMs: int32(g.interval / time.Millisecond)}, nil
}

func bearer(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return "", status.Error(codes.Unauthenticated, "missing key: send `authorization: Bearer syn_…`")
	}
	scheme, key, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", status.Error(codes.Unauthenticated, "invalid key")
	}
	return strings.TrimSpace(key), nil
}
