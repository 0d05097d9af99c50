package redisstate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNoSlot says every slot of the node for the model is leased. It is a
// refusal, not a failure: the caller moves on to the next candidate.
var ErrNoSlot = errors.New("no free slot on the node")

// DefaultLeaseTTL is the lease TTL when LeaserOptions gives none (SPEC §4.6).
const DefaultLeaseTTL = 15 * time.Second

// LeaserOptions configures a Leaser.
type LeaserOptions struct {
	// TTL is how long a lease lives without renewal: how long the slots of
	// a crashed replica stay taken. Zero means DefaultLeaseTTL.
	TTL time.Duration
	// RenewEvery is how often a held lease is renewed. Zero means TTL/3, so
	// that two renewals in a row may fail (a Redis hiccup) before the lease
	// expires. A value ≥ TTL would let leases lapse between renewals and is
	// replaced by TTL/3.
	RenewEvery time.Duration
	// Logger receives leases lost while their call still runs; nil discards.
	Logger *slog.Logger
	// Now is the clock of the per-replica fallback; nil means the Redis's
	// clock, else time.Now. Leases in Redis expire by Redis's own clock.
	Now func() time.Time
}

// NodeModel names one node's slots for one model.
type NodeModel struct{ Node, Model string }

// Leaser hands out slot leases on nodes (SPEC §4.6), shared by every
// replica through Redis.
//
// A node's slots for a model are a sorted set of lease ids scored by expiry
// in Unix milliseconds. One Lua script drops the expired members, counts
// the rest and adds the new lease if there is room, so replicas racing for
// the last slot cannot both get it. Expiry uses Redis's clock (TIME inside
// the scripts), never a replica's: replicas' clocks may disagree, Redis has
// one. Scripts that call TIME and then write need effects replication,
// which is the default from Redis 5.
//
// The key is {<prefix>node:<id>}:slots:<model>. The hash tag covers the
// node id, so every key of one node lives in one Redis Cluster slot and
// nodes spread over the cluster. A node id holding "}" only ends the tag
// early: keys stay distinct, and all of that node's keys still share a tag.
//
// While Redis is unavailable (none configured, the breaker open, or a
// failed call) leases are counted per replica, in memory, against the same
// slots limit. Each replica then uses every slot of the node by itself, so
// N replicas may put up to N× the slots on a node for the length of the
// outage; refusing every local request instead would turn a Redis outage
// into a local-GPU outage. The per-replica count includes the leases this
// replica took in Redis and still holds, so an outage does not start it
// from zero. A lease taken in the fallback stays there until released,
// even after Redis returns: the shared count misses it only until its call
// ends.
type Leaser struct {
	redis        *Redis
	ttl          time.Duration
	renewEvery   time.Duration
	logger       *slog.Logger
	now          func() time.Time
	acquire      *redis.Script
	renew        *redis.Script
	count        *redis.Script
	nodeKeyStart string // "{" + prefix + "node:"
	local        localSlots
}

// NewLeaser returns a Leaser on r; a nil r leases per replica only.
func NewLeaser(r *Redis, o LeaserOptions) *Leaser {
	l := &Leaser{
		redis:      r,
		ttl:        o.TTL,
		renewEvery: o.RenewEvery,
		logger:     o.Logger,
		now:        o.Now,
		acquire:    redis.NewScript(acquireLua),
		renew:      redis.NewScript(renewLua),
		count:      redis.NewScript(countLua),
		local:      localSlots{pairs: map[NodeModel]map[string]localLease{}},
	}
	if l.logger == nil {
		l.logger = slog.New(slog.DiscardHandler)
	}
	// Scores are whole milliseconds.
	if l.ttl < time.Millisecond {
		l.ttl = DefaultLeaseTTL
	}
	if l.renewEvery >= l.ttl {
		l.logger.Warn("lease renewal interval is not shorter than the lease TTL; using TTL/3",
			"renew_every", l.renewEvery, "ttl", l.ttl)
		l.renewEvery = 0
	}
	if l.renewEvery <= 0 {
		l.renewEvery = max(l.ttl/3, time.Millisecond)
	}
	prefix := ""
	if r != nil {
		prefix = r.prefix
		if l.now == nil {
			l.now = r.now
		}
	}
	if l.now == nil {
		l.now = time.Now
	}
	l.nodeKeyStart = "{" + prefix + "node:"
	return l
}

func (l *Leaser) key(nm NodeModel) string {
	return l.nodeKeyStart + nm.Node + "}:slots:" + nm.Model
}

// serverNowLua reads Redis's clock in milliseconds. Lua numbers are
// doubles, exact for integers up to 2^53, far beyond any millisecond time.
const serverNowLua = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// extendKeyLua keeps the key at least as long as its longest lease, also
// when replicas run with different TTLs, so that one replica's shorter TTL
// never drops another's lease with the key.
const extendKeyLua = `
local function extend(key, ttl)
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
end
`

// acquireLua: drop expired, count, add if there is room.
// KEYS: slots key. ARGV: lease id, slots, TTL ms. Returns 1 leased, 0 full.
const acquireLua = serverNowLua + extendKeyLua + `
local slots, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= slots then return 0 end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
extend(KEYS[1], ttl)
return 1
`

// renewLua pushes a live lease's expiry to now+TTL. A lease that is gone
// (it expired while Redis could not be reached, or Redis lost its data)
// still occupies the node, so it is put back when there is room.
// KEYS: slots key. ARGV: lease id, slots, TTL ms.
// Returns 1 renewed, 2 put back, 0 gone and no room.
const renewLua = serverNowLua + extendKeyLua + `
local slots, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) > now then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  extend(KEYS[1], ttl)
  return 1
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= slots then return 0 end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
extend(KEYS[1], ttl)
return 2
`

// countLua counts the unexpired leases by Redis's clock, without writing,
// so that Counts may run it on many keys in one pipeline.
// KEYS: slots key. Returns the count.
const countLua = serverNowLua + `
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
`

// Renewal outcomes, as renewLua returns them.
const (
	renewLost    = 0
	renewOK      = 1
	renewPutBack = 2
)

// Acquire leases one of the node's slots for the model, or returns an
// error wrapping ErrNoSlot when all of them are leased. The lease renews
// itself until Release, however long the call runs; its renewal does not
// follow ctx, which only bounds the acquisition, so the caller must
// Release it (defer). A Redis that cannot be used is answered by the
// per-replica count; the error is otherwise non-nil only when ctx ended.
func (l *Leaser) Acquire(ctx context.Context, node, model string, slots int) (*Lease, error) {
	nm := NodeModel{Node: node, Model: model}
	if slots <= 0 {
		return nil, fmt.Errorf("node %q, model %q: %w", node, model, ErrNoSlot)
	}
	ls := &Lease{
		leaser: l,
		nm:     nm,
		id:     newLeaseID(),
		slots:  slots,
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	if l.redis != nil {
		ls.key = l.key(nm)
		var got int64
		err := l.redis.Do(ctx, "leases.acquire", func(ctx context.Context, c redis.UniversalClient) error {
			var err error
			got, err = l.acquire.Run(ctx, c, []string{ls.key}, ls.id, slots, l.ttl.Milliseconds()).Int64()
			return err
		})
		switch {
		case err == nil && got == 1:
			ls.shared = true
			l.local.add(nm, ls.id, false, l.now().Add(l.ttl))
			go ls.renewLoop()
			return ls, nil
		case err == nil:
			return nil, fmt.Errorf("node %q, model %q: %w", node, model, ErrNoSlot)
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
	}
	if !l.local.acquire(nm, ls.id, slots, l.now(), l.ttl) {
		return nil, fmt.Errorf("node %q, model %q: %w", node, model, ErrNoSlot)
	}
	go ls.renewLoop()
	return ls, nil
}

// Counts returns how many unexpired leases each node/model pair has, in one
// pipelined round trip (on Redis Cluster, one per shard, in parallel), so
// that a replica can refresh its view of how busy each node is across
// replicas without asking per request. Pairs without leases count 0.
// Leases this replica took in its fallback are added, since Redis does not
// know them. A Redis that cannot be used is answered by this replica's own
// count; the error is otherwise non-nil only when ctx ended.
func (l *Leaser) Counts(ctx context.Context, pairs []NodeModel) (map[NodeModel]int, error) {
	out := make(map[NodeModel]int, len(pairs))
	if len(pairs) == 0 {
		return out, nil
	}
	if l.redis != nil {
		shared, err := l.countShared(ctx, pairs)
		if err == nil {
			now := l.now()
			for i, nm := range pairs {
				_, fallback := l.local.count(nm, now)
				out[nm] = int(shared[i]) + fallback
			}
			return out, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	now := l.now()
	for _, nm := range pairs {
		out[nm], _ = l.local.count(nm, now)
	}
	return out, nil
}

func (l *Leaser) countShared(ctx context.Context, pairs []NodeModel) ([]int64, error) {
	keys := make([]string, len(pairs))
	for i, nm := range pairs {
		keys[i] = l.key(nm)
	}
	counts := make([]int64, len(pairs))
	err := l.redis.Do(ctx, "leases.counts", func(ctx context.Context, c redis.UniversalClient) error {
		run := func(sha bool) (noScript bool, err error) {
			cmds := make([]*redis.Cmd, len(keys))
			_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, k := range keys {
					if sha {
						cmds[i] = l.count.EvalSha(ctx, p, []string{k})
					} else {
						cmds[i] = l.count.Eval(ctx, p, []string{k})
					}
				}
				return nil
			})
			for i, cmd := range cmds {
				n, err := cmd.Int64()
				if err != nil {
					return redis.HasErrorPrefix(err, "NOSCRIPT"), err
				}
				counts[i] = n
			}
			return false, nil
		}
		// EVALSHA keeps the pipeline small; the script text goes only
		// after Redis lost its script cache (a restart, a failover).
		noScript, err := run(true)
		if noScript {
			_, err = run(false)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return counts, nil
}

func newLeaseID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return hex.EncodeToString(b[:])
}

// Lease is one slot held on a node for one call.
type Lease struct {
	leaser *Leaser
	nm     NodeModel
	id     string
	key    string // empty without Redis
	slots  int
	// shared says the lease was taken in Redis; otherwise it lives in this
	// replica's fallback count only, and is released there.
	shared bool

	stop     chan struct{} // closed to end the renewals
	done     chan struct{} // closed when the renewal goroutine has ended
	halting  sync.Once
	releases sync.Once
}

// Node is the id of the node the slot is on.
func (ls *Lease) Node() string { return ls.nm.Node }

// Model is the model the slot is for.
func (ls *Lease) Model() string { return ls.nm.Model }

// ID is the lease's random id, its member in the node's sorted set.
func (ls *Lease) ID() string { return ls.id }

// Release gives the slot back; calling it again does nothing. It is not
// cut short by a cancelled ctx (a client that went away is the usual
// reason a call ends), because a slot left behind stays taken for up to
// the TTL; the Redis timeout still bounds it. If Redis cannot be reached
// the error says so and the lease, no longer renewed, expires after the
// TTL.
func (ls *Lease) Release(ctx context.Context) error {
	var err error
	ls.releases.Do(func() {
		// The renewals end first: one still in flight could otherwise put
		// the lease back after its removal.
		ls.halt()
		l := ls.leaser
		l.local.remove(ls.nm, ls.id)
		if !ls.shared {
			return
		}
		err = l.redis.Do(context.WithoutCancel(ctx), "leases.release", func(ctx context.Context, c redis.UniversalClient) error {
			return c.ZRem(ctx, ls.key, ls.id).Err()
		})
	})
	return err
}

// halt ends the renewals and waits for the goroutine. Without Release it is
// what a crashed replica does to its leases.
func (ls *Lease) halt() {
	ls.halting.Do(func() { close(ls.stop) })
	<-ls.done
}

func (ls *Lease) renewLoop() {
	defer close(ls.done)
	t := time.NewTicker(ls.leaser.renewEvery)
	defer t.Stop()
	lost := false
	for {
		select {
		case <-ls.stop:
			return
		case <-t.C:
		}
		lost = ls.renewOnce(lost)
	}
}

// renewOnce renews the lease where it lives and reports whether it is
// lost in Redis (gone, and its slot taken by others). The lost state is
// carried between renewals so that a lease is logged once when it is lost
// and once when it is back, not every RenewEvery.
func (ls *Lease) renewOnce(lost bool) bool {
	l := ls.leaser
	// The call still runs here, so this replica's count keeps it whatever
	// Redis says.
	l.local.add(ls.nm, ls.id, !ls.shared, l.now().Add(l.ttl))
	if !ls.shared {
		return false
	}
	var got int64
	// The renewals belong to the lease, not to the request that took it;
	// the Redis timeout bounds each.
	err := l.redis.Do(context.Background(), "leases.renew", func(ctx context.Context, c redis.UniversalClient) error {
		var err error
		got, err = l.renew.Run(ctx, c, []string{ls.key}, ls.id, ls.slots, l.ttl.Milliseconds()).Int64()
		return err
	})
	if err != nil {
		// Redis could not be used; the breaker logs that, and the next
		// renewal puts the lease back if it expired meanwhile.
		return lost
	}
	attrs := []any{"node", ls.nm.Node, "model", ls.nm.Model, "lease", ls.id}
	switch got {
	case renewLost:
		if !lost {
			l.logger.Warn("slot lease expired while its call still runs and the slots are taken: the node is oversubscribed until a slot frees", attrs...)
		}
		return true
	case renewPutBack:
		l.logger.Info("slot lease had expired and is held again", attrs...)
	}
	return false
}

// localSlots is the per-replica view: every lease this replica holds, with
// an expiry of its own so that a lease whose renewals stopped frees its
// slot after the TTL here too, as it does in Redis.
type localSlots struct {
	mu    sync.Mutex
	pairs map[NodeModel]map[string]localLease
}

type localLease struct {
	expires  time.Time
	fallback bool // taken here because Redis could not be used
}

// prune drops expired leases; the caller holds mu.
func (s *localSlots) prune(nm NodeModel, now time.Time) map[string]localLease {
	m := s.pairs[nm]
	for id, ll := range m {
		if !ll.expires.After(now) {
			delete(m, id)
		}
	}
	if m != nil && len(m) == 0 {
		delete(s.pairs, nm)
		return nil
	}
	return m
}

// acquire takes a fallback lease if fewer than slots are live.
func (s *localSlots) acquire(nm NodeModel, id string, slots int, now time.Time, ttl time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.prune(nm, now)) >= slots {
		return false
	}
	s.addLocked(nm, id, localLease{expires: now.Add(ttl), fallback: true})
	return true
}

// add records or renews a lease whatever the count.
func (s *localSlots) add(nm NodeModel, id string, fallback bool, expires time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addLocked(nm, id, localLease{expires: expires, fallback: fallback})
}

func (s *localSlots) addLocked(nm NodeModel, id string, ll localLease) {
	m := s.pairs[nm]
	if m == nil {
		m = map[string]localLease{}
		s.pairs[nm] = m
	}
	m[id] = ll
}

func (s *localSlots) remove(nm NodeModel, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.pairs[nm]
	delete(m, id)
	if m != nil && len(m) == 0 {
		delete(s.pairs, nm)
	}
}

// count returns the live leases on nm, and how many of them are fallback
// leases.
func (s *localSlots) count(nm NodeModel, now time.Time) (all, fallback int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.prune(nm, now)
	for _, ll := range m {
		if ll.fallback {
			fallback++
		}
	}
	return len(m), fallback
}
