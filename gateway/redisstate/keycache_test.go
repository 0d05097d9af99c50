package redisstate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"reflect"
	"testing"
	"time"
)

func TestKeyCache(t *testing.T) {
	r, raw := sharedRedis(t, Options{})
	ctx := context.Background()
	hash := sha256.Sum256([]byte("the-secret-part"))
	key := CachedKey{KeyID: "k1", Kind: "client", TenantID: "acme", SecretHash: hash[:]}

	t.Run("hit", func(t *testing.T) {
		c := NewKeyCache(r, time.Minute)
		c.Put(ctx, "k1", 7, key)
		got, ok := c.Get(ctx, "k1", 7)
		if !ok {
			t.Fatal("miss right after Put")
		}
		if !reflect.DeepEqual(got, key) {
			t.Errorf("Get = %+v, want %+v", got, key)
		}
	})
	t.Run("another version is a miss", func(t *testing.T) {
		c := NewKeyCache(r, time.Minute)
		c.Put(ctx, "k1", 7, key)
		if _, ok := c.Get(ctx, "k1", 8); ok {
			t.Error("hit for version 8 on an entry of version 7")
		}
		if _, ok := c.Get(ctx, "unknown", 7); ok {
			t.Error("hit for a key never put")
		}
	})
	t.Run("TTL", func(t *testing.T) {
		for _, tc := range []struct {
			ttl, want time.Duration
		}{{90 * time.Second, 90 * time.Second}, {0, DefaultKeyCacheTTL}} {
			c := NewKeyCache(r, tc.ttl)
			c.Put(ctx, "ttl", 1, key)
			got := raw.PTTL(ctx, r.prefix+"key:ttl").Val()
			if got <= 0 || got > tc.want || got < tc.want-10*time.Second {
				t.Errorf("ttl %v: PTTL = %v, want about %v", tc.ttl, got, tc.want)
			}
		}
	})
	t.Run("revoked node key", func(t *testing.T) {
		c := NewKeyCache(r, time.Minute)
		node := CachedKey{KeyID: "n1", Kind: "node", NodeID: "anna-mac", SecretHash: hash[:], Revoked: true}
		c.Put(ctx, "n1", 3, node)
		got, ok := c.Get(ctx, "n1", 3)
		if !ok || !got.Revoked || got.NodeID != "anna-mac" || got.Kind != "node" {
			t.Errorf("Get = %+v, %v; want the revoked node key", got, ok)
		}
	})
	t.Run("stores the hash, not the secret", func(t *testing.T) {
		c := NewKeyCache(r, time.Minute)
		c.Put(ctx, "k1", 7, key)
		stored, err := raw.Get(ctx, r.prefix+"key:k1").Bytes()
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(stored, []byte("the-secret-part")) {
			t.Errorf("stored entry %q holds the secret", stored)
		}
	})
	t.Run("garbage is a miss", func(t *testing.T) {
		c := NewKeyCache(r, time.Minute)
		raw.Set(ctx, r.prefix+"key:bad", "not json", time.Minute)
		if _, ok := c.Get(ctx, "bad", 0); ok {
			t.Error("hit on an undecodable entry")
		}
	})
}

func TestKeyCacheWithoutRedis(t *testing.T) {
	ctx := context.Background()
	for name, r := range map[string]*Redis{
		"nil":         nil,
		"closed port": guarded(t, "redis://"+closedAddr(t)+"/0", Options{}, nil),
	} {
		c := NewKeyCache(r, 0)
		c.Put(ctx, "k", 1, CachedKey{KeyID: "k"})
		if _, ok := c.Get(ctx, "k", 1); ok {
			t.Errorf("%s: hit without Redis", name)
		}
	}
}
