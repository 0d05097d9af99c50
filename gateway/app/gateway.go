package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/switchyard-ai/switchyard/gateway/admin"
	"github.com/switchyard-ai/switchyard/gateway/auth"
	"github.com/switchyard-ai/switchyard/gateway/catalog"
	"github.com/switchyard-ai/switchyard/gateway/metering"
	"github.com/switchyard-ai/switchyard/gateway/metrics"
	"github.com/switchyard-ai/switchyard/gateway/nodes"
	"github.com/switchyard-ai/switchyard/gateway/openai"
	"github.com/switchyard-ai/switchyard/gateway/redisstate"
	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/gateway/upstream"
	"github.com/switchyard-ai/switchyard/keyring"
)

// gateway is one running replica: its store, servers and readiness.
type gateway struct {
	cfg     Config
	logger  *slog.Logger
	store   store.Store
	keyring *keyring.Keyring
	reg     *prometheus.Registry
	ready   *readiness

	// migrate runs until the schema is current; nil for stores without one.
	migrate func(ctx context.Context) error
	// subscribe delivers config versions as the store announces them
	// (LISTEN/NOTIFY, or the memory store's callbacks) until ctx ends.
	subscribe func(ctx context.Context, fn func(version int64))

	metrics  *metrics.Metrics
	redis    *redisstate.Redis
	catalog  *catalog.Catalog
	upstream *upstream.Client
	meter    *metering.Writer
	nodes    *nodes.Pool
	resolver *auth.Resolver
	api      *openai.Handler

	admin       *admin.Server
	grpc        *grpc.Server
	health      *health.Server
	rest        *admin.REST
	httpSrv     *http.Server
	metricsSrv  *http.Server
	httpLis     net.Listener
	grpcLis     net.Listener
	metricsLis  net.Listener
	background  sync.WaitGroup
	stopBackgrd context.CancelFunc
}

func newGateway(cfg Config, logger *slog.Logger, st store.Store, kr *keyring.Keyring) *gateway {
	reg := prometheus.NewRegistry()
	reg.MustRegister(goCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	g := &gateway{cfg: cfg, logger: logger, keyring: kr, reg: reg, ready: newReadiness(cfg.DBOutageGrace), metrics: metrics.New(reg)}
	g.store = countedStore{Store: st, count: func(op string) { g.dependencyError("postgres", op) }}
	return g
}

// goCollector is the Go runtime's metrics with, beside the defaults,
// go_gc_heap_live_bytes: the heap the last collection found live, to the
// byte. The go_memstats heap figures also count garbage made since and free
// space; this is the one that tells what open streams and caches hold.
func goCollector() prometheus.Collector {
	return collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)},
	))
}

// dependencyError counts one failed call to a dependency (SPEC §8).
func (g *gateway) dependencyError(dependency, operation string) {
	g.metrics.DependencyErrors.WithLabelValues(dependency, operation).Inc()
}

// meteringMaxBackoff caps the wait between the metering writer's retries
// while Postgres is down, so that what it buffered is written within
// seconds of the database's return.
const meteringMaxBackoff = 5 * time.Second

// redisProbeInterval is how often a replica pings Redis on its own: it
// lets the breaker's probe happen (and /readyz turn "ok" again) when no
// request needs Redis, and notices a Redis that died while idle.
const redisProbeInterval = time.Second

// storeCallTimeout bounds the calls to the store that the gateway makes
// on its own (configuration loads, health pings), so that a hung database
// is a failed call, tried again, rather than a loop stuck for good.
const storeCallTimeout = 10 * time.Second

// wire builds the request path: Redis (when configured), the configuration
// catalog, key resolution, limits, the upstream client, metering and the
// OpenAI API handler.
func (g *gateway) wire(ctx context.Context) error {
	m := g.metrics
	if g.cfg.RedisURL != "" {
		r, err := redisstate.Open(ctx, g.cfg.RedisURL, redisstate.Options{
			Prefix: g.cfg.RedisPrefix, Timeout: g.cfg.RedisTimeout, Logger: g.logger,
			OnError: func(op string, _ error) { g.dependencyError("redis", op) },
		})
		if err != nil {
			return fmt.Errorf("SWITCHYARD_REDIS_URL: %w", err)
		}
		g.redis = r
		g.ready.redis = r.Available
	}
	g.upstream = upstream.New(upstream.Options{
		Logger: g.logger, NodeNetworks: g.cfg.NodeNetworks,
		OnPause: func(vendor string, _ time.Time) { m.VendorPauses.WithLabelValues(vendor).Inc() },
	})
	// Failed reloads and key lookups are counted by g.store, where they
	// happen; the catalog and the resolver do not count them again.
	g.catalog = catalog.New(g.store, g.keyring, catalog.Options{
		Logger:          g.logger,
		OnDecryptError:  func(table string) { m.KeyringDecryptErrors.WithLabelValues(table).Inc() },
		OnVendorChanged: g.upstream.ResetVendor,
		LoadTimeout:     storeCallTimeout,
	})
	var shared auth.SharedCache
	if g.redis != nil {
		shared = sharedKeys{redisstate.NewKeyCache(g.redis, 0)}
	}
	g.resolver = auth.NewResolver(g.store, auth.ResolverOptions{
		Version:   g.catalog.Version,
		Shared:    shared,
		Grace:     g.cfg.DBOutageGrace,
		DownSince: g.ready.dbDown,
		OnResult:  func(result string) { m.AuthCacheResults.WithLabelValues(result).Inc() },
	})
	g.meter = metering.New(g.store, metering.Options{
		Logger: g.logger, Metrics: m, Capacity: g.cfg.MeteringBuffer, MaxBackoff: meteringMaxBackoff,
	})
	g.nodes = nodes.New(nodes.Options{
		Logger: g.logger, Metrics: m, Registry: g.catalog, Keys: g.store, Opener: g.keyring,
		Leaser:       redisstate.NewLeaser(g.redis, redisstate.LeaserOptions{Logger: g.logger, TTL: g.cfg.SlotTTL}),
		States:       redisstate.NewNodeStates(g.redis, redisstate.NodeStatesOptions{}),
		SuspectAfter: g.cfg.NodeSuspectAfter,
		OfflineAfter: g.cfg.NodeOfflineAfter,
	})
	g.api = openai.New(openai.Options{
		Logger:       g.logger,
		Metrics:      m,
		Keys:         g.resolver,
		Config:       g.catalog,
		Limits:       redisstate.NewLimiter(g.redis, redisstate.LimiterOptions{BudgetOnFailure: g.cfg.BudgetOnRedisFailure}),
		Sender:       g.upstream,
		Meter:        g.meter,
		Nodes:        g.nodes,
		MaxBodyBytes: g.cfg.MaxBodyBytes,
	})
	return nil
}

// reloadAfterWrite reloads this replica's configuration as soon as one of
// its admin calls has changed something, so that a revocation made here
// counts here at once; other replicas follow by NOTIFY within a second.
func (g *gateway) reloadAfterWrite(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err == nil && strings.HasPrefix(info.FullMethod, "/switchyard.v1.AdminService/") && !readOnly(info.FullMethod) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
		lerr := g.catalog.Load(lctx, false)
		cancel()
		if lerr != nil {
			g.logger.Debug("configuration reload after a write failed", slog.String("error", lerr.Error()))
		}
	}
	return resp, err
}

// Bounds of an admin call that brings no earlier deadline of its own, so
// that a hung database answers UNAVAILABLE instead of holding the caller
// until it returns. RotateEncryption (every sealed value in one
// transaction) and GetUsage (a scan of usage events) get longer.
const (
	adminCallTimeout = 30 * time.Second
	longCallTimeout  = 10 * time.Minute
)

// callScope sets up every gRPC call (REST ones included, as they pass
// through the gRPC server): it pays for at most one Redis failure
// (redisstate.PerRequest), and an admin call is bounded in time.
func callScope(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx = redisstate.PerRequest(ctx)
	if strings.HasPrefix(info.FullMethod, "/switchyard.v1.AdminService/") {
		d := adminCallTimeout
		if strings.HasSuffix(info.FullMethod, "/RotateEncryption") || strings.HasSuffix(info.FullMethod, "/GetUsage") {
			d = longCallTimeout
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	return handler(ctx, req)
}

func readOnly(method string) bool {
	name := method[strings.LastIndexByte(method, '/')+1:]
	return strings.HasPrefix(name, "Get") || strings.HasPrefix(name, "List")
}

// sharedKeys adapts the Redis key cache to the resolver.
type sharedKeys struct{ c *redisstate.KeyCache }

func (s sharedKeys) Get(ctx context.Context, id string, version int64) (store.Key, bool) {
	ck, ok := s.c.Get(ctx, id, version)
	if !ok {
		return store.Key{}, false
	}
	k := store.Key{ID: ck.KeyID, Kind: store.KeyKind(ck.Kind), TenantID: ck.TenantID, NodeID: ck.NodeID, SecretHash: ck.SecretHash}
	if ck.Revoked {
		t := time.Unix(0, 0)
		k.RevokedAt = &t
	}
	return k, true
}

func (s sharedKeys) Put(ctx context.Context, id string, version int64, k store.Key) {
	s.c.Put(ctx, id, version, redisstate.CachedKey{
		KeyID: k.ID, Kind: string(k.Kind), TenantID: k.TenantID, NodeID: k.NodeID, SecretHash: k.SecretHash, Revoked: k.Revoked(),
	})
}

// start binds every listener (so that a port in use fails start-up at once)
// and serves in the background.
func (g *gateway) start(ctx context.Context) error {
	var err error
	if g.httpLis, err = net.Listen("tcp", g.cfg.HTTPAddr); err != nil {
		return fmt.Errorf("HTTP listener %s: %w", g.cfg.HTTPAddr, err)
	}
	if g.grpcLis, err = net.Listen("tcp", g.cfg.GRPCAddr); err != nil {
		g.httpLis.Close()
		return fmt.Errorf("gRPC listener %s: %w", g.cfg.GRPCAddr, err)
	}
	if g.metricsLis, err = net.Listen("tcp", g.cfg.MetricsAddr); err != nil {
		g.httpLis.Close()
		g.grpcLis.Close()
		return fmt.Errorf("metrics listener %s: %w", g.cfg.MetricsAddr, err)
	}

	if err := g.wire(ctx); err != nil {
		g.httpLis.Close()
		g.grpcLis.Close()
		g.metricsLis.Close()
		return err
	}
	g.admin = admin.New(admin.Options{Store: g.store, Keyring: g.keyring, Logger: g.logger, Pauses: g.upstream, Nodes: g.nodes, Registry: g.catalog,
		HeartbeatInterval: g.cfg.HeartbeatInterval})
	authn := admin.NewAuthenticator(g.resolver, g.cfg.BootstrapAdminKey)
	// callScope goes outermost (grpc.UnaryInterceptor runs before every
	// chained one), so that the key check is under it too.
	g.grpc, g.health = admin.NewGRPCServer(g.admin, authn,
		grpc.UnaryInterceptor(callScope),
		grpc.ChainUnaryInterceptor(g.reloadAfterWrite))
	if g.rest, err = admin.NewREST(ctx, g.grpc); err != nil {
		return fmt.Errorf("REST gateway: %w", err)
	}

	mux := http.NewServeMux()
	mux.Handle("/admin/", g.rest)
	mux.Handle("/v1/", g.api)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /readyz", g.ready)
	g.httpSrv = &http.Server{
		// A request pays for at most one Redis failure (redisstate.PerRequest).
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mux.ServeHTTP(w, r.WithContext(redisstate.PerRequest(r.Context())))
		}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(g.logger.Handler(), slog.LevelDebug),
	}
	metricsMux := http.NewServeMux()
	metricsMux.Handle("GET /metrics", promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{Registry: g.reg}))
	g.metricsSrv = &http.Server{Handler: metricsMux, ReadHeaderTimeout: 10 * time.Second}

	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	g.stopBackgrd = cancel
	g.goBackground(func() { g.watchStore(bctx) })
	g.goBackground(func() { g.meter.Run(bctx) })
	g.goBackground(func() { g.nodes.Run(bctx) })
	if g.redis != nil {
		g.goBackground(func() { g.watchRedis(bctx) })
	}

	go g.serveHTTP()
	go func() {
		if err := g.grpc.Serve(g.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			g.logger.Error("gRPC server stopped", slog.String("error", err.Error()))
		}
	}()
	go func() {
		if err := g.metricsSrv.Serve(g.metricsLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.logger.Error("metrics server stopped", slog.String("error", err.Error()))
		}
	}()
	g.logger.Info("switchyard listening",
		slog.String("http", g.httpLis.Addr().String()),
		slog.String("grpc", g.grpcLis.Addr().String()),
		slog.String("metrics", g.metricsLis.Addr().String()))
	return nil
}

func (g *gateway) serveHTTP() {
	var err error
	if g.cfg.TLSCert != "" {
		g.httpSrv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		err = g.httpSrv.ServeTLS(g.httpLis, g.cfg.TLSCert, g.cfg.TLSKey)
	} else {
		err = g.httpSrv.Serve(g.httpLis)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		g.logger.Error("HTTP server stopped", slog.String("error", err.Error()))
	}
}

func (g *gateway) goBackground(fn func()) {
	g.background.Add(1)
	go func() {
		defer g.background.Done()
		fn()
	}()
}

// watchStore brings the schema up to date (retrying while the database is
// down, so that a replica started before its database does not crash-loop),
// then keeps readiness informed of the database's health.
func (g *gateway) watchStore(ctx context.Context) {
	backoff := 500 * time.Millisecond
	for g.migrate != nil {
		err := g.migrate(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		g.dependencyError("postgres", "migrate")
		g.logger.Warn("database not ready; retrying", slog.String("error", err.Error()), slog.Duration("retry_in", backoff))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
	for {
		lctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
		err := g.catalog.Load(lctx, true)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		g.logger.Warn("configuration not loaded; retrying", slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	notified := make(chan int64, 1)
	if g.subscribe != nil {
		g.goBackground(func() {
			g.subscribe(ctx, func(v int64) {
				select {
				case notified <- v:
				default: // a reload is already due
				}
			})
		})
	}
	g.goBackground(func() { g.catalog.Run(ctx, notified, time.Second) })
	g.ready.setMigrated()
	g.warnBootstrap(ctx)
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	wasDown := false
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := g.store.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		g.ready.observeDB(err == nil, time.Now())
		switch {
		case err != nil && !wasDown:
			g.logger.Warn("database unavailable: known keys are served from cache for the outage grace, unknown keys and admin changes are refused, usage is buffered",
				slog.String("error", err.Error()), slog.Duration("grace", g.cfg.DBOutageGrace))
		case err == nil && wasDown:
			g.logger.Info("database available again")
		}
		wasDown = err != nil
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// watchRedis pings Redis through its breaker every redisProbeInterval: the
// ping is the breaker's probe when no request has needed Redis since it
// opened, so that shared state and /readyz recover by themselves, and it
// notices a Redis that failed while nothing used it.
func (g *gateway) watchRedis(ctx context.Context) {
	tick := time.NewTicker(redisProbeInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		_ = g.redis.Ping(ctx) // failures are counted and logged by the breaker
	}
}

func (g *gateway) warnBootstrap(ctx context.Context) {
	if g.cfg.BootstrapAdminKey == "" {
		return
	}
	if ok, err := g.store.AnyAdminKey(ctx); err == nil && ok {
		g.logger.Warn("SWITCHYARD_BOOTSTRAP_ADMIN_KEY is set although admin keys exist; remove it")
	}
}

// shutdown stops taking work, lets in-flight requests finish within the
// shutdown timeout, flushes metering, then stops everything (SPEC §10).
//
// /readyz (and gRPC health) turn to 503/NOT_SERVING at once. With a drain
// delay the gateway then keeps serving for that long, so that requests
// routed to it while the load balancer (Kubernetes endpoints) has not yet
// seen it leave are still answered; only then do the listeners close. The
// shutdown timeout starts after the delay, so the whole takes at most
// ShutdownDrainDelay + ShutdownTimeout (plus the metering flush's share of
// the latter).
func (g *gateway) shutdown() {
	g.ready.setShuttingDown()
	g.health.Shutdown()
	if d := g.cfg.ShutdownDrainDelay; d > 0 {
		g.logger.Info("draining: /readyz answers 503; still serving until the delay ends", slog.Duration("drain_delay", d))
		time.Sleep(d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.ShutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := g.httpSrv.Shutdown(ctx); err != nil {
			g.logger.Warn("HTTP shutdown cut short", slog.String("error", err.Error()))
			g.httpSrv.Close()
		}
	}()
	go func() {
		defer wg.Done()
		done := make(chan struct{})
		go func() { g.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			g.grpc.Stop()
		}
	}()
	wg.Wait()
	g.rest.Close()
	// Every request has finished: what they metered is flushed now, within
	// what is left of the shutdown timeout, but never less than a few
	// seconds: requests cut at the timeout must not cost the usage of
	// those that finished.
	mctx, mcancel := context.WithTimeout(context.Background(), max(time.Until(deadlineOf(ctx)), minMeteringFlush))
	if err := g.meter.Close(mctx); err != nil {
		g.logger.Error("metering not fully flushed", slog.String("error", err.Error()))
	}
	mcancel()
	g.stopBackgrd()
	g.background.Wait()
	g.metricsSrv.Close()
	g.upstream.Close()
	if g.redis != nil {
		g.redis.Close()
	}
	g.store.Close()
	g.logger.Info("switchyard stopped")
}

// minMeteringFlush is the least time the metering flush gets at shutdown.
const minMeteringFlush = 5 * time.Second

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}
