// Command switchyard-agent is the node agent: it runs beside a local
// inference engine, serves the engine front and heartbeats to the gateway.
// See `switchyard-agent help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	agentapp "github.com/switchyard-ai/switchyard/agent/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := agentapp.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
