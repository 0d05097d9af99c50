// Package app is the gateway's only wiring: configuration, stores, servers,
// the dev demo, and shutdown. cmd/switchyard hands it the arguments.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/gateway/store/postgres"
	"github.com/switchyard-ai/switchyard/internal/buildinfo"
	"github.com/switchyard-ai/switchyard/keyring"
)

// version is stamped at build time: -ldflags "-X github.com/switchyard-ai/switchyard/gateway/app.version=v1.2.3".
var version = "dev"

// Version returns the gateway's version string.
func Version() string { return buildinfo.Describe(version) }

const usage = `switchyard — an OpenAI-compatible gateway for local GPUs and cloud vendors

Usage:
  switchyard serve     run the gateway (needs SWITCHYARD_DATABASE_URL and SWITCHYARD_ENCRYPTION_KEYS)
  switchyard dev       run the all-in-one demo (in memory unless SWITCHYARD_DATABASE_URL is set)
  switchyard migrate   apply database migrations and exit
  switchyard keygen    print a new encryption key for SWITCHYARD_ENCRYPTION_KEYS
  switchyard version   print the version

Run "switchyard <command> -h" for a command's flags.
`

// Env reads the environment; tests pass their own.
type Env func(string) string

// AgentMain runs a node agent (switchyard-agent's Main with an explicit
// environment). The gateway never imports the agent; the binary's main
// hands it in, so that `switchyard dev` can run one in-process.
type AgentMain func(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int

// Options are what the binary's main hands the app beyond its arguments.
type Options struct {
	// DevAgent runs the demo's node agent; without it `dev` has no node.
	DevAgent AgentMain
}

// Main runs the command in args and returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, o Options) int {
	return mainEnv(ctx, args, stdout, stderr, os.Getenv, o)
}

// MainEnv is Main with an explicit environment and no dev agent.
func MainEnv(ctx context.Context, args []string, stdout, stderr io.Writer, getenv Env) int {
	return mainEnv(ctx, args, stdout, stderr, getenv, Options{})
}

func mainEnv(ctx context.Context, args []string, stdout, stderr io.Writer, getenv Env, o Options) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = runServe(ctx, args[1:], stdout, stderr, getenv)
	case "dev":
		err = runDev(ctx, args[1:], stdout, stderr, getenv, o.DevAgent)
	case "migrate":
		err = runMigrate(ctx, args[1:], stdout, stderr, getenv)
	case "keygen":
		err = runKeygen(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "switchyard %s %s %s/%s\n", Version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "switchyard: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintf(stderr, "switchyard %s: %v\n", args[0], err)
	return 1
}

// errUsage is a flag problem the flag package has already reported.
var errUsage = errors.New("usage")

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("switchyard "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		return errUsage
	}
	return nil
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func runServe(ctx context.Context, args []string, _, stderr io.Writer, getenv Env) error {
	fs := newFlagSet("serve", stderr)
	raw := bindFlags(fs, getenv, serveAddrs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := raw.validate(true, true)
	if err != nil {
		return fmt.Errorf("bad configuration:\n%w", err)
	}
	logger := newLogger(cfg, stderr)
	// g is set before anything listens, so the hook always finds it.
	var g *gateway
	pg, err := openPostgres(ctx, cfg, logger, func(error) { g.dependencyError("postgres", "listen") })
	if err != nil {
		return err
	}
	g = newGateway(cfg, logger, pg, cfg.Keyring)
	g.subscribe = func(ctx context.Context, fn func(int64)) { _ = pg.Listen(ctx, fn) }
	g.migrate = func(ctx context.Context) error {
		applied, err := pg.Migrate(ctx)
		if err == nil && len(applied) > 0 {
			logger.Info("database migrated", slog.Any("applied", applied))
		}
		return err
	}
	if err := g.start(ctx); err != nil {
		pg.Close()
		return err
	}
	<-ctx.Done()
	g.logger.Info("shutting down", slog.Duration("timeout", cfg.ShutdownTimeout), slog.Duration("drain_delay", cfg.ShutdownDrainDelay))
	g.shutdown()
	return nil
}

// openPostgres makes the pool; onListenError (may be nil) is told when the
// config listener loses its connection.
func openPostgres(ctx context.Context, cfg Config, logger *slog.Logger, onListenError func(error)) (*postgres.Postgres, error) {
	pg, err := postgres.New(ctx, cfg.DatabaseURL, postgres.Options{MaxConns: cfg.DatabaseMaxConns, Logger: logger, OnListenError: onListenError})
	if err != nil {
		return nil, fmt.Errorf("database %s: %w", redactURL(cfg.DatabaseURL), err)
	}
	return pg, nil
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer, getenv Env) error {
	fs := newFlagSet("migrate", stderr)
	raw := bindFlags(fs, getenv, serveAddrs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := raw.validate(true, false)
	if err != nil {
		return fmt.Errorf("bad configuration:\n%w", err)
	}
	pg, err := openPostgres(ctx, cfg, newLogger(cfg, stderr), nil)
	if err != nil {
		return err
	}
	defer pg.Close()
	applied, err := pg.Migrate(ctx)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintln(stdout, "database schema is up to date")
		return nil
	}
	for _, v := range applied {
		fmt.Fprintf(stdout, "applied %s\n", v)
	}
	return nil
}

func runKeygen(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("keygen", stderr)
	ver := fs.String("version", "", "print the key as \"N:<key>\", ready to append to SWITCHYARD_ENCRYPTION_KEYS")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	key, err := keyring.Generate()
	if err != nil {
		return err
	}
	if *ver == "" {
		fmt.Fprintln(stdout, key)
		return nil
	}
	if n, err := strconv.ParseUint(*ver, 10, 32); err != nil || n == 0 {
		fmt.Fprintln(stderr, "--version must be a whole number ≥ 1")
		return errUsage
	}
	fmt.Fprintf(stdout, "%s:%s\n", *ver, key)
	return nil
}

var _ store.Store = (*postgres.Postgres)(nil)
