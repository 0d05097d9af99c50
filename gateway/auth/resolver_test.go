package auth_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/gateway/auth"
	"github.com/switchyard-ai/switchyard/gateway/store"
)

// flakyStore is a key store that can be switched off, counting lookups.
type flakyStore struct {
	mu    sync.Mutex
	keys  map[string]store.Key
	down  bool
	calls int
}

func (f *flakyStore) GetKey(_ context.Context, id string) (store.Key, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.down {
		return store.Key{}, store.ErrUnavailable
	}
	k, ok := f.keys[id]
	if !ok {
		return store.Key{}, store.NotFound("key", id)
	}
	return k, nil
}

func (f *flakyStore) set(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

func (f *flakyStore) lookups() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

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

func mint(t *testing.T, st *flakyStore, tenant string) string {
	t.Helper()
	m, err := auth.Mint(auth.Client)
	if err != nil {
		t.Fatal(err)
	}
	st.keys[m.ID] = store.Key{ID: m.ID, Kind: store.KeyClient, TenantID: tenant, SecretHash: m.SecretHash}
	return m.Plaintext
}

func TestResolver(t *testing.T) {
	st := &flakyStore{keys: map[string]store.Key{}}
	key := mint(t, st, "acme")
	other := mint(t, st, "acme")
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var version int64 = 1
	r := auth.NewResolver(st, auth.ResolverOptions{
		Version: func() int64 { return version }, Grace: 10 * time.Minute, Now: clk.Now,
	})
	ctx := context.Background()

	k, err := r.Resolve(ctx, key, auth.Client)
	if err != nil || k.TenantID != "acme" {
		t.Fatalf("Resolve = %v, %v", k, err)
	}
	if _, err := r.Resolve(ctx, key, auth.Client); err != nil || st.lookups() != 1 {
		t.Fatalf("second Resolve: %v, %d lookups (want a cache hit)", err, st.lookups())
	}
	for _, tc := range []struct {
		name string
		key  string
		kind auth.Kind
		want error
	}{
		{"empty", "", auth.Client, auth.ErrMissingKey},
		{"garbage", "hello", auth.Client, auth.ErrInvalidKey},
		{"wrong kind", key, auth.Admin, auth.ErrInvalidKey},
		{"wrong secret", key[:len(key)-3] + "aaa", auth.Client, auth.ErrInvalidKey},
		{"unknown id", "syk_aaaaaaaaaaaa_" + key[len(key)-32:], auth.Client, auth.ErrInvalidKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := r.Resolve(ctx, tc.key, tc.kind); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}

	t.Run("revocation seen on the next config version", func(t *testing.T) {
		kk := st.keys[idOf(other)]
		if _, err := r.Resolve(ctx, other, auth.Client); err != nil {
			t.Fatal(err)
		}
		now := clk.Now()
		kk.RevokedAt = &now
		st.keys[kk.ID] = kk
		version++
		if _, err := r.Resolve(ctx, other, auth.Client); !errors.Is(err, auth.ErrRevokedKey) {
			t.Fatalf("err = %v, want revoked", err)
		}
	})

	t.Run("outage: known keys work for the grace, unknown never", func(t *testing.T) {
		if _, err := r.Resolve(ctx, key, auth.Client); err != nil {
			t.Fatal(err)
		}
		st.set(true)
		clk.add(2 * time.Minute) // past the local TTL: the store is asked and fails
		if _, err := r.Resolve(ctx, key, auth.Client); err != nil {
			t.Fatalf("known key during the outage: %v", err)
		}
		fresh := mint(t, st, "acme")
		if _, err := r.Resolve(ctx, fresh, auth.Client); !errors.Is(err, auth.ErrUnavailable) {
			t.Fatalf("unknown key during the outage: %v, want ErrUnavailable", err)
		}
		clk.add(11 * time.Minute) // 11 minutes after the first failure
		if _, err := r.Resolve(ctx, key, auth.Client); !errors.Is(err, auth.ErrUnavailable) {
			t.Fatalf("known key after the grace: %v, want ErrUnavailable", err)
		}
		st.set(false)
		if _, err := r.Resolve(ctx, key, auth.Client); err != nil {
			t.Fatalf("after recovery: %v", err)
		}
		if _, err := r.Resolve(ctx, fresh, auth.Client); err != nil {
			t.Fatalf("new key after recovery: %v", err)
		}
	})
}

func idOf(key string) string {
	p, _ := auth.Parse(key)
	return p.ID
}

// TestResolverIsBounded: made-up key ids do not grow the cache forever.
func TestResolverIsBounded(t *testing.T) {
	st := &flakyStore{keys: map[string]store.Key{}}
	key := mint(t, st, "acme")
	r := auth.NewResolver(st, auth.ResolverOptions{})
	for i := 0; i < 150_000; i++ {
		fake := "syk_" + pad(i) + "_" + key[len(key)-32:]
		_, _ = r.Resolve(context.Background(), fake, auth.Client)
	}
	if _, err := r.Resolve(context.Background(), key, auth.Client); err != nil {
		t.Fatal(err)
	}
	if n := r.Cached(); n > 100_000 {
		t.Fatalf("cache holds %d entries", n)
	}
}

func pad(i int) string {
	const alpha = "abcdefghijklmnopqrstuvwxyz234567"
	b := []byte("aaaaaaaaaaaa")
	for j := len(b) - 1; i > 0 && j >= 0; j-- {
		b[j] = alpha[i%32]
		i /= 32
	}
	return string(b)
}

// switchStore passes lookups to the store it holds now.
type switchStore struct{ auth.KeyStore }

// hungStore never answers until its caller gives up, as a frozen database.
type hungStore struct{ calls int }

func (h *hungStore) GetKey(ctx context.Context, _ string) (store.Key, error) {
	h.calls++
	<-ctx.Done()
	return store.Key{}, errors.Join(store.ErrUnavailable, ctx.Err())
}

// TestResolverDuringAKnownOutage: with the app's health checks saying the
// store is down, known keys are answered from the cache without asking the
// store (so a hung database holds no request of a known key); an unknown
// key waits at most LookupTimeout and gets ErrUnavailable; past the grace
// even a key cached a moment ago stops working.
func TestResolverDuringAKnownOutage(t *testing.T) {
	st := &flakyStore{keys: map[string]store.Key{}}
	key := mint(t, st, "acme")
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var mu sync.Mutex
	var downSince time.Time
	setDown := func(t time.Time) { mu.Lock(); downSince = t; mu.Unlock() }
	hung := &hungStore{}
	sw := &switchStore{KeyStore: st}
	r := auth.NewResolver(sw,
		auth.ResolverOptions{
			Grace: time.Minute, Now: clk.Now, LookupTimeout: 100 * time.Millisecond,
			DownSince: func() time.Time { mu.Lock(); defer mu.Unlock(); return downSince },
		})
	ctx := context.Background()
	if _, err := r.Resolve(ctx, key, auth.Client); err != nil {
		t.Fatal(err)
	}
	sw.KeyStore = hung
	setDown(clk.Now())
	clk.add(30 * time.Second)
	start := time.Now()
	if _, err := r.Resolve(ctx, key, auth.Client); err != nil {
		t.Fatalf("known key within the grace: %v", err)
	}
	if hung.calls != 0 {
		t.Errorf("a known key asked the hung store %d times", hung.calls)
	}
	fresh := mint(t, st, "acme")
	if _, err := r.Resolve(ctx, fresh, auth.Client); !errors.Is(err, auth.ErrUnavailable) {
		t.Fatalf("unknown key: %v, want ErrUnavailable", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v with a 100 ms lookup timeout", took)
	}
	clk.add(31 * time.Second) // past the minute of grace
	if _, err := r.Resolve(ctx, key, auth.Client); !errors.Is(err, auth.ErrUnavailable) {
		t.Fatalf("known key past the grace: %v, want ErrUnavailable", err)
	}
	sw.KeyStore = st
	setDown(time.Time{})
	if _, err := r.Resolve(ctx, key, auth.Client); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	if _, err := r.Resolve(ctx, fresh, auth.Client); err != nil {
		t.Fatalf("new key after recovery: %v", err)
	}
}
