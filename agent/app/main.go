// Package app is the node agent's only wiring: configuration, the engine
// front, the heartbeat, the optional tunnel, the drain on shutdown and the
// doctor. cmd/switchyard-agent hands it the arguments.
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
	"strings"

	"github.com/switchyard-ai/switchyard/internal/buildinfo"
)

// version is stamped at build time: -ldflags "-X github.com/switchyard-ai/switchyard/agent/app.version=v1.2.3".
var version = "dev"

// Version returns the agent's version string, as heartbeats carry it.
func Version() string { return buildinfo.Describe(version) }

const usage = `switchyard-agent — the Switchyard node agent, beside a local inference engine

Usage:
  switchyard-agent run       serve the engine front and heartbeat to the gateway
  switchyard-agent doctor    check the engine, its models, the GPUs and the gateway, in plain words
  switchyard-agent version   print the version

Both run and doctor need --gateway, --node-id and the node key (SWITCHYARD_NODE_KEY
or --key-file). Run "switchyard-agent run -h" for every flag.
`

// Main runs the command in args and returns the process exit code: 0 done,
// 1 failed, 2 bad usage or configuration.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return MainEnv(ctx, args, stdout, stderr, os.Getenv)
}

// MainEnv is Main with an explicit environment; tests pass their own.
func MainEnv(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run", "doctor":
		cfg, err := parseConfig(args[0], args[1:], stderr, getenv)
		switch {
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			return 2
		case err != nil:
			fmt.Fprintf(stderr, "switchyard-agent %s: bad configuration:\n%v\n", args[0], indent(err))
			return 2
		}
		if args[0] == "doctor" {
			return doctor(ctx, cfg, stdout, getenv)
		}
		return run(ctx, cfg, stderr, getenv)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "switchyard-agent %s %s %s/%s\n", Version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "switchyard-agent: unknown command %q\n\n%s", args[0], usage)
	return 2
}

// indent puts each joined problem on its own indented line.
func indent(err error) string {
	return "  " + strings.ReplaceAll(err.Error(), "\n", "\n  ")
}

func newLogger(cfg config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
