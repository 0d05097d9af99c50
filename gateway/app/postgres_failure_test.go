package app

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/switchyard-ai/switchyard/proto/switchyard/v1"

	"github.com/switchyard-ai/switchyard/internal/faults"
	"github.com/switchyard-ai/switchyard/internal/simengine"
	"github.com/switchyard-ai/switchyard/internal/testenv"
)

// SPEC §8, Postgres row: known keys keep working from cache for
// SWITCHYARD_DB_OUTAGE_GRACE; unknown keys get 503 auth_unavailable;
// routing uses the last config; admin writes fail with UNAVAILABLE;
// metering buffers then drops (counted); /readyz 200 "degraded" during the
// window and 503 after; no failure needs a restart; at most
// SWITCHYARD_DATABASE_MAX_CONNS connections; every error counted.

// newClientKey creates a client key of tenant acme and returns it and its id.
func newClientKey(t *testing.T, g *gatewayRun, name string) (string, string) {
	t.Helper()
	m := g.mustAdmin(t, "POST", "/admin/v1/tenants/acme/keys", fmt.Sprintf(`{"name":%q}`, name))
	return m["api_key"].(string), m["key"].(map[string]any)["id"].(string)
}

// unknownKey is a well-formed client key that no store holds.
func unknownKey() string {
	const alpha = "abcdefghijklmnopqrstuvwxyz234567"
	b := []byte(testenv.Random(22))
	for i := range b {
		b[i] = alpha[int(b[i])%32]
	}
	return "syk_" + string(b[:12]) + "_" + strings.Repeat(string(b[12:]), 4)[:32]
}

// usageRows counts the usage events of a key in the database, optionally
// only those of requests made in [from, to).
func usageRows(t *testing.T, url, keyID string, from, to time.Time) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect to count usage: %v", err)
	}
	defer c.Close(context.Background())
	if to.IsZero() {
		to = time.Now().Add(time.Hour)
	}
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM usage_events WHERE key_id = $1 AND time >= $2 AND time < $3`, keyID, from, to).Scan(&n); err != nil {
		t.Fatalf("count usage: %v", err)
	}
	return n
}

// waitMeteringIdle waits until nothing is left in the metering buffer.
func waitMeteringIdle(t *testing.T, g *gatewayRun) {
	t.Helper()
	if !eventually(15*time.Second, func() bool {
		return metricSum(t, g.metrics, "switchyard_metering_buffered_events") == 0
	}) {
		t.Fatal("the metering buffer never emptied")
	}
}

// adminGRPC returns an AdminService client carrying the bootstrap key.
func adminGRPC(t *testing.T, g *gatewayRun) (pb.AdminServiceClient, context.Context) {
	t.Helper()
	conn, err := grpc.NewClient(g.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewAdminServiceClient(conn), metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+g.admin)
}

// TestPostgresStoppedWithinGraceKeepsServing stops the gateway's Postgres
// (fast shutdown) under load of known keys, for 4 s, with the default-like
// grace of 1 minute, then starts it again.
//
// Pass criterion: no request of a known key is lost (cloud and node
// targets: routing runs on the last configuration); /readyz is 200
// "degraded" during the outage; an unknown key gets 503 auth_unavailable,
// never a 2xx; an admin write gets 503 over REST and UNAVAILABLE over
// gRPC; after the restart, with no gateway restart, /readyz is 200 "ok",
// admin writes and new keys work, and every request served during the
// outage has its usage row (buffered, then flushed: none dropped);
// switchyard_dependency_errors_total{dependency="postgres"} went up.
func TestPostgresStoppedWithinGraceKeepsServing(t *testing.T) {
	pg := faults.Postgres(t, faults.PostgresOptions{})
	rs := faults.Redis(t)
	g := startGateway(t, map[string]string{
		"SWITCHYARD_DATABASE_URL": pg.URL(), "SWITCHYARD_REDIS_URL": rs.URL(), "SWITCHYARD_DB_OUTAGE_GRACE": "1m",
	}, true)
	setup := configure(t, g, simengine.Config{})
	startFakeNode(t, g, setup.client, "node-a", "local-model", 64)
	loadKey, loadKeyID := newClientKey(t, g, "load")
	if a := chatTo(t, g.http, loadKey, "cloud-model", 2, false); a.status != 200 {
		t.Fatalf("load key: %d %s", a.status, a.body)
	}
	waitMeteringIdle(t, g)
	admin, actx := adminGRPC(t, g)

	l := mixedLoad(g.http, loadKey, 2)
	time.Sleep(500 * time.Millisecond)
	downAt := time.Now()
	pg.Stop()
	degradedAfter := waitReadyz(t, g.http, 200, "degraded", 10*time.Second)

	a := chatTo(t, g.http, unknownKey(), "cloud-model", 2, false)
	if a.status != 503 || !strings.Contains(a.body, "auth_unavailable") {
		t.Errorf("unknown key during the outage: %d %s, want 503 auth_unavailable", a.status, a.body)
	}
	code, m, _ := g.call(t, "POST", "/admin/v1/tenants", g.admin, `{"tenant":{"id":"during-outage"}}`)
	if code != 503 {
		t.Errorf("REST admin write during the outage: %d %v, want 503", code, m)
	}
	_, err := admin.UpsertTenant(actx, &pb.UpsertTenantRequest{Tenant: &pb.Tenant{Id: "during-outage"}})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC admin write during the outage: %v, want UNAVAILABLE", err)
	}
	time.Sleep(4*time.Second - time.Since(downAt))
	upAt := time.Now()
	pg.Start()
	recovered := waitReadyz(t, g.http, 200, "ok", 20*time.Second)
	time.Sleep(500 * time.Millisecond)
	all := l.stop()

	// Everything recovers without a restart.
	var writeBack time.Duration
	start := time.Now()
	if !eventually(10*time.Second, func() bool {
		code, _, _ := g.call(t, "POST", "/admin/v1/tenants", g.admin, `{"tenant":{"id":"after-outage"}}`)
		return code == 200
	}) {
		t.Fatal("admin writes did not come back")
	}
	writeBack = time.Since(start)
	fresh, _ := newClientKey(t, g, "after-outage")
	if a := chatTo(t, g.http, fresh, "cloud-model", 2, false); a.status != 200 {
		t.Errorf("a key created after the outage: %d %s", a.status, a.body)
	}

	during := between(all, downAt, upAt)
	sd, total := summarize(during), summarize(all)
	// The load key served only the load (and one request before it): a
	// row per request, none lost to the outage.
	var flushed int
	flushAt := time.Now()
	if !eventually(15*time.Second, func() bool {
		flushed = usageRows(t, pg.URL(), loadKeyID, time.Time{}, time.Time{})
		return flushed >= len(all)+1
	}) || flushed != len(all)+1 {
		t.Errorf("usage rows of the load key: %d, want %d", flushed, len(all)+1)
	}
	t.Logf("whole run: %v", total)
	t.Logf("during the outage (%v): %v", upAt.Sub(downAt).Round(time.Millisecond), sd)
	t.Logf("/readyz degraded %v after the stop, ok %v after the start; admin writes back %v after ok; all %d usage rows in the database %v later",
		degradedAfter.Round(time.Millisecond), recovered.Round(time.Millisecond), writeBack.Round(time.Millisecond), flushed, time.Since(flushAt).Round(time.Millisecond))
	t.Logf("postgres dependency errors: %s", dependencyErrors(t, g.metrics, "postgres"))

	if total.failed > 0 {
		t.Errorf("%d of %d requests of a known key failed; first: %s", total.failed, total.n, total.firstFailure)
	}
	if sd.byTarget["node"] == 0 || sd.byTarget["vendor"] == 0 {
		t.Errorf("during the outage the last configuration did not route to both targets: %v", sd)
	}
	if d := metricSum(t, g.metrics, "switchyard_metering_dropped_total"); d != 0 {
		t.Errorf("%v usage events dropped with a buffer large enough", d)
	}
	for _, op := range []string{`operation="ping"`, `operation="get_key"`, `operation="upsert_tenant"`} {
		if metricSum(t, g.metrics, "switchyard_dependency_errors_total", `dependency="postgres"`, op) == 0 {
			t.Errorf("no postgres dependency error counted with %s", op)
		}
	}
}

// TestPostgresDownPastGraceRefusesAndMeteringDrops stops Postgres with
// SWITCHYARD_DB_OUTAGE_GRACE=5s and SWITCHYARD_METERING_BUFFER=5.
//
// Pass criterion: within the grace, 20 requests of a known key all get 200;
// 5 usage events stay buffered and 15 are dropped and counted in
// switchyard_metering_dropped_total; past the grace /readyz is 503 and the
// known key gets 503 auth_unavailable; once Postgres is back, with no
// gateway restart, /readyz is 200 "ok", the key works again, and the 5
// buffered events are in the database.
func TestPostgresDownPastGraceRefusesAndMeteringDrops(t *testing.T) {
	pg := faults.Postgres(t, faults.PostgresOptions{})
	g := startGateway(t, map[string]string{
		"SWITCHYARD_DATABASE_URL": pg.URL(), "SWITCHYARD_DB_OUTAGE_GRACE": "5s", "SWITCHYARD_METERING_BUFFER": "5",
	}, true)
	configure(t, g, simengine.Config{})
	key, keyID := newClientKey(t, g, "known")
	if a := chatTo(t, g.http, key, "cloud-model", 2, false); a.status != 200 {
		t.Fatalf("known key: %d %s", a.status, a.body)
	}
	waitMeteringIdle(t, g)

	downAt := time.Now()
	pg.Stop()
	degradedAfter := waitReadyz(t, g.http, 200, "degraded", 10*time.Second)
	dropsBefore := metricSum(t, g.metrics, "switchyard_metering_dropped_total")
	client := &http.Client{Timeout: 30 * time.Second}
	var rs []result
	for range 20 {
		rs = append(rs, chatResult(client, g.http, key, "cloud-model"))
	}
	if s := summarize(rs); s.failed > 0 {
		t.Errorf("known key within the grace: %v; first failure %s", s, s.firstFailure)
	}
	buffered := metricSum(t, g.metrics, "switchyard_metering_buffered_events")
	dropped := metricSum(t, g.metrics, "switchyard_metering_dropped_total") - dropsBefore
	if buffered != 5 || dropped != 15 {
		t.Errorf("metering during the outage: %v buffered, %v dropped; want 5 and 15", buffered, dropped)
	}

	unavailable := waitReadyz(t, g.http, 503, "unavailable: database down longer than the outage grace", 15*time.Second)
	a := chatTo(t, g.http, key, "cloud-model", 2, false)
	if a.status != 503 || !strings.Contains(a.body, "auth_unavailable") {
		t.Errorf("known key past the grace: %d %s, want 503 auth_unavailable", a.status, a.body)
	}
	upAt := time.Now()
	pg.Start()
	recovered := waitReadyz(t, g.http, 200, "ok", 20*time.Second)
	if !eventually(10*time.Second, func() bool { return chatTo(t, g.http, key, "cloud-model", 2, false).status == 200 }) {
		t.Error("the known key did not work again after the outage")
	}
	var rows int
	if !eventually(15*time.Second, func() bool {
		rows = usageRows(t, pg.URL(), keyID, downAt, upAt)
		return rows >= 5
	}) || rows != 5 {
		t.Errorf("usage rows of the outage: %d, want the 5 buffered", rows)
	}
	t.Logf("/readyz degraded %v after the stop, 503 %v after that, ok %v after the start; metering: %v buffered, %v dropped, %d rows written after",
		degradedAfter.Round(time.Millisecond), unavailable.Round(time.Millisecond), recovered.Round(time.Millisecond), buffered, dropped, rows)
	t.Logf("postgres dependency errors: %s", dependencyErrors(t, g.metrics, "postgres"))
	if metricSum(t, g.metrics, "switchyard_dependency_errors_total", `dependency="postgres"`, `operation="insert_usage"`) == 0 {
		t.Error("failed metering writes were not counted")
	}
}

// TestPostgresDownAtStartup starts the gateway before its database exists
// on the network, then starts Postgres.
//
// Pass criterion: serve keeps running (no exit, no crash loop) with
// /readyz 503 "starting: database not ready" and client calls answered 503
// auth_unavailable; once Postgres is up, with no restart, the gateway
// migrates, loads its configuration and answers /readyz 200 "ok" within
// 30 s, and serves requests; the failed migrations were counted.
func TestPostgresDownAtStartup(t *testing.T) {
	pg := faults.Postgres(t, faults.PostgresOptions{NotStarted: true})
	g := startGateway(t, map[string]string{"SWITCHYARD_DATABASE_URL": pg.URL()}, false)
	waitReadyz(t, g.http, 503, "starting: database not ready", 20*time.Second)
	time.Sleep(2 * time.Second)
	if g.exited() {
		t.Fatal("serve exited while its database was down")
	}
	if code, word := readyz(g.http); code != 503 {
		t.Errorf("/readyz = %d %q with the database down", code, word)
	}
	a := chatTo(t, g.http, unknownKey(), "cloud-model", 2, false)
	if a.status != 503 || !strings.Contains(a.body, "auth_unavailable") {
		t.Errorf("client call before the database: %d %s", a.status, a.body)
	}
	startedAt := time.Now()
	pg.Start()
	ready := waitReadyz(t, g.http, 200, "ok", 30*time.Second)
	setup := configure(t, g, simengine.Config{})
	if a := chatTo(t, g.http, setup.client, "cloud-model", 2, false); a.status != 200 {
		t.Errorf("after the database appeared: %d %s", a.status, a.body)
	}
	t.Logf("ready %v after Postgres started (%v since serve started); postgres dependency errors: %s",
		ready.Round(time.Millisecond), time.Since(startedAt).Round(time.Millisecond), dependencyErrors(t, g.metrics, "postgres"))
	if metricSum(t, g.metrics, "switchyard_dependency_errors_total", `dependency="postgres"`, `operation="migrate"`) == 0 {
		t.Error("failed migrations were not counted")
	}
}

// TestPostgresPausedKnownKeysDoNotWait freezes Postgres (SIGSTOP: sockets
// open, nothing answers) for 8 s under load of known keys, then thaws it.
//
// Pass criterion: no request of a known key fails, and none waits on the
// database: none is slower than the slowest before the freeze plus 2 s
// (a lookup against the frozen database would wait for its 5 s timeout);
// no request of the node's model leaves the node (heartbeats do not wait
// on the database either, so the node never turns offline, 2 s here);
// /readyz turns 200 "degraded"; an unknown key gets 503 auth_unavailable
// within 10 s (the lookup timeout, not forever); after the thaw /readyz is
// 200 "ok" again and the usage of the freeze is written, none dropped.
func TestPostgresPausedKnownKeysDoNotWait(t *testing.T) {
	pg := faults.Postgres(t, faults.PostgresOptions{})
	g := startGateway(t, map[string]string{
		"SWITCHYARD_DATABASE_URL": pg.URL(), "SWITCHYARD_DB_OUTAGE_GRACE": "1m",
		"SWITCHYARD_NODE_SUSPECT_AFTER": "1s", "SWITCHYARD_NODE_OFFLINE_AFTER": "2s",
	}, true)
	setup := configure(t, g, simengine.Config{})
	startFakeNode(t, g, setup.client, "node-a", "local-model", 64)
	key, keyID := newClientKey(t, g, "load")
	waitMeteringIdle(t, g)

	l := mixedLoad(g.http, key, 2)
	time.Sleep(time.Second)
	pauseAt := time.Now()
	pg.Pause()
	degradedAfter := waitReadyz(t, g.http, 200, "degraded", 15*time.Second)
	start := time.Now()
	a := chatTo(t, g.http, unknownKey(), "cloud-model", 2, false)
	unknownTook := time.Since(start)
	if a.status != 503 || !strings.Contains(a.body, "auth_unavailable") || unknownTook > 10*time.Second {
		t.Errorf("unknown key against a frozen database: %d in %v %s", a.status, unknownTook, a.body)
	}
	time.Sleep(8*time.Second - time.Since(pauseAt))
	resumeAt := time.Now()
	pg.Resume()
	recovered := waitReadyz(t, g.http, 200, "ok", 20*time.Second)
	all := l.stop()

	before, during := summarize(between(all, time.Time{}, pauseAt)), summarize(between(all, pauseAt, resumeAt))
	t.Logf("before the freeze: %v", before)
	t.Logf("while frozen (%v): %v", resumeAt.Sub(pauseAt).Round(time.Millisecond), during)
	t.Logf("/readyz degraded %v after the freeze, ok %v after the thaw; unknown key answered in %v; postgres dependency errors: %s",
		degradedAfter.Round(time.Millisecond), recovered.Round(time.Millisecond), unknownTook.Round(time.Millisecond), dependencyErrors(t, g.metrics, "postgres"))
	if total := summarize(all); total.failed > 0 {
		t.Errorf("%d of %d requests failed; first: %s", total.failed, total.n, total.firstFailure)
	}
	// Heartbeats do not wait on the hung database, so the node never turns
	// offline (2 s without a heartbeat here) and keeps its traffic.
	if during.spilled > 0 {
		t.Errorf("%d requests of the node's model went elsewhere while the database was frozen", during.spilled)
	}
	if limit := before.slowest + 2*time.Second; during.slowest > limit {
		t.Errorf("a request of a known key took %v while the database was frozen (limit %v)", during.slowest, limit)
	}
	// The key served only the load: a row per request, none lost.
	var rows int
	if !eventually(20*time.Second, func() bool {
		rows = usageRows(t, pg.URL(), keyID, time.Time{}, time.Time{})
		return rows >= len(all)
	}) || rows != len(all) {
		t.Errorf("usage rows of the load key: %d, want %d", rows, len(all))
	}
	if d := metricSum(t, g.metrics, "switchyard_metering_dropped_total"); d != 0 {
		t.Errorf("%v usage events dropped", d)
	}
}

// TestPostgresPoolNeverExceedsMaxConns runs a burst of admin reads and
// writes and unknown-key lookups (each a query: no cache can answer it)
// against a gateway with SWITCHYARD_DATABASE_MAX_CONNS=4, sampling
// pg_stat_activity throughout.
//
// Pass criterion: the gateway never holds more than 4 connections to its
// database (its LISTEN connection included), and the burst is served:
// admin calls 200, unknown keys 401, nothing else.
func TestPostgresPoolNeverExceedsMaxConns(t *testing.T) {
	const maxConns = 4
	url := testenv.Postgres(t)
	g := startGateway(t, map[string]string{"SWITCHYARD_DATABASE_URL": url, "SWITCHYARD_DATABASE_MAX_CONNS": fmt.Sprint(maxConns)}, true)
	configure(t, g, simengine.Config{})

	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var peak, samples atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for ctx.Err() == nil {
			var n int64
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'switchyard'`).Scan(&n); err == nil {
				samples.Add(1)
				if n > peak.Load() {
					peak.Store(n)
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	var mu sync.Mutex
	statuses := map[string]int{}
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 60 * time.Second}
	for w := range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				var kind string
				var code int
				switch (w + i) % 3 {
				case 0:
					kind = "admin read"
					code, _, _ = g.call(t, "GET", "/admin/v1/tenants", g.admin, "")
				case 1:
					kind = "admin write"
					code, _, _ = g.call(t, "POST", "/admin/v1/tenants", g.admin, fmt.Sprintf(`{"tenant":{"id":"burst-%d-%d"}}`, w, i))
				default:
					kind = "unknown key"
					code = chatResult(client, g.http, unknownKey(), "cloud-model").status
				}
				mu.Lock()
				statuses[fmt.Sprintf("%s %d", kind, code)]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond)
	cancel()
	<-sampled
	t.Logf("burst outcomes: %v; peak %d connections over %d samples (max %d)", statuses, peak.Load(), samples.Load(), maxConns)
	if peak.Load() > maxConns {
		t.Errorf("the gateway held %d connections, more than SWITCHYARD_DATABASE_MAX_CONNS=%d", peak.Load(), maxConns)
	}
	if samples.Load() == 0 {
		t.Error("pg_stat_activity was never sampled")
	}
	for k, n := range statuses {
		if k != "admin read 200" && k != "admin write 200" && k != "unknown key 401" {
			t.Errorf("%d × %s", n, k)
		}
	}
}
