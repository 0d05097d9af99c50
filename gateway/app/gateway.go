package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

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
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &gateway{cfg: cfg, logger: logger, store: st, keyring: kr, reg: reg, ready: newReadiness(cfg.DBOutageGrace), metrics: metrics.New(reg)}
}

// wire builds the request path: Redis (when configured), the configuration
// catalog, key resolution, limits, the upstream client, metering and the
// OpenAI API handler.
func (g *gateway) wire(ctx context.Context) error {
	m := g.metrics
	depErr := func(dep, op string) { m.DependencyErrors.WithLabelValues(dep, op).Inc() }
	if g.cfg.RedisURL != "" {
		r, err := redisstate.Open(ctx, g.cfg.RedisURL, redisstate.Options{
			Prefix: g.cfg.RedisPrefix, Logger: g.logger,
			OnError: func(op string, _ error) { depErr("redis", op) },
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
	g.catalog = catalog.New(g.store, g.keyring, catalog.Options{
		Logger:          g.logger,
		OnDecryptError:  func(table string) { m.KeyringDecryptErrors.WithLabelValues(table).Inc() },
		OnError:         func(error) { depErr("postgres", "load_config") },
		OnVendorChanged: g.upstream.ResetVendor,
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
		OnResult: func(result string) {
			m.AuthCacheResults.WithLabelValues(result).Inc()
			if result == "unavailable" || result == "stale" {
				depErr("postgres", "get_key")
			}
		},
	})
	g.meter = metering.New(g.store, metering.Options{Logger: g.logger, Metrics: m})
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
		if lerr := g.catalog.Load(context.WithoutCancel(ctx), false); lerr != nil {
			g.logger.Debug("configuration reload after a write failed", slog.String("error", lerr.Error()))
		}
	}
	return resp, err
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
	g.grpc, _ = admin.NewGRPCServer(g.admin, authn, grpc.ChainUnaryInterceptor(g.reloadAfterWrite))
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
		Handler:           mux,
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
		g.logger.Warn("database not ready; retrying", slog.String("error", err.Error()), slog.Duration("retry_in", backoff))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 15*time.Second)
	}
	for {
		err := g.catalog.Load(ctx, true)
		if err == nil {
			break
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
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := g.store.Ping(pctx)
		cancel()
		g.ready.observeDB(err == nil, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
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
// shutdown timeout, then stops everything.
func (g *gateway) shutdown() {
	g.ready.setShuttingDown()
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
	// what is left of the shutdown timeout.
	if err := g.meter.Close(ctx); err != nil {
		g.logger.Error("metering not fully flushed", slog.String("error", err.Error()))
	}
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
