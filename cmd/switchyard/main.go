// Command switchyard is the gateway. See `switchyard help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	agentapp "github.com/switchyard-ai/switchyard/agent/app"
	"github.com/switchyard-ai/switchyard/gateway/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The dev demo runs a node agent in the same process; the gateway's
	// packages never import the agent's, so it is handed in here.
	code := app.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, app.Options{DevAgent: agentapp.MainEnv})
	stop()
	os.Exit(code)
}
