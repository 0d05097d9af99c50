package nodes_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	pb "github.com/switchyard-ai/switchyard/proto/switchyard/v1"

	"github.com/switchyard-ai/switchyard/gateway/catalog"
	"github.com/switchyard-ai/switchyard/gateway/nodes"
	"github.com/switchyard-ai/switchyard/gateway/openai"
	"github.com/switchyard-ai/switchyard/gateway/redisstate"
	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/scheduler"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type registry struct{ snap *catalog.Snapshot }

func (r registry) Current() *catalog.Snapshot { return r.snap }

// keys hands out one sealed key per node; "sealed" is the plaintext itself.
type keys struct {
	mu    sync.Mutex
	calls int
	down  bool
}

func (k *keys) NodeKey(_ context.Context, id string) (store.Key, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls++
	if k.down {
		return store.Key{}, store.ErrUnavailable
	}
	return store.Key{ID: "k-" + id, Kind: store.KeyNode, NodeID: id, Sealed: []byte("syn_key_of_" + id)}, nil
}

type plainOpener struct{}

func (plainOpener) Open(sealed []byte, _, _, _ string) ([]byte, error) { return sealed, nil }

func registered(ids ...string) registry {
	s := &catalog.Snapshot{Nodes: map[string]store.Node{}}
	for _, id := range ids {
		s.Nodes[id] = store.Node{ID: id, Name: id, Weight: 1}
	}
	return registry{s}
}

func heartbeat(id, model string, slots int32, warm bool) *pb.HeartbeatRequest {
	return &pb.HeartbeatRequest{NodeId: id, Engine: "vllm", Url: "http://10.0.0.1:8081/", Models: []*pb.NodeModelStatus{
		{Name: model, Warm: warm, Slots: slots, ContextWindow: 8192},
	}}
}

func newPool(t *testing.T, clk *clock, reg registry, k *keys) *nodes.Pool {
	t.Helper()
	return nodes.New(nodes.Options{
		Registry: reg, Keys: k, Opener: plainOpener{}, Now: clk.Now,
		Leaser: redisstate.NewLeaser(nil, redisstate.LeaserOptions{}),
	})
}

func TestHealthTransitions(t *testing.T) {
	clk := &clock{now: time.Unix(1_000_000, 0)}
	reg := registered("a")
	p := newPool(t, clk, reg, &keys{})
	ctx := context.Background()
	if got := p.Describe(ctx, reg.snap.Nodes["a"]).GetStatus(); got != "unknown" {
		t.Fatalf("before any heartbeat: %s", got)
	}
	if err := p.Heartbeat(ctx, reg.snap.Nodes["a"], heartbeat("a", "m", 2, true)); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		after time.Duration
		want  string
	}{{0, "healthy"}, {12 * time.Second, "healthy"}, {time.Second, "suspect"}, {17 * time.Second, "suspect"}, {time.Second, "offline"}} {
		clk.add(step.after)
		d := p.Describe(ctx, reg.snap.Nodes["a"])
		if d.GetStatus() != step.want {
			t.Fatalf("after +%v: %s, want %s", step.after, d.GetStatus(), step.want)
		}
	}
	// Offline nodes are listed but never chosen.
	_, err := p.Place(ctx, openai.NodeRequest{Model: store.Model{ID: "m"}})
	var rej *scheduler.Rejection
	if !errors.As(err, &rej) {
		t.Fatalf("Place on an offline node: %v", err)
	}
	_ = p.Heartbeat(ctx, reg.snap.Nodes["a"], heartbeat("a", "m", 2, true))
	if got := p.Describe(ctx, reg.snap.Nodes["a"]).GetStatus(); got != "healthy" {
		t.Fatalf("after a new heartbeat: %s", got)
	}
}

func TestThreeFailedCallsMakeANodeSuspect(t *testing.T) {
	clk := &clock{now: time.Unix(1_000_000, 0)}
	reg := registered("a")
	p := newPool(t, clk, reg, &keys{})
	ctx := context.Background()
	_ = p.Heartbeat(ctx, reg.snap.Nodes["a"], heartbeat("a", "m", 8, true))
	for i := 0; i < 3; i++ {
		l, err := p.Place(ctx, openai.NodeRequest{Model: store.Model{ID: "m"}})
		if err != nil {
			t.Fatal(err)
		}
		l.Done(openai.NodeResult{Failed: true})
	}
	if got := p.Describe(ctx, reg.snap.Nodes["a"]).GetStatus(); got != "suspect" {
		t.Fatalf("after 3 failures: %s", got)
	}
	// A suspect node is still used when it is the only one; a success clears it.
	l, err := p.Place(ctx, openai.NodeRequest{Model: store.Model{ID: "m"}})
	if err != nil {
		t.Fatal(err)
	}
	l.Done(openai.NodeResult{Status: 200, OutputTokens: 10, Generation: time.Second, InputTokens: 100, TTFT: 50 * time.Millisecond})
	d := p.Describe(ctx, reg.snap.Nodes["a"])
	if d.GetStatus() != "healthy" || d.GetModels()[0].GetTps() == 0 {
		t.Fatalf("after a success: %v", d)
	}
}

func TestPlaceSlotsKeysAndTargets(t *testing.T) {
	clk := &clock{now: time.Unix(1_000_000, 0)}
	reg := registered("a", "b")
	k := &keys{}
	p := newPool(t, clk, reg, k)
	ctx := context.Background()
	_ = p.Heartbeat(ctx, reg.snap.Nodes["a"], heartbeat("a", "llama3:latest", 1, true))
	_ = p.Heartbeat(ctx, reg.snap.Nodes["b"], heartbeat("b", "llama3", 1, true))

	req := openai.NodeRequest{Model: store.Model{ID: "llama", UpstreamModel: "llama3"}}
	l1, err := p.Place(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := p.Place(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if l1.Target().ID == l2.Target().ID {
		t.Fatalf("both placed on %s although each node has one slot", l1.Target().ID)
	}
	for _, l := range []openai.NodeLease{l1, l2} {
		tg := l.Target()
		if tg.BaseURL != "http://10.0.0.1:8081/v1" || tg.APIKey != "syn_key_of_"+tg.ID || tg.Kind != "node" {
			t.Fatalf("target = %+v", tg)
		}
	}
	_, err = p.Place(ctx, req)
	var rej *scheduler.Rejection
	if !errors.As(err, &rej) || rej.Reason != scheduler.NoSlot {
		t.Fatalf("third Place: %v", err)
	}
	l1.Done(openai.NodeResult{Status: 200})
	l1.Done(openai.NodeResult{Status: 200}) // twice is harmless
	l3, err := p.Place(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// The key is opened once and kept: the store is not asked per request,
	// and a store outage does not stop calls.
	calls := k.calls
	k.down = true
	l3.Done(openai.NodeResult{})
	if _, err := p.Place(ctx, req); err != nil {
		t.Fatalf("Place with the store down: %v", err)
	}
	if k.calls != calls {
		t.Fatalf("the store was asked for a known key (%d → %d calls)", calls, k.calls)
	}
	l2.Done(openai.NodeResult{})
}

func TestDrainingNodesGetNothing(t *testing.T) {
	clk := &clock{now: time.Unix(1_000_000, 0)}
	reg := registered("a", "b")
	p := newPool(t, clk, reg, &keys{})
	ctx := context.Background()
	hb := heartbeat("a", "m", 4, true)
	hb.Draining = true
	_ = p.Heartbeat(ctx, reg.snap.Nodes["a"], hb)
	_ = p.Heartbeat(ctx, reg.snap.Nodes["b"], heartbeat("b", "m", 4, true))
	for i := 0; i < 10; i++ {
		l, err := p.Place(ctx, openai.NodeRequest{Model: store.Model{ID: "m"}})
		if err != nil {
			t.Fatal(err)
		}
		if l.Target().ID != "b" {
			t.Fatal("a draining node got a request")
		}
		l.Done(openai.NodeResult{})
	}
	// DrainNode from the admin side works the same way.
	reg.snap.Nodes["b"] = store.Node{ID: "b", Drain: true, Weight: 1}
	if _, err := p.Place(ctx, openai.NodeRequest{Model: store.Model{ID: "m"}}); err == nil {
		t.Fatal("a node drained by the admin got a request")
	}
	if !p.Describe(ctx, reg.snap.Nodes["b"]).GetDraining() {
		t.Fatal("Describe does not show the drain")
	}
}

func TestSharedPoolAcrossReplicas(t *testing.T) {
	// Two replicas over the same (per-process) states: B learns of A's node.
	states := redisstate.NewNodeStates(nil, redisstate.NodeStatesOptions{})
	clk := &clock{now: time.Now()}
	reg := registered("a")
	a := nodes.New(nodes.Options{Registry: reg, Keys: &keys{}, Opener: plainOpener{}, Now: clk.Now, States: states})
	b := nodes.New(nodes.Options{Registry: reg, Keys: &keys{}, Opener: plainOpener{}, Now: clk.Now, States: states})
	ctx := context.Background()
	_ = a.Heartbeat(ctx, reg.snap.Nodes["a"], heartbeat("a", "m", 4, true))
	ctx2, cancel := context.WithCancel(ctx)
	go b.Run(ctx2)
	defer cancel()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && b.Describe(ctx, reg.snap.Nodes["a"]).GetStatus() != "healthy" {
		time.Sleep(10 * time.Millisecond)
	}
	if got := b.Describe(ctx, reg.snap.Nodes["a"]).GetStatus(); got != "healthy" {
		t.Fatalf("replica B sees node a as %s", got)
	}
}

// blockingKeys answers the first lookup of each node and then hangs until
// its caller gives up, as a frozen database does.
type blockingKeys struct {
	keys
	mu      sync.Mutex
	hang    bool
	waiting chan struct{}
}

func (b *blockingKeys) NodeKey(ctx context.Context, id string) (store.Key, error) {
	b.mu.Lock()
	hang := b.hang
	b.mu.Unlock()
	if !hang {
		return b.keys.NodeKey(ctx, id)
	}
	select {
	case b.waiting <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return store.Key{}, errors.Join(store.ErrUnavailable, ctx.Err())
}

// TestKeyCheckNeverHoldsACall: once a node's key is known, its periodic
// check against the store runs in the background, so a hung database holds
// no call; the key in hand keeps being used.
func TestKeyCheckNeverHoldsACall(t *testing.T) {
	clk := &clock{now: time.Unix(1_000_000, 0)}
	reg := registered("a")
	k := &blockingKeys{waiting: make(chan struct{}, 1)}
	p := nodes.New(nodes.Options{Registry: reg, Keys: k, Opener: plainOpener{}, Now: clk.Now,
		Leaser: redisstate.NewLeaser(nil, redisstate.LeaserOptions{})})
	ctx := context.Background()
	_ = p.Heartbeat(ctx, reg.snap.Nodes["a"], heartbeat("a", "m", 8, true))
	req := openai.NodeRequest{Model: store.Model{ID: "m"}}
	l, err := p.Place(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	l.Done(openai.NodeResult{Status: 200})

	k.mu.Lock()
	k.hang = true
	k.mu.Unlock()
	clk.add(time.Minute) // the key is due for a check
	_ = p.Heartbeat(ctx, reg.snap.Nodes["a"], heartbeat("a", "m", 8, true))
	for i := range 3 {
		start := time.Now()
		l, err := p.Place(ctx, req)
		if err != nil {
			t.Fatalf("Place %d with the store hung: %v", i, err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("Place %d waited %v on the hung store", i, took)
		}
		if l.Target().APIKey != "syn_key_of_a" {
			t.Fatalf("target key = %q", l.Target().APIKey)
		}
		l.Done(openai.NodeResult{Status: 200})
	}
	select {
	case <-k.waiting:
	case <-time.After(5 * time.Second):
		t.Fatal("the key was not checked in the background")
	}
}
