package simengine

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
)

// shutdownGrace is how long Main lets requests in flight finish after it is
// told to stop; a simulated stream held by a long TTFT is then cut.
const shutdownGrace = 5 * time.Second

// Main is the simengine command: it parses args, serves the engine until ctx
// ends, then shuts the server down gracefully. Once listening it prints one
// line to stdout,
//
//	simengine listening on http://ADDR (flavor F, models A,B)
//
// with a dialable ADDR (the real port when asked for port 0), which tests that
// start the binary wait for and parse. Logs go to stderr as JSON.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("simengine", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg      Config
		listen   = fs.String("listen", ":8000", "address to listen on")
		models   = fs.String("model", "", "served model names, comma-separated (required)")
		logLevel = fs.String("log-level", "info", "log level: debug, info, warn or error")
	)
	fs.StringVar(&cfg.Flavor, "flavor", FlavorOpenAI, "engine to impersonate: "+strings.Join(Flavors(), ", "))
	fs.IntVar(&cfg.Slots, "slots", 0, "requests run at once; the rest queue in FIFO order (0: unlimited)")
	fs.Float64Var(&cfg.TPS, "tps", 0, "output tokens per second per request (0: as fast as possible)")
	fs.DurationVar(&cfg.TTFT, "ttft", 0, "time to first token")
	fs.DurationVar(&cfg.TTFTPer1kInput, "ttft-per-1k", 0, "extra time to first token per 1000 prompt tokens")
	fs.Float64Var(&cfg.FailRate, "fail-rate", 0, "fraction of requests answered 500, from a seeded generator")
	fs.DurationVar(&cfg.Latency, "latency", 0, "extra delay before a non-streaming response")
	fs.IntVar(&cfg.ContextWindow, "context", DefaultContextWindow, "context window in tokens")
	fs.IntVar(&cfg.DefaultMaxTokens, "max-tokens", DefaultMaxTokens, "output tokens when a request sets no limit")
	fs.IntVar(&cfg.EmbeddingDim, "embedding-dim", DefaultEmbeddingDim, "embedding vector length")
	fs.Int64Var(&cfg.Seed, "seed", 0, "seed for failure draws and response ids")
	fs.BoolVar(&cfg.OllamaOnCPU, "ollama-cpu", false, "ollama flavour: report models as running on the CPU (size_vram 0)")
	fs.BoolVar(&cfg.OllamaUnloaded, "ollama-unloaded", false, "ollama flavour: no model loaded until its first request")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil // the usage was asked for and printed
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	for m := range strings.SplitSeq(*models, ",") {
		if m = strings.TrimSpace(m); m != "" {
			cfg.Models = append(cfg.Models, m)
		}
	}
	var level slog.Level
	var errs []error
	if len(cfg.Models) == 0 {
		errs = append(errs, errors.New("--model: at least one model name is required"))
	}
	if !slices.Contains(Flavors(), cfg.Flavor) {
		errs = append(errs, fmt.Errorf("--flavor: %q is not one of %s", cfg.Flavor, strings.Join(Flavors(), ", ")))
	}
	if cfg.Slots < 0 {
		errs = append(errs, errors.New("--slots must not be negative"))
	}
	if cfg.TPS < 0 {
		errs = append(errs, errors.New("--tps must not be negative"))
	}
	if cfg.TTFT < 0 || cfg.TTFTPer1kInput < 0 || cfg.Latency < 0 {
		errs = append(errs, errors.New("--ttft, --ttft-per-1k and --latency must not be negative"))
	}
	if cfg.FailRate < 0 || cfg.FailRate > 1 {
		errs = append(errs, errors.New("--fail-rate must be between 0 and 1"))
	}
	if cfg.ContextWindow < 1 || cfg.DefaultMaxTokens < 1 || cfg.EmbeddingDim < 1 {
		errs = append(errs, errors.New("--context, --max-tokens and --embedding-dim must be positive"))
	}
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}

	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	engine := New(cfg, logger)
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           engine.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "simengine listening on http://%s (flavor %s, models %s)\n",
		dialable(ln.Addr()), engine.Flavor(), strings.Join(engine.Models(), ","))
	logger.Info("listening", "addr", ln.Addr().String(), "flavor", engine.Flavor(), "models", engine.Models(),
		"slots", cfg.Slots, "tps", cfg.TPS, "ttft", cfg.TTFT)

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		logger.Warn("requests still in flight at shutdown; closing them", "err", err)
		_ = srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// dialable turns a listener address into one a client on this host can dial:
// a wildcard host (":8000", "[::]:8000") becomes the loopback address.
func dialable(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return addr.String()
	}
	return net.JoinHostPort("127.0.0.1", fmt.Sprint(tcp.Port))
}
