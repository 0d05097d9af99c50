package faults

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestRedisControls drives a private Redis through every control.
func TestRedisControls(t *testing.T) {
	s := Redis(t)
	c := s.Client()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Pause()
	pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := c.Ping(pctx).Err()
	cancel()
	if err == nil {
		t.Fatal("a paused Redis answered")
	}
	s.Resume()
	if !eventually(func() bool { return c.Ping(ctx).Err() == nil }) {
		t.Fatal("Redis did not answer after Resume")
	}
	s.Stop()
	if c.Ping(ctx).Err() == nil {
		t.Fatal("a stopped Redis answered")
	}
	s.Start()
	if !eventually(func() bool { return c.Ping(ctx).Err() == nil }) {
		t.Fatal("Redis did not answer after Start")
	}
	// No persistence: a restart loses the data set, as the gateway must
	// expect.
	if n, _ := c.Exists(ctx, "k").Result(); n != 0 {
		t.Error("the key survived a restart")
	}
	s.Kill()
	if s.Running() {
		t.Fatal("still running after Kill")
	}
	s.Restart()
}

// TestPostgresControls drives a private PostgreSQL through every control.
func TestPostgresControls(t *testing.T) {
	s := Postgres(t, PostgresOptions{})
	ctx := context.Background()
	exec := func(timeout time.Duration, sql string) error {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		c, err := pgx.Connect(cctx, s.URL())
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		_, err = c.Exec(cctx, sql)
		return err
	}
	if err := exec(5*time.Second, "CREATE TABLE t (x int); INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	// A connection opened before the pause: its backend is frozen too.
	open, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close(context.Background())
	s.Pause()
	if err := exec(300*time.Millisecond, "SELECT 1"); err == nil {
		t.Fatal("a paused PostgreSQL accepted a new connection")
	}
	qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = open.Exec(qctx, "SELECT 1")
	cancel()
	if err == nil {
		t.Fatal("a paused PostgreSQL answered on a connection opened before")
	}
	s.Resume()
	s.Stop()
	if err := exec(time.Second, "SELECT 1"); err == nil {
		t.Fatal("a stopped PostgreSQL answered")
	}
	s.Start()
	if err := exec(5*time.Second, "SELECT x FROM t"); err != nil {
		t.Fatalf("data lost over a restart: %v", err)
	}
	s.Kill()
	s.Start() // crash recovery on the same folder and port
	if err := exec(5*time.Second, "SELECT x FROM t"); err != nil {
		t.Fatalf("after Kill and Start: %v", err)
	}
}

func eventually(f func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if f() {
			return true
		}
	}
	return false
}
