// Package nodes is the gateway's view of local GPU nodes (SPEC §4): it takes
// the agents' heartbeats, shares them with the other replicas through
// Redis, works out each node's health, and places requests on nodes — the
// scheduler chooses, a slot lease in Redis holds the place, the node's key
// opens its engine front, and the outcome feeds the speed figures the next
// choice uses.
package nodes

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/switchyard-ai/switchyard/proto/switchyard/v1"

	"github.com/switchyard-ai/switchyard/gateway/catalog"
	"github.com/switchyard-ai/switchyard/gateway/metrics"
	"github.com/switchyard-ai/switchyard/gateway/redisstate"
	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/scheduler"
)

// Health thresholds of SPEC §4.2.
const (
	DefaultSuspectAfter      = 12 * time.Second
	DefaultOfflineAfter      = 30 * time.Second
	DefaultFailuresToSuspect = 3
)

// Registry is the configuration the pool reads: registered nodes (weight,
// drain) — the catalog.
type Registry interface {
	Current() *catalog.Snapshot
}

// KeySource finds a node's active key; the store implements it.
type KeySource interface {
	NodeKey(ctx context.Context, nodeID string) (store.Key, error)
}

// Opener opens sealed values; the keyring implements it.
type Opener interface {
	Open(sealed []byte, table, row, column string) ([]byte, error)
}

// Options wire a Pool. Registry, Keys and Opener are required; a nil
// Leaser or States (no Redis) means per-replica state only.
type Options struct {
	Logger   *slog.Logger
	Metrics  *metrics.Metrics
	Registry Registry
	Keys     KeySource
	Opener   Opener
	Leaser   *redisstate.Leaser
	States   *redisstate.NodeStates

	SuspectAfter      time.Duration
	OfflineAfter      time.Duration
	FailuresToSuspect int
	// SyncEvery is how often the replica reads the shared node pool and the
	// lease counts from Redis (default 1 s).
	SyncEvery time.Duration
	// FirstByteTimeout bounds the wait for a node's answer headers.
	FirstByteTimeout time.Duration
	// Defaults are the speeds assumed for nodes not measured yet.
	Defaults scheduler.Defaults
	Now      func() time.Time
}

// node is one node as this replica knows it.
type node struct {
	id       string
	hb       *pb.HeartbeatRequest
	received time.Time
	failures int // consecutive failed calls

	localBusy  map[string]int // leases this replica holds, per model
	sharedBusy map[string]int // leases all replicas hold (from Redis), per model

	keyID string // the node key opened below belongs to this key id
	key   string
	keyAt time.Time // when the store last confirmed keyID
	// keyChecking is set while a background check of the key runs.
	keyChecking bool
}

// Pool is the replica's node pool.
type Pool struct {
	o      Options
	picker *scheduler.Picker
	speeds scheduler.SpeedBook

	mu    sync.Mutex
	nodes map[string]*node
	order []string // node ids, sorted: the scheduler's pools keep a stable order
}

// New returns a Pool.
func New(o Options) *Pool {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = metrics.New(nil)
	}
	if o.SuspectAfter <= 0 {
		o.SuspectAfter = DefaultSuspectAfter
	}
	if o.OfflineAfter <= 0 {
		o.OfflineAfter = DefaultOfflineAfter
	}
	if o.FailuresToSuspect <= 0 {
		o.FailuresToSuspect = DefaultFailuresToSuspect
	}
	if o.SyncEvery <= 0 {
		o.SyncEvery = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Pool{o: o, picker: scheduler.NewPicker(o.Defaults), nodes: map[string]*node{}}
}

// Heartbeat takes an agent's heartbeat (NodeService has checked its key):
// this replica's view first, then Redis for the others.
func (p *Pool) Heartbeat(ctx context.Context, n store.Node, hb *pb.HeartbeatRequest) error {
	now := p.o.Now()
	hb = proto.Clone(hb).(*pb.HeartbeatRequest)
	p.mu.Lock()
	p.apply(n.ID, hb, now)
	p.mu.Unlock()
	if p.o.States != nil {
		payload, err := proto.Marshal(hb)
		if err == nil {
			if err := p.o.States.Put(ctx, n.ID, payload, now); err != nil {
				p.o.Logger.Debug("node state not shared", slog.String("node", n.ID), slog.String("error", err.Error()))
			}
		}
	}
	return nil
}

// apply records a heartbeat received at t, unless a newer one is known.
// p.mu is held.
func (p *Pool) apply(id string, hb *pb.HeartbeatRequest, t time.Time) {
	nd, ok := p.nodes[id]
	if !ok {
		nd = &node{id: id, localBusy: map[string]int{}, sharedBusy: map[string]int{}}
		p.nodes[id] = nd
		p.order = append(p.order, id)
		sort.Strings(p.order)
	}
	if !t.After(nd.received) && nd.hb != nil {
		return
	}
	nd.hb, nd.received = hb, t
}

// status works a node's health out of the time since its last heartbeat
// and its recent failures.
func (p *Pool) status(nd *node, now time.Time) scheduler.Status {
	age := now.Sub(nd.received)
	switch {
	case age > p.o.OfflineAfter:
		return scheduler.Offline
	case age > p.o.SuspectAfter, nd.failures >= p.o.FailuresToSuspect:
		return scheduler.Suspect
	}
	return scheduler.Healthy
}

// Describe renders a registered node with what the pool knows (ListNodes).
func (p *Pool) Describe(_ context.Context, n store.Node) *pb.Node {
	now := p.o.Now()
	out := &pb.Node{NodeId: n.ID, Name: n.Name, Status: "unknown", Weight: n.Weight, DrainRequested: n.Drain, Draining: n.Drain}
	p.mu.Lock()
	defer p.mu.Unlock()
	nd, ok := p.nodes[n.ID]
	if !ok || nd.hb == nil {
		return out
	}
	hb := nd.hb
	out.Status = p.status(nd, now).String()
	out.Draining = n.Drain || hb.GetDraining()
	out.Engine = hb.GetEngine()
	out.Url = hb.GetUrl()
	out.LastSeen = timestamppb.New(nd.received)
	out.AgentVersion = hb.GetAgentVersion()
	out.Gpus = hb.GetGpus()
	out.GpuNote = hb.GetGpuNote()
	for _, m := range hb.GetModels() {
		sp := p.speeds.Get(n.ID, m.GetName())
		nm := &pb.NodeModel{
			Name: m.GetName(), Warm: m.GetWarm(), ContextWindow: m.GetContextWindow(), Slots: m.GetSlots(),
			Busy:          int32(max(nd.localBusy[m.GetName()], nd.sharedBusy[m.GetName()])),
			EngineRunning: m.EngineRunning, EngineWaiting: m.EngineWaiting, KvCacheUsage: m.KvCacheUsage,
		}
		if sp.Known {
			nm.Tps = sp.TPS
			nm.TtftMsPer_1K = float64(sp.TTFTPer1k) / float64(time.Millisecond)
		}
		out.Models = append(out.Models, nm)
	}
	return out
}

// Run keeps the replica's view in step with the others' (through Redis) and
// the node metrics current, until ctx ends.
func (p *Pool) Run(ctx context.Context) {
	t := time.NewTicker(p.o.SyncEvery)
	defer t.Stop()
	for {
		p.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sync reads the shared node pool and lease counts, then refreshes metrics.
func (p *Pool) sync(ctx context.Context) {
	if p.o.States != nil {
		all, err := p.o.States.All(ctx)
		if err == nil {
			p.mu.Lock()
			for id, st := range all {
				hb := &pb.HeartbeatRequest{}
				if proto.Unmarshal(st.Payload, hb) == nil {
					p.apply(id, hb, st.Received)
				}
			}
			p.mu.Unlock()
		}
	}
	if p.o.Leaser != nil {
		var keys []redisstate.NodeModel
		p.mu.Lock()
		for _, id := range p.order {
			for _, m := range p.nodes[id].hb.GetModels() {
				keys = append(keys, redisstate.NodeModel{Node: id, Model: m.GetName()})
			}
		}
		p.mu.Unlock()
		if len(keys) > 0 {
			if counts, err := p.o.Leaser.Counts(ctx, keys); err == nil {
				p.mu.Lock()
				for k, c := range counts {
					if nd := p.nodes[k.Node]; nd != nil {
						nd.sharedBusy[k.Model] = c
					}
				}
				p.mu.Unlock()
			}
		}
	}
	p.updateMetrics()
}

func (p *Pool) updateMetrics() {
	now := p.o.Now()
	m := p.o.Metrics
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range p.order {
		nd := p.nodes[id]
		m.SetNodeState(id, p.status(nd, now).String())
		for _, mm := range nd.hb.GetModels() {
			m.SlotsTotal.WithLabelValues(id, mm.GetName()).Set(float64(mm.GetSlots()))
			m.SlotsInUse.WithLabelValues(id, mm.GetName()).Set(float64(max(nd.localBusy[mm.GetName()], nd.sharedBusy[mm.GetName()])))
		}
		for _, g := range nd.hb.GetGpus() {
			gpu := g.GetUuid()
			if gpu == "" {
				gpu = g.GetName()
			}
			m.GPUUtilization.WithLabelValues(id, gpu).Set(float64(g.GetUtilizationPct()) / 100)
			m.GPUMemoryUsedBytes.WithLabelValues(id, gpu).Set(float64(g.GetMemoryUsedBytes()))
			m.GPUMemoryTotalBytes.WithLabelValues(id, gpu).Set(float64(g.GetMemoryTotalBytes()))
			m.GPUTemperatureCelsius.WithLabelValues(id, gpu).Set(float64(g.GetTemperatureC()))
			m.GPUPowerWatts.WithLabelValues(id, gpu).Set(g.GetPowerWatts())
		}
	}
}
