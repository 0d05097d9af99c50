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
)

// runDev is the one-command demo: the gateway on loopback with an in-memory
// store (or Postgres when SWITCHYARD_DATABASE_URL is set), seeded with an
// admin key, a tenant with a client key, and a node key.
func runDev(ctx context.Context, args []string, stdout, stderr io.Writer, getenv Env) error {
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
	var migrate func(context.Context) error
	var subscribe func(context.Context, func(int64))
	if cfg.DatabaseURL != "" {
		if cfg.Keyring == nil {
			return fmt.Errorf("bad configuration:\nSWITCHYARD_ENCRYPTION_KEYS: is required when dev uses a database, or sealed values would be unreadable next time")
		}
		pg, err := openPostgres(ctx, cfg, logger)
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
	cloud, err := startSimEngine(ctx, simengine.Config{Models: []string{devCloudModel}, TTFT: 150 * time.Millisecond, TPS: 80, DefaultMaxTokens: 24}, logger)
	if err != nil {
		st.Close()
		return err
	}
	defer cloud.stop()
	if raw.nodeNets == defaultNodeNetworks && getenv("SWITCHYARD_NODE_NETWORKS") == "" {
		// The demo's node lives on loopback; a real deployment never allows it.
		cfg.NodeNetworks = append(cfg.NodeNetworks, netip.MustParsePrefix("127.0.0.0/8"))
	}

	g := newGateway(cfg, logger, st, kr)
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
	printDev(stdout, g, seed, persistent)
	<-ctx.Done()
	g.shutdown()
	return nil
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

func printDev(w io.Writer, g *gateway, s devSeed, persistent bool) {
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
	b.WriteString("\nTry:\n")
	fmt.Fprintf(&b, "  curl -s http://%s/v1/chat/completions -H 'authorization: Bearer %s' -H 'content-type: application/json' -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}]}'\n",
		httpAddr, s.clientKey, devCloudModel)
	fmt.Fprintf(&b, "  grpcurl -plaintext -H 'authorization: Bearer %s' %s switchyard.v1.AdminService/ListTenants\n", s.adminKey, grpcAddr)
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
