package app

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/faults"
	"github.com/switchyard-ai/switchyard/internal/simengine"
	"github.com/switchyard-ai/switchyard/internal/testenv"
)

// SPEC §8, Redis row: after 3 consecutive network errors Redis is skipped
// for 2 s, so a hung Redis costs a request one timeout; slots, limits and
// the node pool fall back per replica; /readyz 200 "degraded"; no restart
// needed; every error counted.

// mixedLoad sends chat completions alternating between the cloud model and
// the node-served model.
func mixedLoad(addr, key string, workers int) *load {
	client := &http.Client{Timeout: 60 * time.Second}
	var n atomic.Int64
	return startLoad(workers, func() result {
		model := "cloud-model"
		if n.Add(1)%2 == 0 {
			model = "local-model"
		}
		return chatResult(client, addr, key, model)
	})
}

// sharedStateIsBack waits until Redis holds the tenant's limit counters
// and the node pool again: the replica writes its shared state to Redis,
// not only to its own memory.
func sharedStateIsBack(t *testing.T, rs *faults.Server, g *gatewayRun, key string) time.Duration {
	t.Helper()
	rc := rs.Client()
	prefix := g.env["SWITCHYARD_REDIS_PREFIX"]
	start := time.Now()
	var limits, pool int
	if !eventually(15*time.Second, func() bool {
		chatTo(t, g.http, key, "cloud-model", 2, false)
		ks, _ := rc.Keys(context.Background(), "{"+prefix+"tenant:acme}:rpm:*").Result()
		limits = len(ks)
		n, _ := rc.Exists(context.Background(), prefix+"nodes").Result()
		pool = int(n)
		return limits > 0 && pool > 0
	}) {
		t.Fatalf("shared state not back in Redis: %d limit counters, node pool present %v", limits, pool == 1)
	}
	return time.Since(start)
}

// TestRedisStoppedMidLoadFallsBackPerReplica stops the gateway's Redis
// (SIGTERM) under load, leaves it down for 4 s, and starts it again, empty,
// on the same port.
//
// Pass criterion: no request is lost (every one of them 200), node-served
// requests go on while Redis is down (slot leases and the node pool per
// replica), /readyz is 200 "degraded" while it is down and 200 "ok" within
// 15 s of its return, shared state (limit counters, node pool) is written
// to Redis again without a restart, and
// switchyard_dependency_errors_total{dependency="redis"} went up.
func TestRedisStoppedMidLoadFallsBackPerReplica(t *testing.T) {
	rs := faults.Redis(t)
	g := startGateway(t, map[string]string{"SWITCHYARD_DATABASE_URL": testenv.Postgres(t), "SWITCHYARD_REDIS_URL": rs.URL()}, true)
	setup := configure(t, g, simengine.Config{})
	startFakeNode(t, g, setup.client, "node-a", "local-model", 64)
	waitReadyz(t, g.http, 200, "ok", 10*time.Second)
	errsBefore := metricSum(t, g.metrics, "switchyard_dependency_errors_total", `dependency="redis"`)

	l := mixedLoad(g.http, setup.client, 4)
	time.Sleep(time.Second)
	downAt := time.Now()
	rs.Stop()
	degradedAfter := waitReadyz(t, g.http, 200, "degraded", 10*time.Second)
	time.Sleep(4 * time.Second)
	upAt := time.Now()
	rs.Start()
	recovered := waitReadyz(t, g.http, 200, "ok", 15*time.Second)
	time.Sleep(time.Second)
	all := l.stop()
	shared := sharedStateIsBack(t, rs, g, setup.client)

	during := summarize(between(all, downAt, upAt))
	total := summarize(all)
	t.Logf("whole run: %v", total)
	t.Logf("while Redis was down (%v): %v", upAt.Sub(downAt).Round(time.Millisecond), during)
	t.Logf("/readyz degraded %v after the stop; ok %v after the restarted Redis answered; shared state back %v later",
		degradedAfter.Round(time.Millisecond), recovered.Round(time.Millisecond), shared.Round(time.Millisecond))
	errsAfter := metricSum(t, g.metrics, "switchyard_dependency_errors_total", `dependency="redis"`)
	t.Logf("redis dependency errors: %v → %v (%s)", errsBefore, errsAfter, dependencyErrors(t, g.metrics, "redis"))

	if total.failed > 0 {
		t.Errorf("%d of %d requests failed; first: %s", total.failed, total.n, total.firstFailure)
	}
	if during.n == 0 || during.byTarget["node"] == 0 {
		t.Errorf("no node-served request while Redis was down: %v", during)
	}
	if errsAfter <= errsBefore {
		t.Error("switchyard_dependency_errors_total{dependency=\"redis\"} did not go up")
	}
}

// TestRedisPausedCostsARequestOneTimeout freezes the gateway's Redis
// (SIGSTOP: connections open, nothing answers, as a hung server or a black
// hole) for 5 s under load, with SWITCHYARD_REDIS_TIMEOUT=250ms, then
// thaws it.
//
// Pass criterion: no request is lost; no request that started while Redis
// was frozen took longer than the 99th percentile before the freeze plus
// four Redis timeouts (one timeout is the price, three more are margin for
// a loaded machine; without the breaker and the per-request rule a request
// pays one per call it makes, up to six);
// /readyz is 200 "degraded" while frozen and 200 "ok" within 15 s of the
// thaw.
func TestRedisPausedCostsARequestOneTimeout(t *testing.T) {
	const redisTimeout = 250 * time.Millisecond
	rs := faults.Redis(t)
	g := startGateway(t, map[string]string{
		"SWITCHYARD_DATABASE_URL": testenv.Postgres(t), "SWITCHYARD_REDIS_URL": rs.URL(),
		"SWITCHYARD_REDIS_TIMEOUT": redisTimeout.String(),
	}, true)
	setup := configure(t, g, simengine.Config{})
	startFakeNode(t, g, setup.client, "node-a", "local-model", 64)
	waitReadyz(t, g.http, 200, "ok", 10*time.Second)

	l := mixedLoad(g.http, setup.client, 4)
	time.Sleep(1500 * time.Millisecond)
	pauseAt := time.Now()
	rs.Pause()
	degradedAfter := waitReadyz(t, g.http, 200, "degraded", 10*time.Second)
	time.Sleep(5*time.Second - time.Since(pauseAt))
	resumeAt := time.Now()
	rs.Resume()
	recovered := waitReadyz(t, g.http, 200, "ok", 15*time.Second)
	time.Sleep(500 * time.Millisecond)
	all := l.stop()

	before := summarize(between(all, time.Time{}, pauseAt))
	during := between(all, pauseAt, resumeAt)
	sd := summarize(during)
	limit := before.p99 + 4*redisTimeout
	paid, paidTwice := 0, 0
	for _, r := range during {
		if r.took >= redisTimeout {
			paid++
		}
		if r.took >= 2*redisTimeout {
			paidTwice++
		}
	}
	t.Logf("before the freeze: %v", before)
	t.Logf("while frozen: %v; %d requests took a Redis timeout or more, %d two or more; limit %v", sd, paid, paidTwice, limit.Round(time.Millisecond))
	t.Logf("/readyz degraded %v after the freeze; ok %v after the thaw", degradedAfter.Round(time.Millisecond), recovered.Round(time.Millisecond))
	t.Logf("redis dependency errors: %s", dependencyErrors(t, g.metrics, "redis"))

	if total := summarize(all); total.failed > 0 {
		t.Errorf("%d of %d requests failed; first: %s", total.failed, total.n, total.firstFailure)
	}
	if sd.n == 0 {
		t.Fatal("no request started while Redis was frozen")
	}
	for _, r := range during {
		if r.took > limit {
			t.Errorf("a request started %v into the freeze took %v (limit %v)", r.start.Sub(pauseAt).Round(time.Millisecond), r.took.Round(time.Millisecond), limit.Round(time.Millisecond))
		}
	}
}

// TestRedisDownAtStartup starts the gateway while its Redis is down, then
// starts Redis.
//
// Pass criterion: serve starts and serves (20 of 20 requests 200, node
// included) with /readyz 200 "degraded"; once Redis is up, /readyz is 200
// "ok" within 15 s and shared state is written to Redis, with no restart.
func TestRedisDownAtStartup(t *testing.T) {
	rs := faults.Redis(t)
	rs.Stop()
	g := startGateway(t, map[string]string{"SWITCHYARD_DATABASE_URL": testenv.Postgres(t), "SWITCHYARD_REDIS_URL": rs.URL()}, true)
	waitReadyz(t, g.http, 200, "degraded", 10*time.Second)
	setup := configure(t, g, simengine.Config{})
	startFakeNode(t, g, setup.client, "node-a", "local-model", 8)
	client := &http.Client{Timeout: 30 * time.Second}
	var rs20 []result
	for i := range 20 {
		model := "cloud-model"
		if i%2 == 1 {
			model = "local-model"
		}
		rs20 = append(rs20, chatResult(client, g.http, setup.client, model))
	}
	s := summarize(rs20)
	t.Logf("with Redis down: %v", s)
	if s.failed > 0 || s.byTarget["node"] == 0 {
		t.Errorf("with Redis down from the start: %v; first failure: %s", s, s.firstFailure)
	}

	rs.Start()
	recovered := waitReadyz(t, g.http, 200, "ok", 15*time.Second)
	shared := sharedStateIsBack(t, rs, g, setup.client)
	t.Logf("/readyz ok %v after Redis answered; shared state back %v later; redis dependency errors: %s",
		recovered.Round(time.Millisecond), shared.Round(time.Millisecond), dependencyErrors(t, g.metrics, "redis"))
	if metricSum(t, g.metrics, "switchyard_dependency_errors_total", `dependency="redis"`) == 0 {
		t.Error("no Redis dependency error counted")
	}
}
