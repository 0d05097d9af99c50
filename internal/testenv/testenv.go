// Package testenv gives tests the real services they need: a fresh Postgres
// database, a private Redis key prefix, free loopback ports. Without CI a
// missing service skips the test; with CI=true it fails it, so that a
// broken machine never passes for a green run.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// Default addresses of the machine's shared services; override with
// SWITCHYARD_TEST_DATABASE_URL and SWITCHYARD_TEST_REDIS_URL.
const (
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	DefaultRedisURL    = "redis://127.0.0.1:6379/0"
)

// CI reports whether the tests run in CI, where a missing service is a failure.
func CI() bool { return os.Getenv("CI") == "true" }

// Unavailable skips the test, or fails it under CI.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if CI() {
		t.Fatalf("CI=true and %s", msg)
	}
	t.Skipf("%s (set CI=true to make this a failure)", msg)
}

// Random returns n random bytes in hex.
func Random(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func adminDatabaseURL() string {
	if u := os.Getenv("SWITCHYARD_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultDatabaseURL
}

// Postgres creates a fresh, empty database and returns its URL; the database
// is dropped when the test ends.
func Postgres(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin := adminDatabaseURL()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		Unavailable(t, "Postgres is unreachable at %s: %v", redactURL(admin), err)
	}
	defer conn.Close(context.Background())
	name := "sytest_" + Random(6)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Logf("drop database %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("parse %s: %v", redactURL(admin), err)
	}
	u.Path = "/" + name
	return u.String()
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// RedisURL returns the URL of the shared Redis.
func RedisURL() string {
	if u := os.Getenv("SWITCHYARD_TEST_REDIS_URL"); u != "" {
		return u
	}
	return DefaultRedisURL
}

// Redis returns a client on the shared Redis and a key prefix unique to this
// test; every key under the prefix is deleted when the test ends.
func Redis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	opt, err := redis.ParseURL(RedisURL())
	if err != nil {
		t.Fatalf("parse Redis URL: %v", err)
	}
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		Unavailable(t, "Redis is unreachable at %s: %v", opt.Addr, err)
	}
	prefix := "sytest:" + Random(6) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		// Keys with hash tags put the prefix inside braces.
		iter = c.Scan(ctx, 0, "*"+prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		c.Close()
	})
	return c, prefix
}

// Addr returns a free loopback address ("127.0.0.1:port"). Another process
// may take it before the caller listens; tests that can, listen on :0.
func Addr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}
