package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard-ai/switchyard/agent/engine"
	"github.com/switchyard-ai/switchyard/agent/front"
	"github.com/switchyard-ai/switchyard/agent/gpu"
	"github.com/switchyard-ai/switchyard/agent/heartbeat"
	"github.com/switchyard-ai/switchyard/agent/tunnel"
	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

// Shutdown steps other than the wait for in-flight requests are bounded on
// their own: a gateway that is down must not hold the exit for long.
const (
	drainBeatTimeout  = 5 * time.Second
	serverStopTimeout = 5 * time.Second
)

// run serves the front and heartbeats until ctx ends (then drains and
// returns 0) or something makes going on pointless: the gateway refuses the
// key, the front's listener fails, the tunnel dies (1).
func run(ctx context.Context, cfg config, stderr io.Writer, getenv func(string) string) int {
	logger := newLogger(cfg, stderr)
	fail := func(format string, a ...any) int {
		msg := fmt.Sprintf(format, a...)
		logger.Error(msg)
		fmt.Fprintf(stderr, "switchyard-agent run: %s\n", msg)
		return 1
	}
	if cfg.advertiseErr != nil {
		fmt.Fprintf(stderr, "switchyard-agent run: bad configuration:\n  --advertise-url (SWITCHYARD_ADVERTISE_URL): %v\n", cfg.advertiseErr)
		return 2
	}
	if cfg.keyOnCommandLine {
		logger.Warn("the node key was given with --key, where other users of this host can read it in the process list: prefer SWITCHYARD_NODE_KEY or --key-file")
	}

	adapter, err := engine.New(cfg.Engine, cfg.EngineURL, engineClient(cfg.EngineAPIKey),
		engine.Options{Models: cfg.Models, Slots: cfg.Slots, Getenv: getenv})
	if err != nil {
		return fail("engine: %v", err)
	}
	fr, err := front.New(front.Options{EngineURL: cfg.EngineURL, NodeKey: cfg.Key, EngineAPIKey: cfg.EngineAPIKey, Logger: logger})
	if err != nil {
		return fail("%v", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fail("the engine front cannot listen on %s: %v", cfg.Listen, err)
	}
	srv := front.NewServer(fr, logger)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	port := ln.Addr().(*net.TCPAddr).Port
	stopServer := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), serverStopTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
		}
	}

	var tun *tunnel.Tunnel
	var tunnelDone <-chan struct{}
	advertise := ""
	if cfg.Expose == "cloudflared" {
		tun, err = tunnel.Start(ctx, tunnel.Options{LocalURL: localFrontURL(cfg.Listen, port), Logger: logger})
		if err != nil {
			stopServer()
			if ctx.Err() != nil {
				return 0
			}
			return fail("--expose=cloudflared: %v", err)
		}
		defer func() { _ = tun.Stop() }()
		advertise, tunnelDone = tun.URL(), tun.Done()
	} else if advertise, err = cfg.advertised(port); err != nil {
		stopServer()
		return fail("%v", err)
	}

	gpus := gpu.New(logger)
	defer func() { _ = gpus.Close() }()
	conn, err := heartbeat.Dial(cfg.Gateway, cfg.TLS, "switchyard-agent/"+version)
	if err != nil {
		stopServer()
		return fail("gateway %s: %v", cfg.Gateway, err)
	}
	defer func() { _ = conn.Close() }()
	hb := heartbeat.New(heartbeat.Options{
		Client:       switchyardv1.NewNodeServiceClient(conn),
		Reconnect:    conn.ResetConnectBackoff,
		Key:          cfg.Key,
		NodeID:       cfg.NodeID,
		AgentVersion: Version(),
		URL:          advertise,
		Engine:       adapter,
		GPUs:         gpus,
		InFlight:     fr.InFlight,
		Logger:       logger,
	})
	// The loop outlives ctx: the drain still heartbeats after SIGTERM.
	loopCtx, stopLoop := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLoop()
	hbDone := make(chan error, 1)
	go func() { hbDone <- hb.Run(loopCtx) }()
	logger.Info("switchyard-agent running", "version", Version(), "node_id", cfg.NodeID,
		"gateway", cfg.Gateway, "engine", cfg.Engine, "engine_url", cfg.EngineURL,
		"front", ln.Addr().String(), "advertised_url", advertise)

	select {
	case <-ctx.Done():
		drain(cfg, logger, fr, srv, hb, stopLoop, hbDone)
		stopServer()
		logger.Info("switchyard-agent stopped")
		return 0
	case err := <-hbDone:
		// Only a refused key ends the loop early: misconfiguration that no
		// retry mends. The heartbeat has logged the gateway's words; say
		// them plainly once more, last, with what to change.
		fr.Drain()
		stopServer()
		fmt.Fprintf(stderr, "switchyard-agent run: %v: %s\n", err, refusedHint(cfg, err))
		return 1
	case err := <-serveErr:
		stopLoop()
		return fail("the engine front stopped serving: %v", err)
	case <-tunnelDone:
		fr.Drain()
		hb.SetDraining(true)
		beat(hb)
		stopLoop()
		stopServer()
		return fail("cloudflared exited (%v): the tunnel address %s no longer reaches this node", tun.Err(), advertise)
	}
}

// drain is SPEC §4.7: tell the gateway, refuse new requests, let those in
// flight finish within the shutdown timeout (cutting off what is left when it
// runs out), tell the gateway again.
func drain(cfg config, logger *slog.Logger, fr *front.Front, srv *http.Server, hb *heartbeat.Sender, stopLoop func(), hbDone <-chan error) {
	start := time.Now()
	logger.Info("draining: new requests get 503; waiting for those in flight", "in_flight", fr.InFlight(), "timeout", cfg.ShutdownTimeout)
	fr.Drain()
	hb.SetDraining(true)
	beat(hb)

	wctx, cancel := context.WithDeadline(context.Background(), start.Add(cfg.ShutdownTimeout))
	left, err := fr.Wait(wctx)
	cancel()
	if err != nil {
		logger.Warn("the shutdown timeout ran out with requests still in flight; they are cut off", "in_flight", left, "timeout", cfg.ShutdownTimeout)
		// Closing the connections cancels the forwarded requests; their
		// handlers then return at once, so the last heartbeat can say so.
		_ = srv.Close()
		cctx, cancel := context.WithTimeout(context.Background(), serverStopTimeout)
		_, _ = fr.Wait(cctx)
		cancel()
	} else {
		logger.Info("every in-flight request finished", "took", time.Since(start).Round(time.Millisecond))
	}
	stopLoop()
	<-hbDone
	// The last word: draining, nothing in flight.
	beat(hb)
}

// beat sends one heartbeat now, bounded, ignoring failure: the callers are
// on their way out and the gateway's timeouts cover a missed one.
func beat(hb *heartbeat.Sender) {
	ctx, cancel := context.WithTimeout(context.Background(), drainBeatTimeout)
	defer cancel()
	_, _ = hb.Beat(ctx)
}

// refusedHint says what to change when the gateway refuses the key.
func refusedHint(cfg config, err error) string {
	if errors.Is(err, heartbeat.ErrRefused) && permissionDenied(err) {
		return fmt.Sprintf("run with the key minted for node %q, or with the --node-id that this key belongs to", cfg.NodeID)
	}
	return "mint a new key for this node with MintNodeKey"
}

func permissionDenied(err error) bool { return status.Code(err) == codes.PermissionDenied }

// localFrontURL is where cloudflared reaches the front on this host.
func localFrontURL(listen string, port int) string {
	host, _, _ := net.SplitHostPort(listen)
	if ip, err := netip.ParseAddr(host); host == "" || (err == nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// engineClient is nil (the adapter's own) unless the engine wants an API
// key, which the adapter's probes then carry too.
func engineClient(apiKey string) *http.Client {
	if apiKey == "" {
		return nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	return &http.Client{Timeout: 5 * time.Second, Transport: bearerTransport{key: apiKey, next: tr}}
}

type bearerTransport struct {
	key  string
	next http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}
