package redisstate

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-ai/switchyard/internal/testenv"
)

// anotherReplica is a second *Redis with its own client and connections on
// the same server and prefix as r: what a second gateway replica holds.
func anotherReplica(t testing.TB, r *Redis, o Options) *Redis {
	t.Helper()
	o.Prefix = r.prefix
	if o.Timeout == 0 {
		o.Timeout = testTimeout
	}
	return guarded(t, testenv.RedisURL(), o, nil)
}

func acquire(t testing.TB, l *Leaser, node, model string, slots int) *Lease {
	t.Helper()
	ls, err := l.Acquire(context.Background(), node, model, slots)
	if err != nil {
		t.Fatalf("Acquire(%s, %s, %d): %v", node, model, slots, err)
	}
	return ls
}

func release(t testing.TB, ls *Lease) {
	t.Helper()
	if err := ls.Release(context.Background()); err != nil {
		t.Errorf("Release: %v", err)
	}
}

func wantNoSlot(t testing.TB, l *Leaser, node, model string, slots int) {
	t.Helper()
	ls, err := l.Acquire(context.Background(), node, model, slots)
	if err == nil {
		ls.Release(context.Background())
		t.Fatalf("Acquire(%s, %s, %d) succeeded, want ErrNoSlot", node, model, slots)
	}
	if !errors.Is(err, ErrNoSlot) {
		t.Fatalf("Acquire(%s, %s, %d) = %v, want ErrNoSlot", node, model, slots, err)
	}
}

func counts(t testing.TB, l *Leaser, pairs ...NodeModel) map[NodeModel]int {
	t.Helper()
	got, err := l.Counts(context.Background(), pairs)
	if err != nil {
		t.Fatalf("Counts: %v", err)
	}
	return got
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// roundTrips counts the commands and pipelines a client sends: each is one
// round trip. With only set, it counts only commands of that name.
type roundTrips struct {
	only string
	n    atomic.Int64
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.only == "" || cmd.Name() == h.only {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.counts(cmds) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

func (h *roundTrips) counts(cmds []redis.Cmder) bool {
	if len(cmds) == 0 {
		return false
	}
	// A new connection's HELLO and CLIENT SETINFO come as a pipeline of
	// their own: set-up, not the operation under test.
	if n := cmds[0].Name(); n == "hello" || n == "client" || n == "auth" || n == "select" {
		return false
	}
	if h.only == "" {
		return true
	}
	for _, c := range cmds {
		if c.Name() == h.only {
			return true
		}
	}
	return false
}

func countRoundTrips(r *Redis) *roundTrips { return countCommands(r, "") }

func countCommands(r *Redis, only string) *roundTrips {
	h := &roundTrips{only: only}
	r.client.AddHook(h)
	return h
}

// lockedBuffer is a log sink that the renewal goroutine and the test may
// use at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.b.String(), s)
}

func TestLeaseSlots(t *testing.T) {
	r, _ := sharedRedis(t, Options{})
	l := NewLeaser(r, LeaserOptions{})
	const node, model = "anna-mac", "gemma4:26b-a4b-it-qat"

	a := acquire(t, l, node, model, 2)
	b := acquire(t, l, node, model, 2)
	wantNoSlot(t, l, node, model, 2)
	if a.Node() != node || a.Model() != model {
		t.Errorf("lease is for %s/%s, want %s/%s", a.Node(), a.Model(), node, model)
	}
	if len(a.ID()) != 32 || a.ID() == b.ID() {
		t.Errorf("lease ids %q and %q: want two different 16-byte hex ids", a.ID(), b.ID())
	}
	if !a.shared || !b.shared {
		t.Fatal("leases taken in the fallback with Redis up")
	}
	// Another model of the same node has slots of its own.
	release(t, acquire(t, l, node, "other", 1))

	release(t, a)
	release(t, a) // idempotent
	c := acquire(t, l, node, model, 2)
	wantNoSlot(t, l, node, model, 2)
	release(t, b)
	release(t, c)
	if got := counts(t, l, NodeModel{node, model})[NodeModel{node, model}]; got != 0 {
		t.Errorf("%d leases counted after every release, want 0", got)
	}
	wantNoSlot(t, l, node, model, 0)
}

// A node's keys carry the node's hash tag, so they sit in one Cluster slot,
// and expire once their last lease would.
func TestLeaseKeys(t *testing.T) {
	r, raw := sharedRedis(t, Options{})
	l := NewLeaser(r, LeaserOptions{TTL: 5 * time.Second})
	ctx := context.Background()
	a := acquire(t, l, "anna-mac", "gemma4:26b", 2)
	defer release(t, a)
	b := acquire(t, l, "anna-mac", "qwen3:8b", 2)
	defer release(t, b)

	keys, err := raw.Keys(ctx, "*"+r.prefix+"*").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	tag := "{" + r.prefix + "node:anna-mac}"
	want := map[string]bool{tag + ":slots:gemma4:26b": true, tag + ":slots:qwen3:8b": true}
	if len(keys) != len(want) {
		t.Errorf("keys = %q, want %d", keys, len(want))
	}
	for _, k := range keys {
		if !want[k] {
			t.Errorf("unexpected key %q; want the hash tag %q", k, tag)
		}
		if ttl := raw.PTTL(ctx, k).Val(); ttl <= 0 || ttl > 5*time.Second {
			t.Errorf("%s PTTL = %v, want in (0, 5s]", k, ttl)
		}
	}
	members := raw.ZRange(ctx, tag+":slots:gemma4:26b", 0, -1).Val()
	if len(members) != 1 || members[0] != a.ID() {
		t.Errorf("members = %q, want the lease id %q", members, a.ID())
	}
}

// Two replicas with their own clients race for one node's three slots: the
// script keeps them at three, and every caller gets a slot in the end.
func TestReplicasNeverExceedSlots(t *testing.T) {
	var errs errorLog
	r1, _ := sharedRedis(t, Options{OnError: errs.record})
	r2 := anotherReplica(t, r1, Options{OnError: errs.record})
	replicas := []*Leaser{NewLeaser(r1, LeaserOptions{}), NewLeaser(r2, LeaserOptions{})}
	const slots, perReplica, rounds = 3, 20, 2

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var inUse, peak, refusals, served atomic.Int64
	failures := make(chan error, 2*perReplica)
	var wg sync.WaitGroup
	for _, l := range replicas {
		for range perReplica {
			wg.Go(func() {
				for range rounds {
					for {
						ls, err := l.Acquire(ctx, "hot", "m", slots)
						if errors.Is(err, ErrNoSlot) {
							refusals.Add(1)
							time.Sleep(2 * time.Millisecond)
							continue
						}
						if err != nil {
							failures <- err
							return
						}
						n := inUse.Add(1)
						for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
						}
						time.Sleep(2 * time.Millisecond)
						inUse.Add(-1)
						if err := ls.Release(ctx); err != nil {
							failures <- err
							return
						}
						served.Add(1)
						break
					}
				}
			})
		}
	}
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Errorf("Acquire/Release: %v", err)
	}
	if p := peak.Load(); p > slots {
		t.Errorf("%d leases held at once, want at most %d", p, slots)
	}
	if got, want := served.Load(), int64(2*perReplica*rounds); got != want {
		t.Errorf("%d calls served, want %d", got, want)
	}
	if refusals.Load() == 0 {
		t.Error("no Acquire was ever refused: the test did not contend")
	}
	if errs.count() != 0 || !r1.Available() || !r2.Available() {
		t.Errorf("Redis errors during the race (%d): the replicas may have counted per replica", errs.count())
	}
	t.Logf("peak %d, %d refusals", peak.Load(), refusals.Load())
}

// A lease held for five TTLs is renewed all along: counted, and its slot
// never given to another replica.
func TestLeaseRenewal(t *testing.T) {
	r1, _ := sharedRedis(t, Options{})
	r2 := anotherReplica(t, r1, Options{})
	o := LeaserOptions{TTL: 300 * time.Millisecond, RenewEvery: 100 * time.Millisecond}
	a, b := NewLeaser(r1, o), NewLeaser(r2, o)
	nm := NodeModel{"n", "m"}

	held := acquire(t, a, nm.Node, nm.Model, 1)
	end := time.Now().Add(5 * o.TTL)
	for time.Now().Before(end) {
		wantNoSlot(t, b, nm.Node, nm.Model, 1)
		if got := counts(t, b, nm)[nm]; got != 1 {
			t.Fatalf("another replica counts %d leases, want 1", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	release(t, held)
	release(t, acquire(t, b, nm.Node, nm.Model, 1))
}

// A replica that dies holds its leases no longer than the TTL: nothing
// renews them.
func TestAbandonedLeaseExpires(t *testing.T) {
	r1, _ := sharedRedis(t, Options{})
	r2 := anotherReplica(t, r1, Options{})
	o := LeaserOptions{TTL: 300 * time.Millisecond, RenewEvery: 100 * time.Millisecond}
	a, b := NewLeaser(r1, o), NewLeaser(r2, o)

	held := acquire(t, a, "n", "m", 1)
	time.Sleep(o.TTL + 50*time.Millisecond) // renewed past its first TTL
	wantNoSlot(t, b, "n", "m", 1)

	held.halt() // the replica is gone: no more renewals, no release
	gone := time.Now()
	wantNoSlot(t, b, "n", "m", 1) // stopping is not releasing
	var ls *Lease
	waitFor(t, 3*time.Second, "another replica acquires the abandoned slot", func() bool {
		var err error
		ls, err = b.Acquire(context.Background(), "n", "m", 1)
		return err == nil
	})
	freed := time.Since(gone)
	defer release(t, ls)
	if !ls.shared {
		t.Fatal("the slot was taken in the fallback, not freed in Redis")
	}
	t.Logf("slot freed %v after the replica stopped", freed)
}

// A lease that vanished from Redis while its call runs (it expired during a
// Redis hiccup) is put back by the next renewal when there is room; when
// there is none it is logged once, and put back once a slot frees.
func TestRenewalPutsBackAVanishedLease(t *testing.T) {
	r, raw := sharedRedis(t, Options{})
	var logs lockedBuffer
	l := NewLeaser(r, LeaserOptions{
		TTL: 5 * time.Second, RenewEvery: 30 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	ctx := context.Background()
	ls := acquire(t, l, "n", "m", 1)
	defer release(t, ls)
	key := l.key(NodeModel{"n", "m"})
	present := func() bool { return raw.ZScore(ctx, key, ls.ID()).Err() == nil }

	raw.ZRem(ctx, key, ls.ID())
	waitFor(t, 2*time.Second, "the vanished lease is put back", func() bool { return logs.count("held again") == 1 })
	if !present() {
		t.Fatal("the lease is not in Redis after it was logged as put back")
	}

	// Its slot is taken meanwhile.
	if _, err := raw.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, key, ls.ID())
		p.ZAdd(ctx, key, redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "intruder"})
		return nil
	}); err != nil {
		t.Fatalf("replace the lease: %v", err)
	}
	waitFor(t, 2*time.Second, "the lost lease is logged", func() bool { return logs.count("oversubscribed") > 0 })
	time.Sleep(5 * l.renewEvery)
	if present() {
		t.Fatal("the renewal took a slot that was not free")
	}
	if n := logs.count("oversubscribed"); n != 1 {
		t.Errorf("the lost lease was logged %d times, want once", n)
	}

	raw.ZRem(ctx, key, "intruder")
	waitFor(t, 2*time.Second, "the lost lease is put back once a slot frees", present)
}

func TestLeaseCounts(t *testing.T) {
	r, raw := sharedRedis(t, Options{})
	l := NewLeaser(r, LeaserOptions{})
	ctx := context.Background()
	var held []*Lease
	for _, p := range []struct {
		nm NodeModel
		n  int
	}{{NodeModel{"n1", "m1"}, 2}, {NodeModel{"n1", "m2"}, 1}, {NodeModel{"n2", "m1"}, 3}} {
		for range p.n {
			held = append(held, acquire(t, l, p.nm.Node, p.nm.Model, 4))
		}
	}
	defer func() {
		for _, ls := range held {
			release(t, ls)
		}
	}()
	// An expired member left by a dead replica, not yet swept, is not
	// counted; an unexpired one is.
	dead := NodeModel{"n3", "m1"}
	raw.ZAdd(ctx, l.key(dead),
		redis.Z{Score: float64(time.Now().Add(-time.Minute).UnixMilli()), Member: "expired"},
		redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: "live"})

	pairs := []NodeModel{{"n1", "m1"}, {"n1", "m2"}, {"n2", "m1"}, dead, {"n9", "none"}}
	counts(t, l, pairs...) // loads the script
	trips := countRoundTrips(r)
	got := counts(t, l, pairs...)
	want := map[NodeModel]int{{"n1", "m1"}: 2, {"n1", "m2"}: 1, {"n2", "m1"}: 3, dead: 1, {"n9", "none"}: 0}
	for nm, w := range want {
		if got[nm] != w {
			t.Errorf("Counts[%v] = %d, want %d", nm, got[nm], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("Counts returned %d pairs, want %d", len(got), len(want))
	}
	if n := trips.n.Load(); n != 1 {
		t.Errorf("Counts for %d pairs took %d round trips, want 1", len(pairs), n)
	}
	if got, err := l.Counts(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("Counts(nil) = %v, %v", got, err)
	}
}

// A Redis that lost its script cache (restarted, failed over) answers the
// pipelined EVALSHA with NOSCRIPT; Counts then sends the script itself.
func TestLeaseCountsOnAFreshRedis(t *testing.T) {
	srv := startPrivateRedis(t)
	r := guarded(t, srv.url(), Options{Timeout: testTimeout}, nil)
	l := NewLeaser(r, LeaserOptions{})
	ls := acquire(t, l, "n", "m", 2)
	defer release(t, ls)
	shas, evals := countCommands(r, "evalsha"), countCommands(r, "eval")
	for i, want := range []struct{ shas, evals int64 }{{1, 1}, {1, 0}} {
		shas.n.Store(0)
		evals.n.Store(0)
		if got := counts(t, l, NodeModel{"n", "m"}, NodeModel{"n", "x"}); got[NodeModel{"n", "m"}] != 1 || got[NodeModel{"n", "x"}] != 0 {
			t.Errorf("call %d: Counts = %v", i+1, got)
		}
		if s, e := shas.n.Load(), evals.n.Load(); s != want.shas || e != want.evals {
			t.Errorf("call %d sent %d EVALSHA and %d EVAL pipelines, want %d and %d", i+1, s, e, want.shas, want.evals)
		}
	}
}

// Acquire and Release are one round trip each, once the script is cached.
func TestLeaseRoundTrips(t *testing.T) {
	r, _ := sharedRedis(t, Options{})
	l := NewLeaser(r, LeaserOptions{}) // renewals every 5 s: none during the test
	release(t, acquire(t, l, "n", "m", 1))
	trips := countRoundTrips(r)
	ls := acquire(t, l, "n", "m", 1)
	release(t, ls)
	if n := trips.n.Load(); n != 2 {
		t.Errorf("Acquire+Release took %d round trips, want 2", n)
	}
}

// Release gives the slot back even when the call's context has ended, as
// it has when the client went away.
func TestReleaseAfterTheCallerLeft(t *testing.T) {
	r, _ := sharedRedis(t, Options{})
	l := NewLeaser(r, LeaserOptions{})
	ls := acquire(t, l, "n", "m", 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ls.Release(ctx); err != nil {
		t.Fatalf("Release with an ended context: %v", err)
	}
	release(t, acquire(t, l, "n", "m", 1))
	if _, err := l.Acquire(ctx, "n", "m", 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire with an ended context = %v, want context.Canceled", err)
	}
}

// Without Redis each replica holds the node's slots by itself: the limit
// holds per replica, and N replicas may hold N× the slots.
func TestLeasesWithoutRedis(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    func(t *testing.T) *Redis
	}{
		{"none configured", func(*testing.T) *Redis { return nil }},
		{"unreachable", func(t *testing.T) *Redis {
			return guarded(t, "redis://"+closedAddr(t)+"/0", Options{}, nil)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nm := NodeModel{"n", "m"}
			l := NewLeaser(tc.r(t), LeaserOptions{})
			a := acquire(t, l, nm.Node, nm.Model, 2)
			b := acquire(t, l, nm.Node, nm.Model, 2)
			if a.shared || b.shared {
				t.Fatal("a lease is marked as taken in Redis")
			}
			wantNoSlot(t, l, nm.Node, nm.Model, 2)
			if got := counts(t, l, nm, NodeModel{"n", "x"}); got[nm] != 2 || got[NodeModel{"n", "x"}] != 0 {
				t.Errorf("Counts = %v, want 2 and 0", got)
			}
			release(t, a)
			c := acquire(t, l, nm.Node, nm.Model, 2)
			release(t, b)
			release(t, c)
			if got := counts(t, l, nm)[nm]; got != 0 {
				t.Errorf("%d leases counted after every release", got)
			}

			// Another replica in the same outage counts its own.
			other := NewLeaser(tc.r(t), LeaserOptions{})
			x, y := acquire(t, l, nm.Node, nm.Model, 2), acquire(t, l, nm.Node, nm.Model, 2)
			z, w := acquire(t, other, nm.Node, nm.Model, 2), acquire(t, other, nm.Node, nm.Model, 2)
			for _, ls := range []*Lease{x, y, z, w} {
				release(t, ls)
			}
		})
	}
}

// Fallback leases expire like shared ones when nothing renews them.
func TestFallbackLeaseExpires(t *testing.T) {
	clk := newFakeClock(base)
	l := NewLeaser(nil, LeaserOptions{TTL: time.Second, Now: clk.Now})
	held := acquire(t, l, "n", "m", 1)
	held.halt()
	wantNoSlot(t, l, "n", "m", 1)
	clk.Advance(time.Second)
	release(t, acquire(t, l, "n", "m", 1))
}

// Redis goes away under leases and comes back: the replica counts per
// replica meanwhile, its own Redis leases included, then returns to Redis
// by itself, where the renewals put back the leases the restart lost.
func TestLeasesFollowRedisOutAndBack(t *testing.T) {
	srv := startPrivateRedis(t)
	r := guarded(t, srv.url(), Options{Timeout: 500 * time.Millisecond}, nil)
	l := NewLeaser(r, LeaserOptions{TTL: 2 * time.Second, RenewEvery: 100 * time.Millisecond})
	nm := NodeModel{"n", "m"}
	const slots = 3

	before := acquire(t, l, nm.Node, nm.Model, slots)
	defer release(t, before)
	if !before.shared {
		t.Fatal("lease not taken in Redis")
	}

	srv.kill()
	during := acquire(t, l, nm.Node, nm.Model, slots)
	during2 := acquire(t, l, nm.Node, nm.Model, slots)
	if during.shared || during2.shared {
		t.Fatal("a lease taken with Redis killed is marked shared")
	}
	// The lease taken in Redis still counts here.
	wantNoSlot(t, l, nm.Node, nm.Model, slots)
	if got := counts(t, l, nm)[nm]; got != 3 {
		t.Errorf("Counts during the outage = %d, want 3", got)
	}
	release(t, during2)

	srv.start() // empty: the restart lost every lease
	var after *Lease
	waitFor(t, 10*time.Second, "leases are taken in Redis again", func() bool {
		ls, err := l.Acquire(context.Background(), nm.Node, nm.Model, slots)
		if err != nil {
			return false
		}
		if !ls.shared {
			release(t, ls)
			return false
		}
		after = ls
		return true
	})
	defer release(t, after)

	raw := redis.NewClient(&redis.Options{Addr: srv.addr})
	defer raw.Close()
	ctx := context.Background()
	key := l.key(nm)
	waitFor(t, 5*time.Second, "the lease held across the outage is put back", func() bool {
		return raw.ZScore(ctx, key, before.ID()).Err() == nil
	})
	if raw.ZScore(ctx, key, during.ID()).Err() == nil {
		t.Error("a fallback lease was written to Redis")
	}
	// Redis knows two; the fallback lease still running is added.
	if got := counts(t, l, nm)[nm]; got != 3 {
		t.Errorf("Counts after recovery = %d, want 3 (2 in Redis + 1 fallback)", got)
	}
	zrems := countCommands(r, "zrem")
	release(t, during) // released in the fallback: no Redis call
	if n := zrems.n.Load(); n != 0 {
		t.Errorf("releasing a fallback lease sent %d commands to Redis", n)
	}
	if got := raw.ZCard(ctx, key).Val(); got != 2 {
		t.Errorf("%d leases in Redis, want 2", got)
	}
}

func TestLeaserOptions(t *testing.T) {
	for _, tc := range []struct {
		name           string
		o              LeaserOptions
		ttl, renewEach time.Duration
	}{
		{"defaults", LeaserOptions{}, 15 * time.Second, 5 * time.Second},
		{"ttl only", LeaserOptions{TTL: 30 * time.Second}, 30 * time.Second, 10 * time.Second},
		{"both", LeaserOptions{TTL: time.Second, RenewEvery: 200 * time.Millisecond}, time.Second, 200 * time.Millisecond},
		{"renewal not shorter than TTL", LeaserOptions{TTL: time.Second, RenewEvery: time.Second}, time.Second, time.Second / 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLeaser(nil, tc.o)
			if l.ttl != tc.ttl || l.renewEvery != tc.renewEach {
				t.Errorf("TTL %v, renewal every %v; want %v and %v", l.ttl, l.renewEvery, tc.ttl, tc.renewEach)
			}
		})
	}
}

func BenchmarkLeaseAcquireRelease(b *testing.B) {
	r, _ := sharedRedis(b, Options{})
	l := NewLeaser(r, LeaserOptions{})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		ls, err := l.Acquire(ctx, "bench", "m", 1)
		if err != nil {
			b.Fatalf("Acquire: %v", err)
		}
		if err := ls.Release(ctx); err != nil {
			b.Fatalf("Release: %v", err)
		}
	}
	if !r.Available() {
		b.Fatal("Redis became unavailable: the benchmark measured the fallback")
	}
}

func BenchmarkLeaseAcquireReleaseFallback(b *testing.B) {
	l := NewLeaser(nil, LeaserOptions{})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		ls, err := l.Acquire(ctx, "bench", "m", 1)
		if err != nil {
			b.Fatalf("Acquire: %v", err)
		}
		ls.Release(ctx)
	}
}

func BenchmarkLeaseCounts100(b *testing.B) {
	r, _ := sharedRedis(b, Options{})
	l := NewLeaser(r, LeaserOptions{})
	ctx := context.Background()
	pairs := make([]NodeModel, 100)
	for i := range pairs {
		pairs[i] = NodeModel{Node: "node-" + strconv.Itoa(i), Model: "m"}
	}
	ls := acquire(b, l, pairs[0].Node, pairs[0].Model, 1)
	defer ls.Release(ctx)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Counts(ctx, pairs); err != nil {
			b.Fatalf("Counts: %v", err)
		}
	}
	if !r.Available() {
		b.Fatal("Redis became unavailable: the benchmark measured the fallback")
	}
}
