package app

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-ai/switchyard/internal/testenv"
	"github.com/switchyard-ai/switchyard/keyring"
)

// TestFiveGatewaysStartingTogetherMigrateOnce: five replicas started at the
// same moment on an empty database all become ready, and each migration is
// recorded exactly once (the advisory lock serialises them).
func TestFiveGatewaysStartingTogetherMigrateOnce(t *testing.T) {
	url := testenv.Postgres(t)
	_, prefix := testenv.Redis(t)
	key, _ := keyring.Generate()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var addrs []string
	codes := make(chan int, 5)
	for i := 0; i < 5; i++ {
		env := map[string]string{
			"SWITCHYARD_DATABASE_URL": url, "SWITCHYARD_REDIS_URL": testenv.RedisURL(), "SWITCHYARD_REDIS_PREFIX": prefix,
			"SWITCHYARD_ENCRYPTION_KEYS": "1:" + key, "SWITCHYARD_SHUTDOWN_TIMEOUT": "5s", "SWITCHYARD_LOG_LEVEL": "warn",
			"SWITCHYARD_HTTP_ADDR": testenv.Addr(t), "SWITCHYARD_GRPC_ADDR": testenv.Addr(t), "SWITCHYARD_METRICS_ADDR": testenv.Addr(t),
		}
		addrs = append(addrs, env["SWITCHYARD_HTTP_ADDR"])
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- MainEnv(ctx, []string{"serve"}, io.Discard, io.Discard, envOf(env))
		}()
	}
	defer func() {
		cancel()
		wg.Wait()
		close(codes)
		for c := range codes {
			if c != 0 {
				t.Errorf("a replica exited %d", c)
			}
		}
	}()
	for _, a := range addrs {
		if !eventually(30*time.Second, func() bool { return get(t, "http://"+a+"/readyz") == 200 }) {
			t.Fatalf("replica %s never became ready", a)
		}
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT version, count(*) FROM schema_migrations GROUP BY version`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var v string
		var c int
		if err := rows.Scan(&v, &c); err != nil {
			t.Fatal(err)
		}
		if c != 1 {
			t.Errorf("migration %s recorded %d times", v, c)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no migration recorded")
	}
}
