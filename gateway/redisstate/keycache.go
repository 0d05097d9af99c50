package redisstate

import (
	"context"
	"encoding/json"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultKeyCacheTTL is how long a cached key lookup lives when NewKeyCache
// is given no TTL.
const DefaultKeyCacheTTL = 10 * time.Minute

// CachedKey is what authentication needs of a stored key. It holds the
// SHA-256 of the secret, never the secret.
type CachedKey struct {
	KeyID      string
	Kind       string // client, admin, node
	TenantID   string
	NodeID     string
	SecretHash []byte
	Revoked    bool
}

// KeyCache caches key lookups in Redis so that replicas share them and a
// request rarely needs Postgres to authenticate (SPEC §8). Every entry is
// tagged with the config version it was read under; an entry of another
// version is a miss, so an admin change (a revocation bumps the version)
// is never served stale, without any invalidation traffic.
//
// Failures are misses and Puts that did not happen: the caller then asks
// the store, which is the truth. A nil Redis caches nothing.
type KeyCache struct {
	redis  *Redis
	ttl    time.Duration
	prefix string
}

// NewKeyCache returns a cache on r; ttl ≤ 0 means DefaultKeyCacheTTL.
func NewKeyCache(r *Redis, ttl time.Duration) *KeyCache {
	if ttl <= 0 {
		ttl = DefaultKeyCacheTTL
	}
	c := &KeyCache{redis: r, ttl: ttl}
	if r != nil {
		c.prefix = r.prefix + "key:"
	}
	return c
}

// cachedEntry is the stored form: one JSON string per key, readable with
// redis-cli and fetched in one GET. The hash is base64 in JSON.
type cachedEntry struct {
	Version    int64  `json:"v"`
	KeyID      string `json:"id"`
	Kind       string `json:"kind"`
	TenantID   string `json:"tenant,omitempty"`
	NodeID     string `json:"node,omitempty"`
	SecretHash []byte `json:"hash"`
	Revoked    bool   `json:"revoked,omitempty"`
}

// Get returns the cached lookup of keyID if it was cached under version.
func (c *KeyCache) Get(ctx context.Context, keyID string, version int64) (CachedKey, bool) {
	if c.redis == nil {
		return CachedKey{}, false
	}
	var raw []byte
	err := c.redis.Do(ctx, "keycache.get", func(ctx context.Context, rc redis.UniversalClient) error {
		var err error
		raw, err = rc.Get(ctx, c.prefix+keyID).Bytes()
		return err
	})
	if err != nil {
		return CachedKey{}, false
	}
	var e cachedEntry
	if json.Unmarshal(raw, &e) != nil || e.Version != version || e.KeyID != keyID {
		return CachedKey{}, false
	}
	return CachedKey{
		KeyID:      e.KeyID,
		Kind:       e.Kind,
		TenantID:   e.TenantID,
		NodeID:     e.NodeID,
		SecretHash: e.SecretHash,
		Revoked:    e.Revoked,
	}, true
}

// Put caches k as the lookup of keyID under version, for the cache's TTL.
func (c *KeyCache) Put(ctx context.Context, keyID string, version int64, k CachedKey) {
	if c.redis == nil {
		return
	}
	raw, err := json.Marshal(cachedEntry{
		Version:    version,
		KeyID:      keyID,
		Kind:       k.Kind,
		TenantID:   k.TenantID,
		NodeID:     k.NodeID,
		SecretHash: k.SecretHash,
		Revoked:    k.Revoked,
	})
	if err != nil {
		return // plain strings and bytes always marshal
	}
	_ = c.redis.Do(ctx, "keycache.put", func(ctx context.Context, rc redis.UniversalClient) error {
		return rc.Set(ctx, c.prefix+keyID, raw, c.ttl).Err()
	})
}
