package postgres

import (
	"context"
	"strconv"
	"time"
)

// Listen follows the config version: it LISTENs on switchyard_config on a
// connection it holds from the pool (so it counts against MaxConns, as SPEC
// §8's per-replica cap wants) and calls fn with each version announced.
//
// Notifications sent while the connection is down are lost, so after every
// (re)connection Listen also calls fn with the version it reads once
// LISTEN is in place: a follower that compares versions misses nothing.
// When the connection fails it reconnects with backoff (100 ms doubling to
// 5 s). fn runs on Listen's goroutine. Listen returns nil once ctx ends.
func (p *Postgres) Listen(ctx context.Context, fn func(version int64)) error {
	const (
		minBackoff = 100 * time.Millisecond
		maxBackoff = 5 * time.Second
	)
	backoff := minBackoff
	for {
		listening, err := p.listenOnce(ctx, fn)
		if ctx.Err() != nil {
			return nil
		}
		if listening {
			backoff = minBackoff
		}
		if p.onListenError != nil {
			p.onListenError(err)
		}
		p.logger.Warn("config listener lost its database connection; reconnecting",
			"error", fail("listen", err).Error(), "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// listenOnce listens on one connection until it fails or ctx ends, and
// reports whether LISTEN was in place.
func (p *Postgres) listenOnce(ctx context.Context, fn func(version int64)) (listening bool, err error) {
	pc, err := p.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	// A connection that LISTENed keeps receiving notifications, so it is
	// closed rather than reused; Release then drops it from the pool, which
	// counted it all along.
	conn := pc.Conn()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
		pc.Release()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return false, err
	}
	var version int64
	if err := conn.QueryRow(ctx, "SELECT version FROM config_version").Scan(&version); err != nil {
		return true, err
	}
	fn(version)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		v, err := strconv.ParseInt(n.Payload, 10, 64)
		if err != nil {
			p.logger.Warn("config notification without a version; ignored", "payload_bytes", len(n.Payload))
			continue
		}
		fn(v)
	}
}
