package auth

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/switchyard-ai/switchyard/gateway/store"
)

// Errors of Resolve. None of them repeats the presented key.
var (
	ErrMissingKey  = errors.New("missing API key")
	ErrInvalidKey  = errors.New("invalid API key")
	ErrRevokedKey  = errors.New("API key revoked")
	ErrUnavailable = errors.New("keys cannot be checked right now: the database is unavailable")
)

// KeyStore finds a stored key by its lookup id.
type KeyStore interface {
	GetKey(ctx context.Context, id string) (store.Key, error)
}

// SharedCache is the cache all replicas share (Redis), tagged with the
// config version so that a revocation (which bumps it) invalidates it.
type SharedCache interface {
	Get(ctx context.Context, keyID string, version int64) (store.Key, bool)
	Put(ctx context.Context, keyID string, version int64, k store.Key)
}

// ResolverOptions tune a Resolver.
type ResolverOptions struct {
	// Version returns the config version the replica runs on; a cached key
	// from another version is looked up again.
	Version func() int64
	// Shared is optional (no Redis: this replica's cache only).
	Shared SharedCache
	// Grace is how long known keys keep working from cache while the store
	// is unavailable (SWITCHYARD_DB_OUTAGE_GRACE).
	Grace time.Duration
	// DownSince reports since when the store has been unavailable (zero when
	// it is up), as the app's health checks see it. While it is set, known
	// keys are answered from the cache without asking the store, and once
	// the outage is older than Grace cached keys stop working. When nil,
	// the resolver goes by the first failure it saw itself.
	DownSince func() time.Time
	// LookupTimeout bounds one store lookup (default 5 s), so that a hung
	// database answers an unknown key with ErrUnavailable instead of
	// holding the request.
	LookupTimeout time.Duration
	// LocalTTL bounds how long this replica trusts its own copy without
	// asking again, even on an unchanged version (default 1 minute).
	LocalTTL time.Duration
	// NegativeTTL remembers unknown key ids briefly, so that a client
	// hammering with a wrong key does not hammer the database (default 5 s).
	NegativeTTL time.Duration
	// OnResult is told how each lookup was answered: local, shared, store,
	// negative, stale (served from cache during an outage), unavailable.
	OnResult func(result string)
	Now      func() time.Time
}

type cached struct {
	key     store.Key
	version int64
	at      time.Time
	missing bool
}

// Resolver authenticates presented keys: this replica's cache first, then
// the shared cache, then the store. Secrets are compared against the stored
// SHA-256 in constant time; only hashes are cached.
type Resolver struct {
	store KeyStore
	o     ResolverOptions

	mu        sync.RWMutex
	local     map[string]cached
	firstFail time.Time
}

// NewResolver returns a Resolver over st.
func NewResolver(st KeyStore, o ResolverOptions) *Resolver {
	if o.Version == nil {
		o.Version = func() int64 { return 0 }
	}
	if o.LocalTTL <= 0 {
		o.LocalTTL = time.Minute
	}
	if o.NegativeTTL <= 0 {
		o.NegativeTTL = 5 * time.Second
	}
	if o.LookupTimeout <= 0 {
		o.LookupTimeout = 5 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.OnResult == nil {
		o.OnResult = func(string) {}
	}
	return &Resolver{store: st, o: o, local: map[string]cached{}}
}

// Resolve checks a presented key of the wanted kind and returns what the
// store holds for it.
func (r *Resolver) Resolve(ctx context.Context, presented string, want Kind) (store.Key, error) {
	if presented == "" {
		return store.Key{}, ErrMissingKey
	}
	p, err := Parse(presented)
	if err != nil || p.Kind != want {
		return store.Key{}, ErrInvalidKey
	}
	k, err := r.lookup(ctx, p.ID)
	if err != nil {
		return store.Key{}, err
	}
	if string(k.Kind) != string(want) || !Verify(k.SecretHash, p.Secret) {
		return store.Key{}, ErrInvalidKey
	}
	if k.Revoked() {
		return store.Key{}, ErrRevokedKey
	}
	return k, nil
}

func (r *Resolver) lookup(ctx context.Context, id string) (store.Key, error) {
	now := r.o.Now()
	version := r.o.Version()
	r.mu.RLock()
	c, ok := r.local[id]
	r.mu.RUnlock()
	known := ok && !c.missing && c.version == version
	if ok && c.version == version {
		switch {
		case c.missing && now.Sub(c.at) < r.o.NegativeTTL:
			r.o.OnResult("negative")
			return store.Key{}, ErrInvalidKey
		case known && now.Sub(c.at) < r.o.LocalTTL:
			if r.pastGrace(now) {
				// Past the grace nothing cached is trusted: the key is
				// checked against the store like an unknown one.
				break
			}
			r.o.OnResult("local")
			return c.key, nil
		}
	}
	// While the store is known to be down, a key this replica knows is
	// answered from its cache at once rather than after a failed (or, with
	// a hung database, a timed-out) lookup: the request path waits on the
	// store only for keys it does not know.
	if known && r.withinKnownOutage(now) {
		r.o.OnResult("stale")
		return c.key, nil
	}
	if r.o.Shared != nil && !r.pastGrace(now) {
		if k, hit := r.o.Shared.Get(ctx, id, version); hit {
			r.remember(id, cached{key: k, version: version, at: now})
			r.o.OnResult("shared")
			return k, nil
		}
	}
	sctx, cancel := context.WithTimeout(ctx, r.o.LookupTimeout)
	k, err := r.store.GetKey(sctx, id)
	cancel()
	switch {
	case err == nil:
		r.healthy()
		r.remember(id, cached{key: k, version: version, at: now})
		if r.o.Shared != nil {
			r.o.Shared.Put(ctx, id, version, k)
		}
		r.o.OnResult("store")
		return k, nil
	case errors.Is(err, store.ErrNotFound):
		r.healthy()
		r.remember(id, cached{missing: true, version: version, at: now})
		r.o.OnResult("store")
		return store.Key{}, ErrInvalidKey
	case ctx.Err() != nil:
		// The caller left; that says nothing about the store.
		return store.Key{}, ctx.Err()
	}
	// The store failed: a key this replica knows keeps working for the grace
	// period; an unknown one never gets through.
	since := r.downSince(now)
	if known && now.Sub(since) <= r.o.Grace {
		r.o.OnResult("stale")
		return c.key, nil
	}
	r.o.OnResult("unavailable")
	return store.Key{}, ErrUnavailable
}

// knownDown is since when the app's health checks have seen the store down
// (zero when they see it up, or when no DownSince is given).
func (r *Resolver) knownDown() time.Time {
	if r.o.DownSince == nil {
		return time.Time{}
	}
	return r.o.DownSince()
}

// withinKnownOutage reports whether the store is known to be down and has
// been for no longer than the grace.
func (r *Resolver) withinKnownOutage(now time.Time) bool {
	since := r.knownDown()
	return !since.IsZero() && now.Sub(since) <= r.o.Grace
}

// pastGrace reports whether the store is known to have been down for longer
// than the grace: cached keys then stop working (SPEC §8), and /readyz says
// 503.
func (r *Resolver) pastGrace(now time.Time) bool {
	since := r.knownDown()
	return !since.IsZero() && now.Sub(since) > r.o.Grace
}

// maxCached bounds this replica's cache, so that a flood of made-up key ids
// cannot grow it without end.
const maxCached = 100_000

func (r *Resolver) remember(id string, c cached) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.local) >= maxCached {
		// Unknown ids go first; then whatever the map order yields. Real keys
		// dropped here are simply looked up again.
		for k, v := range r.local {
			if v.missing || len(r.local) >= maxCached {
				delete(r.local, k)
			}
			if len(r.local) < maxCached/2 {
				break
			}
		}
	}
	r.local[id] = c
}

func (r *Resolver) healthy() {
	r.mu.Lock()
	r.firstFail = time.Time{}
	r.mu.Unlock()
}

func (r *Resolver) downSince(now time.Time) time.Time {
	if r.o.DownSince != nil {
		if t := r.o.DownSince(); !t.IsZero() {
			return t
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.firstFail.IsZero() {
		r.firstFail = now
	}
	return r.firstFail
}

// Cached reports how many key ids this replica holds.
func (r *Resolver) Cached() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.local)
}
