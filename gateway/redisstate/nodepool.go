package redisstate

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultNodeRetention is how long a silent node stays in the shared pool
// when NewNodeStates is given no retention.
const DefaultNodeRetention = 10 * time.Minute

// NodeStatesOptions configures NodeStates.
type NodeStatesOptions struct {
	// Retention is how long a node that sent nothing stays in the pool;
	// zero means DefaultNodeRetention. It only bounds the pool's size: a
	// node is suspect and offline long before (SPEC §4.2).
	Retention time.Duration
	// Now is the clock retention is measured by; nil means the Redis's
	// clock, else time.Now.
	Now func() time.Time
}

// StoredState is a node's latest heartbeat as the pool holds it. Payload is
// shared with the pool's own copy: read it, do not modify it.
type StoredState struct {
	Payload  []byte
	Received time.Time // millisecond precision
}

// NodeStates is the node pool every replica shares (SPEC §4.2, §8): each
// replica puts the heartbeats it receives, and reads every node's latest,
// whichever replica the node talks to.
//
// The pool is one Redis hash, <prefix>nodes, field = node id, value =
// "<received Unix ms>:<payload>": readable with redis-cli, and read whole
// in one HGETALL-like round trip. The payload is opaque here (the gateway
// stores a marshalled heartbeat). One hash sits in one Redis Cluster slot,
// so one shard carries the whole pool: at thousands of nodes and a few KB
// each that is a few MB and some thousand writes a second at most, well
// within one shard, and it buys reading the pool in one command rather
// than a scan over every shard. The hash expires after Retention without a
// Put, and All drops fields older than Retention, so departed nodes do not
// linger.
//
// While Redis is unavailable Put keeps the state in this replica's memory
// and All answers from this replica's own view: the pool as it last read
// it plus what it received since. Nodes that talk to other replicas then
// age in that view (their Received stops moving), so they turn suspect and
// offline as they should from here.
type NodeStates struct {
	redis     *Redis
	key       string
	retention time.Duration
	now       func() time.Time
	put       *redis.Script
	all       *redis.Script

	mu    sync.Mutex
	local map[string]localState
}

type localState struct {
	StoredState
	// unsynced marks a state this replica received but could not write to
	// Redis; it wins over an older one read from Redis.
	unsynced bool
}

// NewNodeStates returns the pool on r; a nil r keeps it per replica only.
func NewNodeStates(r *Redis, o NodeStatesOptions) *NodeStates {
	s := &NodeStates{
		redis:     r,
		retention: o.Retention,
		now:       o.Now,
		put:       redis.NewScript(putStateLua),
		all:       redis.NewScript(allStatesLua),
		local:     map[string]localState{},
	}
	if s.retention <= 0 {
		s.retention = DefaultNodeRetention
	}
	if r != nil {
		s.key = r.prefix + "nodes"
		if s.now == nil {
			s.now = r.now
		}
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// putStateLua stores a state unless a newer one is there: a node that
// moves between replicas, or a slow write, must not roll its state back.
// KEYS: pool. ARGV: node id, received ms, envelope, pool TTL ms.
// Returns 1 stored, 0 older than the stored one.
const putStateLua = `
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local ms = tonumber(string.match(cur, '^(%d+):'))
  if ms and ms > tonumber(ARGV[2]) then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
`

// allStatesLua returns every state received at or after the cutoff, and
// deletes the others (and any unreadable one) in the same atomic step, so
// that a fresh Put racing with the pruning is never deleted.
// KEYS: pool. ARGV: cutoff ms. Returns {id, envelope, id, envelope, …}.
const allStatesLua = `
local all = redis.call('HGETALL', KEYS[1])
local cutoff = tonumber(ARGV[1])
local out = {}
for i = 1, #all, 2 do
  local ms = tonumber(string.match(all[i + 1], '^(%d+):'))
  if ms and ms >= cutoff then
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  else
    redis.call('HDEL', KEYS[1], all[i])
  end
end
return out
`

// Put stores nodeID's latest state, received at received (the zero time
// means now). An older state than the one stored is ignored. A Redis that
// cannot be used leaves the state in this replica's view only; the error is
// non-nil only when ctx ended.
func (s *NodeStates) Put(ctx context.Context, nodeID string, payload []byte, received time.Time) error {
	if received.IsZero() {
		received = s.now()
	}
	ms := received.UnixMilli()
	st := StoredState{Payload: append([]byte(nil), payload...), Received: time.UnixMilli(ms)}
	s.mu.Lock()
	if cur, ok := s.local[nodeID]; !ok || !cur.Received.After(st.Received) {
		s.local[nodeID] = localState{StoredState: st, unsynced: true}
	}
	s.mu.Unlock()
	if s.redis == nil {
		return nil
	}
	env := make([]byte, 0, 20+len(payload))
	env = strconv.AppendInt(env, ms, 10)
	env = append(env, ':')
	env = append(env, payload...)
	err := s.redis.Do(ctx, "nodes.put", func(ctx context.Context, c redis.UniversalClient) error {
		return s.put.Run(ctx, c, []string{s.key}, nodeID, ms, env, s.retention.Milliseconds()).Err()
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return nil
	}
	s.mu.Lock()
	if cur, ok := s.local[nodeID]; ok && cur.Received.Equal(st.Received) {
		cur.unsynced = false
		s.local[nodeID] = cur
	}
	s.mu.Unlock()
	return nil
}

// All returns every node's latest state received within Retention, in one
// round trip. A Redis that cannot be used is answered by this replica's own
// view; the error is otherwise non-nil only when ctx ended.
func (s *NodeStates) All(ctx context.Context) (map[string]StoredState, error) {
	cutoff := s.now().Add(-s.retention)
	if s.redis != nil {
		var reply []any
		err := s.redis.Do(ctx, "nodes.all", func(ctx context.Context, c redis.UniversalClient) error {
			var err error
			reply, err = s.all.Run(ctx, c, []string{s.key}, cutoff.UnixMilli()).Slice()
			return err
		})
		if err == nil {
			// A reply it cannot read is answered like an unusable Redis.
			if shared, derr := decodeStates(reply); derr == nil {
				return s.adopt(shared, cutoff), nil
			}
		} else if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]StoredState, len(s.local))
	for id, st := range s.local {
		if st.Received.Before(cutoff) {
			delete(s.local, id)
			continue
		}
		out[id] = st.StoredState
	}
	return out, nil
}

// adopt makes the pool read from Redis this replica's view, keeping the
// states it received but could not write when they are newer, and returns
// that view.
func (s *NodeStates) adopt(shared map[string]StoredState, cutoff time.Time) map[string]StoredState {
	s.mu.Lock()
	defer s.mu.Unlock()
	local := make(map[string]localState, len(shared))
	for id, st := range shared {
		local[id] = localState{StoredState: st}
	}
	for id, st := range s.local {
		if !st.unsynced || st.Received.Before(cutoff) {
			continue
		}
		if cur, ok := shared[id]; !ok || st.Received.After(cur.Received) {
			local[id] = st
			shared[id] = st.StoredState
		}
	}
	s.local = local
	return shared
}

func decodeStates(reply []any) (map[string]StoredState, error) {
	if len(reply)%2 != 0 {
		return nil, errors.New("redisstate: node pool script returned an odd reply")
	}
	out := make(map[string]StoredState, len(reply)/2)
	for i := 0; i < len(reply); i += 2 {
		id, ok1 := reply[i].(string)
		env, ok2 := reply[i+1].(string)
		if !ok1 || !ok2 {
			return nil, errors.New("redisstate: node pool script returned a non-string")
		}
		st, ok := decodeEnvelope(env)
		if !ok {
			continue // the script already dropped what it cannot read
		}
		out[id] = st
	}
	return out, nil
}

// decodeEnvelope splits "<ms>:<payload>".
func decodeEnvelope(env string) (StoredState, bool) {
	for i := 0; i < len(env) && i < 20; i++ {
		if env[i] != ':' {
			continue
		}
		ms, err := strconv.ParseInt(env[:i], 10, 64)
		if err != nil {
			return StoredState{}, false
		}
		return StoredState{Payload: []byte(env[i+1:]), Received: time.UnixMilli(ms)}, true
	}
	return StoredState{}, false
}

// Delete removes a node from the pool, here and in Redis. A Redis that
// cannot be used leaves the node in the shared pool until Retention drops
// it; the error then says so.
func (s *NodeStates) Delete(ctx context.Context, nodeID string) error {
	s.mu.Lock()
	delete(s.local, nodeID)
	s.mu.Unlock()
	if s.redis == nil {
		return nil
	}
	return s.redis.Do(ctx, "nodes.delete", func(ctx context.Context, c redis.UniversalClient) error {
		return c.HDel(ctx, s.key, nodeID).Err()
	})
}
