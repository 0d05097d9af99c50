package redisstate

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func putState(t testing.TB, s *NodeStates, id string, payload []byte, at time.Time) {
	t.Helper()
	if err := s.Put(context.Background(), id, payload, at); err != nil {
		t.Fatalf("Put(%s): %v", id, err)
	}
}

func allStates(t testing.TB, s *NodeStates) map[string]StoredState {
	t.Helper()
	got, err := s.All(context.Background())
	if err != nil {
		t.Fatalf("All: %v", err)
	}
	return got
}

// wantStates checks that got holds exactly the nodes of want, with their
// payloads and receive times.
func wantStates(t testing.TB, got map[string]StoredState, want map[string]StoredState) {
	t.Helper()
	for id, w := range want {
		g, ok := got[id]
		switch {
		case !ok:
			t.Errorf("node %q missing", id)
		case !bytes.Equal(g.Payload, w.Payload):
			t.Errorf("node %q payload = %q, want %q", id, g.Payload, w.Payload)
		case !g.Received.Equal(w.Received):
			t.Errorf("node %q received %v, want %v", id, g.Received, w.Received)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("unexpected node %q", id)
		}
	}
}

func TestNodeStatesRoundTrip(t *testing.T) {
	clk := newFakeClock(time.Now().Truncate(time.Millisecond))
	r, raw := sharedRedis(t, Options{})
	s := NewNodeStates(r, NodeStatesOptions{Now: clk.Now})
	at := clk.Now().Add(-time.Second)
	// Payloads are opaque bytes: a digit-and-colon start and NULs must
	// survive the envelope.
	binary := []byte("123:\x00\xff\x01:tail")
	putState(t, s, "anna-mac", binary, at)
	putState(t, s, "bob-box", []byte("b"), time.Time{}) // zero time: now

	want := map[string]StoredState{
		"anna-mac": {Payload: binary, Received: at},
		"bob-box":  {Payload: []byte("b"), Received: clk.Now()},
	}
	wantStates(t, allStates(t, s), want)

	ctx := context.Background()
	env, err := raw.HGet(ctx, r.prefix+"nodes", "anna-mac").Result()
	if err != nil || !strings.HasPrefix(env, formatMs(at)+":") {
		t.Errorf("stored envelope = %q, %v; want it to start with the receive time in ms", env, err)
	}
	if ttl := raw.PTTL(ctx, r.prefix+"nodes").Val(); ttl <= 0 || ttl > DefaultNodeRetention {
		t.Errorf("pool PTTL = %v, want in (0, %v]", ttl, DefaultNodeRetention)
	}

	// One round trip each.
	trips := countRoundTrips(r)
	putState(t, s, "anna-mac", binary, at.Add(time.Millisecond))
	allStates(t, s)
	if n := trips.n.Load(); n != 2 {
		t.Errorf("Put+All took %d round trips, want 2", n)
	}

	if err := s.Delete(ctx, "anna-mac"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	delete(want, "anna-mac")
	wantStates(t, allStates(t, s), want)
}

func formatMs(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// A state older than the stored one does not replace it: a node whose
// heartbeats reach two replicas, or a slow write, never rolls back.
func TestNodeStatesNewerWins(t *testing.T) {
	r, _ := sharedRedis(t, Options{})
	s := NewNodeStates(r, NodeStatesOptions{})
	now := time.Now().Truncate(time.Millisecond)
	putState(t, s, "n", []byte("new"), now)
	putState(t, s, "n", []byte("old"), now.Add(-time.Second))
	wantStates(t, allStates(t, s), map[string]StoredState{"n": {Payload: []byte("new"), Received: now}})
}

func TestNodeStatesRetention(t *testing.T) {
	clk := newFakeClock(time.Now().Truncate(time.Millisecond))
	r, raw := sharedRedis(t, Options{})
	const retention = time.Minute
	s := NewNodeStates(r, NodeStatesOptions{Retention: retention, Now: clk.Now})
	putState(t, s, "silent", []byte("s"), clk.Now().Add(-retention-time.Millisecond))
	putState(t, s, "edge", []byte("e"), clk.Now().Add(-retention))
	putState(t, s, "live", []byte("l"), clk.Now())

	wantStates(t, allStates(t, s), map[string]StoredState{
		"edge": {Payload: []byte("e"), Received: clk.Now().Add(-retention)},
		"live": {Payload: []byte("l"), Received: clk.Now()},
	})
	ctx := context.Background()
	if raw.HExists(ctx, r.prefix+"nodes", "silent").Val() {
		t.Error("the silent node is still in Redis after All")
	}
	if ttl := raw.PTTL(ctx, r.prefix+"nodes").Val(); ttl <= 0 || ttl > retention {
		t.Errorf("pool PTTL = %v, want in (0, %v]", ttl, retention)
	}

	clk.Advance(retention)
	wantStates(t, allStates(t, s), map[string]StoredState{"live": {Payload: []byte("l"), Received: clk.Now().Add(-retention)}})
}

// Two replicas with their own clients see each other's nodes.
func TestNodeStatesReplicasShare(t *testing.T) {
	r1, _ := sharedRedis(t, Options{})
	r2 := anotherReplica(t, r1, Options{})
	a, b := NewNodeStates(r1, NodeStatesOptions{}), NewNodeStates(r2, NodeStatesOptions{})
	now := time.Now().Truncate(time.Millisecond)
	putState(t, a, "on-a", []byte("a"), now)
	putState(t, b, "on-b", []byte("b"), now)
	want := map[string]StoredState{
		"on-a": {Payload: []byte("a"), Received: now},
		"on-b": {Payload: []byte("b"), Received: now},
	}
	wantStates(t, allStates(t, a), want)
	wantStates(t, allStates(t, b), want)

	if err := a.Delete(context.Background(), "on-b"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	delete(want, "on-b")
	wantStates(t, allStates(t, b), want)
}

func TestNodeStatesWithoutRedis(t *testing.T) {
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
			clk := newFakeClock(time.Now().Truncate(time.Millisecond))
			s := NewNodeStates(tc.r(t), NodeStatesOptions{Retention: time.Minute, Now: clk.Now})
			payload := []byte("p")
			putState(t, s, "n1", payload, clk.Now())
			payload[0] = 'x' // the caller may reuse its buffer
			putState(t, s, "n2", []byte("q"), clk.Now().Add(-30*time.Second))
			putState(t, s, "n2", []byte("older"), clk.Now().Add(-40*time.Second))
			wantStates(t, allStates(t, s), map[string]StoredState{
				"n1": {Payload: []byte("p"), Received: clk.Now()},
				"n2": {Payload: []byte("q"), Received: clk.Now().Add(-30 * time.Second)},
			})
			clk.Advance(45 * time.Second) // n2 is now older than the retention
			wantStates(t, allStates(t, s), map[string]StoredState{
				"n1": {Payload: []byte("p"), Received: clk.Now().Add(-45 * time.Second)},
			})
			_ = s.Delete(context.Background(), "n1") // an error says Redis did not hear it
			wantStates(t, allStates(t, s), map[string]StoredState{})
		})
	}
}

// Redis goes away: the replica keeps the pool it last read and adds the
// heartbeats it receives; when Redis is back its answers are the pool
// again, with what this replica could not write kept until it is.
func TestNodeStatesFollowRedisOutAndBack(t *testing.T) {
	srv := startPrivateRedis(t)
	ra := guarded(t, srv.url(), Options{Timeout: 500 * time.Millisecond}, nil)
	rb := guarded(t, srv.url(), Options{Timeout: 500 * time.Millisecond}, nil)
	a, b := NewNodeStates(ra, NodeStatesOptions{}), NewNodeStates(rb, NodeStatesOptions{})
	now := time.Now().Truncate(time.Millisecond)
	putState(t, a, "n1", []byte("1"), now)
	putState(t, b, "n2", []byte("2"), now)
	pool := map[string]StoredState{
		"n1": {Payload: []byte("1"), Received: now},
		"n2": {Payload: []byte("2"), Received: now},
	}
	wantStates(t, allStates(t, b), pool)

	srv.kill()
	wantStates(t, allStates(t, b), pool)
	putState(t, b, "n3", []byte("3"), now.Add(time.Second))
	pool["n3"] = StoredState{Payload: []byte("3"), Received: now.Add(time.Second)}
	wantStates(t, allStates(t, b), pool)

	srv.start() // empty: the restart lost the pool
	waitFor(t, 10*time.Second, "Redis is used again", func() bool { return ping(rb) == nil })
	// Redis's pool again, plus the heartbeat b could not write.
	wantStates(t, allStates(t, b), map[string]StoredState{"n3": pool["n3"]})
	if got := allStates(t, a); len(got) != 0 {
		t.Errorf("the other replica sees %d nodes in the restarted Redis, want 0", len(got))
	}

	// The next heartbeats fill the pool again for everyone.
	putState(t, a, "n1", []byte("1"), now.Add(2*time.Second))
	putState(t, b, "n3", []byte("3"), now.Add(2*time.Second))
	raw := redis.NewClient(&redis.Options{Addr: srv.addr})
	defer raw.Close()
	if n := raw.HLen(context.Background(), "nodes").Val(); n != 2 {
		t.Errorf("%d nodes in Redis, want 2", n)
	}
	wantStates(t, allStates(t, a), map[string]StoredState{
		"n1": {Payload: []byte("1"), Received: now.Add(2 * time.Second)},
		"n3": {Payload: []byte("3"), Received: now.Add(2 * time.Second)},
	})
}

func TestDecodeEnvelope(t *testing.T) {
	for _, tc := range []struct {
		env     string
		ok      bool
		ms      int64
		payload string
	}{
		{"1700000000000:abc", true, 1700000000000, "abc"},
		{"5:", true, 5, ""},
		{"5:1:2", true, 5, "1:2"},
		{"abc", false, 0, ""},
		{":abc", false, 0, ""},
		{"x1:abc", false, 0, ""},
		{"123456789012345678901234:late colon", false, 0, ""},
	} {
		st, ok := decodeEnvelope(tc.env)
		if ok != tc.ok || (ok && (st.Received.UnixMilli() != tc.ms || string(st.Payload) != tc.payload)) {
			t.Errorf("decodeEnvelope(%q) = %v, %v", tc.env, st, ok)
		}
	}
}

func BenchmarkNodeStatesAll1000(b *testing.B) {
	r, _ := sharedRedis(b, Options{})
	s := NewNodeStates(r, NodeStatesOptions{})
	payload := bytes.Repeat([]byte("x"), 512)
	now := time.Now()
	for i := range 1000 {
		putState(b, s, "node-"+strconv.Itoa(i), payload, now)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.All(context.Background()); err != nil {
			b.Fatalf("All: %v", err)
		}
	}
	if !r.Available() {
		b.Fatal("Redis became unavailable: the benchmark measured the fallback")
	}
}
