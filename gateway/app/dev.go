package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	pb "github.com/switchyard-ai/switchyard/proto/switchyard/v1"

	"github.com/switchyard-ai/switchyard/gateway/admin"
	"github.com/switchyard-ai/switchyard/gateway/auth"
	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/gateway/store/memory"
	"github.com/switchyard-ai/switchyard/internal/simengine"
	"github.com/switchyard-ai/switchyard/keyring"
)

// Dev demo names.
const (
	devTenant     = "demo"
	devNode       = "dev-node"
	devVendor     = "simcloud"
	devCloudModel = "gpt-4o-mini"
	devLocalModel = "llama3.2:3b"
	// devNodeContext is the demo node's context window: small, so that a
	// long request visibly spills to the cloud.
	devNodeContext = 1024
)

// runDev is the one-command demo: the gateway on loopback with an in-memory
// store (or Postgres when SWITCHYARD_DATABASE_URL is set), seeded with an
// admin key, a tenant with a client key, and a node key.
func runDev(ctx context.Context, args []string, stdout, stderr io.Writer, getenv Env, agentMain AgentMain) error {
	fs := newFlagSet("dev", stderr)
	raw := bindFlags(fs, getenv, devAddrs)
	fs.StringVar(&raw.httpAddr, "http", raw.httpAddr, "alias of --http-addr")
	fs.StringVar(&raw.grpcAddr, "grpc", raw.grpcAddr, "alias of --grpc-addr")
	fs.StringVar(&raw.metricsAddr, "metrics", raw.metricsAddr, "alias of --metrics-addr")
	if raw.logFormat == "json" && getenv("SWITCHYARD_LOG_FORMAT") == "" {
		raw.logFormat = "text"
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := raw.validate(false, false)
	if err != nil {
		return fmt.Errorf("bad configuration:\n%w", err)
	}
	logger := newLogger(cfg, stderr)

	var st store.Store
	var persistent bool
	// g is set before anything listens, so the listener's hook always finds it.
	var g *gateway
	var migrate func(context.Context) error
	var subscribe func(context.Context, func(int64))
	if cfg.DatabaseURL != "" {
		if cfg.Keyring == nil {
			return fmt.Errorf("bad configuration:\nSWITCHYARD_ENCRYPTION_KEYS: is required when dev uses a database, or sealed values would be unreadable next time")
		}
		pg, err := openPostgres(ctx, cfg, logger, func(error) { g.dependencyError("postgres", "listen") })
		if err != nil {
			return err
		}
		if _, err := pg.Migrate(ctx); err != nil {
			pg.Close()
			return fmt.Errorf("migrate: %w", err)
		}
		st, persistent = pg, true
		migrate = func(context.Context) error { return nil }
		subscribe = func(ctx context.Context, fn func(int64)) { _ = pg.Listen(ctx, fn) }
	} else {
		mem := memory.New()
		st = mem
		subscribe = func(ctx context.Context, fn func(int64)) {
			cancel := mem.Subscribe(fn)
			<-ctx.Done()
			cancel()
		}
	}
	kr := cfg.Keyring
	if kr == nil {
		// Nothing sealed outlives the process, so a throwaway key will do.
		k, err := keyring.Generate()
		if err != nil {
			return err
		}
		if kr, err = keyring.Parse("1:"+k, ""); err != nil {
			return err
		}
	}

	// The simulated cloud vendor: an OpenAI-compatible engine on loopback.
	cloud, err := startSimEngine(ctx, simengine.Config{Models: []string{devCloudModel}, TTFT: 120 * time.Millisecond, TPS: 500, DefaultMaxTokens: 24}, logger)
	if err != nil {
		st.Close()
		return err
	}
	defer cloud.stop()
	local, err := startSimEngine(ctx, simengine.Config{Flavor: simengine.FlavorOllama, Models: []string{devLocalModel},
		Slots: 2, TTFT: 60 * time.Millisecond, TPS: 60, DefaultMaxTokens: 24, ContextWindow: devNodeContext}, logger)
	if err != nil {
		st.Close()
		return err
	}
	defer local.stop()
	if raw.nodeNets == defaultNodeNetworks && getenv("SWITCHYARD_NODE_NETWORKS") == "" {
		// The demo's node lives on loopback; a real deployment never allows it.
		cfg.NodeNetworks = append(cfg.NodeNetworks, netip.MustParsePrefix("127.0.0.0/8"))
	}

	g = newGateway(cfg, logger, st, kr)
	g.migrate = migrate
	g.subscribe = subscribe
	if err := g.start(ctx); err != nil {
		st.Close()
		return err
	}
	seed, err := seedDev(ctx, g.admin, cloud.url)
	if err != nil {
		g.shutdown()
		return fmt.Errorf("seed the demo: %w", err)
	}
	agentDone := make(chan struct{})
	stopAgent := func() {}
	nodeUp := false
	if agentMain != nil {
		front, err := freeLoopback()
		if err != nil {
			g.shutdown()
			return err
		}
		// The agent drains before the gateway stops: it is stopped first.
		agentCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		stopAgent = func() { cancel(); <-agentDone }
		env := map[string]string{
			"SWITCHYARD_GATEWAY": hostPort(g.grpcLis.Addr().String()), "SWITCHYARD_NODE_ID": devNode, "SWITCHYARD_NODE_KEY": seed.nodeKey,
			"SWITCHYARD_ENGINE": "ollama", "SWITCHYARD_ENGINE_URL": local.url, "SWITCHYARD_SLOTS": "2",
			"SWITCHYARD_FRONT_ADDR": front, "SWITCHYARD_ADVERTISE_URL": "http://" + front,
			"SWITCHYARD_LOG_FORMAT": "text", "SWITCHYARD_LOG_LEVEL": "warn", "SWITCHYARD_SHUTDOWN_TIMEOUT": "5s",
		}
		go func() {
			defer close(agentDone)
			if code := agentMain(agentCtx, []string{"run"}, io.Discard, stderr, func(k string) string { return env[k] }); code != 0 && agentCtx.Err() == nil {
				logger.Error("the demo node's agent stopped", slog.Int("exit", code))
			}
		}()
		nodeUp = waitNode(ctx, g, devNode, 10*time.Second)
		if !nodeUp {
			stopAgent()
			g.shutdown()
			return fmt.Errorf("the demo node did not come up within 10 s")
		}
	} else {
		close(agentDone)
	}
	printDev(stdout, g, seed, persistent, nodeUp)
	<-ctx.Done()
	stopAgent()
	g.shutdown()
	return nil
}

// waitNode waits until the pool has heard from the node.
func waitNode(ctx context.Context, g *gateway, id string, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if g.nodes.Describe(ctx, store.Node{ID: id}).GetStatus() == "healthy" {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func freeLoopback() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

type devSeed struct {
	adminKey, clientKey, nodeKey string
}

func seedDev(ctx context.Context, srv *admin.Server, cloudURL string) (devSeed, error) {
	ctx = admin.WithPrincipal(ctx, admin.Principal{Kind: auth.Admin, KeyID: "dev"})
	var s devSeed
	ak, err := srv.CreateAdminKey(ctx, &pb.CreateAdminKeyRequest{Name: "dev admin"})
	if err != nil {
		return s, err
	}
	s.adminKey = ak.GetApiKey()
	if _, err := srv.UpsertTenant(ctx, &pb.UpsertTenantRequest{Tenant: &pb.Tenant{Id: devTenant, Name: "Demo tenant"}}); err != nil {
		return s, err
	}
	ck, err := srv.CreateClientKey(ctx, &pb.CreateClientKeyRequest{TenantId: devTenant, Name: "dev client"})
	if err != nil {
		return s, err
	}
	s.clientKey = ck.GetApiKey()
	nk, err := srv.MintNodeKey(ctx, &pb.MintNodeKeyRequest{Name: "dev node", NodeId: devNode})
	if err != nil {
		return s, err
	}
	s.nodeKey = nk.GetApiKey()
	if _, err := srv.UpsertVendor(ctx, &pb.UpsertVendorRequest{Vendor: &pb.Vendor{Id: devVendor, BaseUrl: cloudURL + "/v1", Enabled: true}}); err != nil {
		return s, err
	}
	if _, err := srv.SetVendorKey(ctx, &pb.SetVendorKeyRequest{VendorId: devVendor, ApiKey: "sk-simcloud-demo"}); err != nil {
		return s, err
	}
	if _, err := srv.UpsertModel(ctx, &pb.UpsertModelRequest{Model: &pb.Model{
		Id: devCloudModel, Vendor: devVendor, Efforts: []pb.Effort{pb.Effort_EFFORT_LOW, pb.Effort_EFFORT_MEDIUM, pb.Effort_EFFORT_HIGH},
		Capabilities: []string{"tools"}, ContextWindow: 128000, InputPricePerMtok: 0.15, OutputPricePerMtok: 0.6, Enabled: true,
	}}); err != nil {
		return s, err
	}
	if _, err := srv.UpsertModel(ctx, &pb.UpsertModelRequest{Model: &pb.Model{
		Id: devLocalModel, Vendor: "local", Efforts: []pb.Effort{pb.Effort_EFFORT_LOW, pb.Effort_EFFORT_MEDIUM},
		QueueTimeoutMs: 2000, Fallbacks: []string{devCloudModel}, Enabled: true,
	}}); err != nil {
		return s, err
	}
	return s, nil
}

// simEngine is a simulated engine served in-process on a loopback port.
type simEngine struct {
	url  string
	stop func()
}

func startSimEngine(ctx context.Context, cfg simengine.Config, logger *slog.Logger) (*simEngine, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: simengine.New(cfg, logger).Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	return &simEngine{url: "http://" + lis.Addr().String(), stop: func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}}, nil
}

func printDev(w io.Writer, g *gateway, s devSeed, persistent, nodeUp bool) {
	httpAddr := hostPort(g.httpLis.Addr().String())
	grpcAddr := hostPort(g.grpcLis.Addr().String())
	metricsAddr := hostPort(g.metricsLis.Addr().String())
	var b strings.Builder
	if persistent {
		fmt.Fprintf(&b, "Switchyard dev: using the database at %s.\n", redactURL(g.cfg.DatabaseURL))
	} else {
		b.WriteString("Switchyard dev: everything is held in memory and is lost when this process exits.\n")
	}
	fmt.Fprintf(&b, "admin key: %s\n", s.adminKey)
	fmt.Fprintf(&b, "client key: %s\n", s.clientKey)
	fmt.Fprintf(&b, "node key: %s\n", s.nodeKey)
	fmt.Fprintf(&b, "\nHTTP     http://%s\ngRPC     %s\nmetrics  http://%s/metrics\n", httpAddr, grpcAddr, metricsAddr)
	if nodeUp {
		fmt.Fprintf(&b, "node     %s (simulated Ollama serving %s, context window %d)\n", devNode, devLocalModel, devNodeContext)
	} else {
		b.WriteString("node     none: this build runs no demo node\n")
	}
	b.WriteString("\nTry:\n")
	chat := func(model, extra string) string {
		return fmt.Sprintf(`http://%s/v1/chat/completions -H 'authorization: Bearer %s' -H 'content-type: application/json' -d '{"model":"%s",%s"messages":[{"role":"user","content":"Hello!"}]}'`,
			httpAddr, s.clientKey, model, extra)
	}
	if nodeUp {
		b.WriteString("  # served by the local node (see X-Switchyard-Target):\n")
		fmt.Fprintf(&b, "  curl -si %s\n", chat(devLocalModel, ""))
		b.WriteString("  # too long for the node's context window: spills to the simulated cloud (headers only):\n")
		fmt.Fprintf(&b, "  curl -s -o /dev/null -D - %s\n", chat(devLocalModel, `"max_tokens":1100,`))
	}
	b.WriteString("  # the simulated cloud vendor directly:\n")
	fmt.Fprintf(&b, "  curl -s %s\n", chat(devCloudModel, ""))
	b.WriteString("  # the admin API over gRPC and REST:\n")
	fmt.Fprintf(&b, "  grpcurl -plaintext -H 'authorization: Bearer %s' %s switchyard.v1.AdminService/ListNodes\n", s.adminKey, grpcAddr)
	fmt.Fprintf(&b, "  curl -s -H 'authorization: Bearer %s' http://%s/admin/v1/tenants\n", s.adminKey, httpAddr)
	b.WriteString("\nPress Ctrl-C to stop.\n")
	_, _ = io.WriteString(w, b.String())
	g.logger.Info("dev gateway ready", slog.String("http", httpAddr))
}

// hostPort turns a wildcard listen address into one a client can dial.
func hostPort(addr string) string {
	switch {
	case strings.HasPrefix(addr, "[::]:"):
		return "127.0.0.1:" + strings.TrimPrefix(addr, "[::]:")
	case strings.HasPrefix(addr, "0.0.0.0:"):
		return "127.0.0.1:" + strings.TrimPrefix(addr, "0.0.0.0:")
	}
	return addr
}
