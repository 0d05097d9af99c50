package redisstate

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-ai/switchyard/internal/testenv"
)

// errorLog records OnError calls.
type errorLog struct {
	mu  sync.Mutex
	ops []string
}

func (l *errorLog) record(op string, _ error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops = append(l.ops, op)
}

func (l *errorLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ops)
}

func TestNewClientURLs(t *testing.T) {
	tests := []struct {
		name    string
		url     string
		cluster bool
		wantErr string
	}{
		{name: "redis", url: "redis://127.0.0.1:6379/0"},
		{name: "rediss", url: "rediss://user:pw@redis.example:6380/1"},
		{name: "cluster seeds", url: "10.0.0.1:6379, 10.0.0.2:6379,10.0.0.3:6379", cluster: true},
		{name: "one cluster seed", url: "redis-0.redis:6379", cluster: true},
		{name: "cluster URL", url: "redis://10.0.0.1:6379?addr=10.0.0.2:6379", cluster: true},
		{name: "empty", url: "  ", wantErr: "empty"},
		{name: "seed without port", url: "10.0.0.1:6379,10.0.0.2", wantErr: "not host:port"},
		{name: "scheme", url: "ftp://127.0.0.1", wantErr: "scheme"},
		{name: "bad URL keeps the password out", url: "redis://user:s3cret-pw@host:port-is-not-a-number/0", wantErr: "malformed"},
		{name: "bad option keeps the password out", url: "redis://user:s3cret-pw@host:6379/0?nonsense=1", wantErr: "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := newClient(tt.url, time.Second, nil)
			if tt.wantErr != "" {
				if err == nil {
					c.Close()
					t.Fatalf("newClient(%q) succeeded, want an error with %q", tt.url, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %q does not say %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Errorf("error %q shows the password", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("newClient(%q): %v", tt.url, err)
			}
			defer c.Close()
			_, isCluster := c.(*redis.ClusterClient)
			if isCluster != tt.cluster {
				t.Errorf("cluster client = %v, want %v (%T)", isCluster, tt.cluster, c)
			}
		})
	}
}

func TestOpen(t *testing.T) {
	t.Run("reachable", func(t *testing.T) {
		_, prefix := testenv.Redis(t)
		r, err := Open(context.Background(), testenv.RedisURL(), Options{Prefix: prefix, Timeout: testTimeout})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer r.Close()
		if !r.Available() {
			t.Error("Available() = false on a reachable Redis")
		}
		if err := ping(r); err != nil {
			t.Errorf("Ping: %v", err)
		}
	})
	t.Run("replies larger than the connection buffers", func(t *testing.T) {
		_, prefix := testenv.Redis(t)
		r, err := Open(context.Background(), testenv.RedisURL(), Options{Prefix: prefix, Timeout: testTimeout})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer r.Close()
		big := strings.Repeat("0123456789abcdef", 4*connBufferSize/16) // 4 buffers' worth
		key := prefix + "big"
		err = r.Do(context.Background(), "test.big", func(ctx context.Context, c redis.UniversalClient) error {
			defer c.Del(context.WithoutCancel(ctx), key)
			cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, key, big, time.Minute)
				for range 3 {
					p.Get(ctx, key)
				}
				return nil
			})
			if err != nil {
				return err
			}
			for _, cmd := range cmds[1:] {
				if got := cmd.(*redis.StringCmd).Val(); got != big {
					t.Errorf("GET in a pipeline returned %d bytes, want %d", len(got), len(big))
				}
			}
			got, err := c.Get(ctx, key).Result()
			if got != big {
				t.Errorf("GET returned %d bytes, want %d", len(got), len(big))
			}
			return err
		})
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
	})
	t.Run("unreachable is not an error", func(t *testing.T) {
		r, err := Open(context.Background(), "redis://"+closedAddr(t)+"/0", Options{})
		if err != nil {
			t.Fatalf("Open on a closed port: %v (want nil: the breaker handles it)", err)
		}
		defer r.Close()
		if err := ping(r); !errors.Is(err, ErrUnavailable) {
			t.Errorf("Ping = %v, want ErrUnavailable", err)
		}
	})
}

func TestNilRedis(t *testing.T) {
	var r *Redis
	err := r.Do(context.Background(), "x", func(context.Context, redis.UniversalClient) error {
		t.Fatal("fn ran on a nil Redis")
		return nil
	})
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("Do on nil = %v, want ErrUnavailable", err)
	}
	if r.Available() {
		t.Error("nil Redis is Available")
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close on nil: %v", err)
	}
}

// The breaker opens after three network errors; then calls fail with
// ErrUnavailable without dialling; after two seconds one probe goes out.
func TestBreakerOpensAfterThreeNetworkErrors(t *testing.T) {
	var dials dialCounter
	var errs errorLog
	r := guarded(t, "redis://"+closedAddr(t)+"/0", Options{Timeout: testTimeout, OnError: errs.record}, dials.dial)

	for i := range breakerFailures {
		err := ping(r)
		if !errors.Is(err, ErrUnavailable) || errors.Is(err, errSkipped) {
			t.Fatalf("call %d = %v, want a network error wrapped in ErrUnavailable", i+1, err)
		}
		if dials.n.Load() == 0 {
			t.Fatalf("call %d did not dial", i+1)
		}
	}
	if r.Available() {
		t.Fatal("Available() after three network errors")
	}
	if got := errs.count(); got != breakerFailures {
		t.Errorf("OnError called %d times, want %d", got, breakerFailures)
	}

	before := dials.n.Load()
	called := false
	err := r.Do(context.Background(), "skipped", func(context.Context, redis.UniversalClient) error {
		called = true
		return nil
	})
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, errSkipped) {
		t.Fatalf("4th call = %v, want ErrUnavailable from the open breaker", err)
	}
	if called {
		t.Error("the open breaker ran the call")
	}
	if d := dials.n.Load(); d != before {
		t.Errorf("the open breaker dialled %d times", d-before)
	}
	if got := errs.count(); got != breakerFailures {
		t.Errorf("a skipped call reached OnError (%d calls)", got)
	}

	time.Sleep(breakerOpenFor + 100*time.Millisecond)
	if err := ping(r); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("probe = %v, want ErrUnavailable", err)
	}
	if dials.n.Load() == before {
		t.Fatal("no probe went out after the open period")
	}
	// The probe failed: open again, no dial.
	before = dials.n.Load()
	if err := ping(r); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("after a failed probe = %v, want ErrUnavailable", err)
	}
	if d := dials.n.Load(); d != before {
		t.Errorf("the re-opened breaker dialled %d times", d-before)
	}
}

// Answers from Redis, however negative, say Redis is up.
func TestBreakerIgnoresRedisAnswers(t *testing.T) {
	var errs errorLog
	r, _ := sharedRedis(t, Options{OnError: errs.record})
	ctx := context.Background()
	for range 2 * breakerFailures {
		err := r.Do(ctx, "get", func(ctx context.Context, c redis.UniversalClient) error {
			return c.Get(ctx, r.prefix+"missing").Err()
		})
		if err != redis.Nil {
			t.Fatalf("GET missing = %v, want redis.Nil itself", err)
		}
	}
	if got := errs.count(); got != 0 {
		t.Errorf("redis.Nil reached OnError %d times", got)
	}
	for range 2 * breakerFailures {
		err := r.Do(ctx, "script", func(ctx context.Context, c redis.UniversalClient) error {
			return c.Eval(ctx, "return redis.error_reply('ERR deliberate')", nil).Err()
		})
		if err == nil || errors.Is(err, ErrUnavailable) {
			t.Fatalf("error reply = %v, want the reply itself", err)
		}
	}
	if got := errs.count(); got != 2*breakerFailures {
		t.Errorf("error replies reached OnError %d times, want %d", got, 2*breakerFailures)
	}
	if !r.Available() {
		t.Error("redis.Nil or error replies opened the breaker")
	}
}

// A caller that gives up says nothing about Redis.
func TestBreakerIgnoresCallerCancellation(t *testing.T) {
	var errs errorLog
	r, _ := sharedRedis(t, Options{OnError: errs.record})
	for range 2 * breakerFailures {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := r.Do(ctx, "cancelled", func(ctx context.Context, c redis.UniversalClient) error {
			return c.Ping(ctx).Err()
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled call = %v, want context.Canceled", err)
		}
	}
	if !r.Available() {
		t.Error("caller cancellations opened the breaker")
	}
	if got := errs.count(); got != 0 {
		t.Errorf("caller cancellations reached OnError %d times", got)
	}
}

// A killed Redis opens the breaker; the same client recovers when a server
// answers on the address again.
func TestBreakerRecoversWhenRedisReturns(t *testing.T) {
	srv := startPrivateRedis(t)
	r := guarded(t, srv.url(), Options{Timeout: 500 * time.Millisecond}, nil)
	if err := ping(r); err != nil {
		t.Fatalf("Ping before the outage: %v", err)
	}

	srv.kill()
	for i := range breakerFailures {
		if err := ping(r); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("call %d with Redis killed = %v, want ErrUnavailable", i+1, err)
		}
	}
	if r.Available() {
		t.Fatal("Available() with Redis killed")
	}

	srv.start()
	time.Sleep(breakerOpenFor + 100*time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ping(r)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery after the restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !r.Available() {
		t.Error("Available() = false after a successful probe")
	}
}

// A frozen Redis accepts connections and never answers: each call that
// reaches it pays one timeout, three of them open the breaker, and the
// rest are skipped.
func TestHungRedisCostsOneTimeoutPerCall(t *testing.T) {
	srv := startPrivateRedis(t)
	const timeout = 200 * time.Millisecond
	r := guarded(t, srv.url(), Options{Timeout: timeout}, nil)
	if err := ping(r); err != nil {
		t.Fatalf("Ping before the freeze: %v", err)
	}

	srv.freeze()
	timedOut, skipped := 0, 0
	for i := range 10 {
		start := time.Now()
		err := ping(r)
		took := time.Since(start)
		switch {
		case !errors.Is(err, ErrUnavailable):
			t.Fatalf("call %d = %v, want ErrUnavailable", i+1, err)
		case !errors.Is(err, errSkipped):
			timedOut++
			t.Logf("call %d reached the frozen Redis and failed after %v: %v", i+1, took.Round(time.Millisecond), err)
			// Loose bound: one timeout, not one per retry, dial or command
			// (go-redis's own defaults would be seconds).
			if took > 5*timeout {
				t.Errorf("call %d took %v with a %v timeout", i+1, took, timeout)
			}
		default:
			if took > timeout/2 {
				t.Logf("skipped call %d took %v", i+1, took) // informative only: no wall-clock asserts on the fast path
			}
			skipped++
		}
	}
	if timedOut != breakerFailures || skipped != 10-breakerFailures {
		t.Errorf("%d calls reached the timeout and %d were skipped; want %d and %d",
			timedOut, skipped, breakerFailures, 10-breakerFailures)
	}

	srv.thaw()
	time.Sleep(breakerOpenFor + 100*time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for ping(r) != nil {
		if time.Now().After(deadline) {
			t.Fatal("no recovery after the thaw")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !r.Available() {
		t.Error("Available() = false after recovery")
	}
}

func TestIsNetworkError(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{redis.Nil, false},
		{errors.New("ERR unknown command"), false},
		{context.DeadlineExceeded, true},
		{redis.ErrPoolTimeout, true},
		{redis.ErrClosed, true},
	}
	for _, tt := range tests {
		if got := isNetworkError(tt.err); got != tt.want {
			t.Errorf("isNetworkError(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// One request makes several Redis calls; against a frozen Redis the first
// pays the timeout and PerRequest makes the rest skip at once, long before
// the breaker (three failures) would open. Calls outside the request are
// not affected.
func TestPerRequestPaysOneTimeout(t *testing.T) {
	srv := startPrivateRedis(t)
	const timeout = 200 * time.Millisecond
	r := guarded(t, srv.url(), Options{Timeout: timeout}, nil)
	if err := ping(r); err != nil {
		t.Fatalf("Ping before the freeze: %v", err)
	}
	srv.freeze()
	defer srv.thaw()

	ctx := PerRequest(context.Background())
	if PerRequest(ctx) != ctx {
		t.Error("PerRequest on a marked context made a new mark")
	}
	start := time.Now()
	for i := range 5 {
		err := r.Ping(ctx)
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("call %d = %v, want ErrUnavailable", i+1, err)
		}
		if i > 0 && !errors.Is(err, errSpent) {
			t.Errorf("call %d reached Redis again: %v", i+1, err)
		}
	}
	if took := time.Since(start); took > 5*timeout {
		t.Errorf("five calls of one request took %v with a %v timeout", took, timeout)
	}
	if !r.Available() {
		t.Error("one failed request opened the breaker")
	}
	// Another request still tries Redis.
	if err := r.Ping(PerRequest(context.Background())); errors.Is(err, errSpent) {
		t.Errorf("a fresh request was skipped: %v", err)
	}
}
