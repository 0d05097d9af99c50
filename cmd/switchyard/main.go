// Command switchyard is the gateway. See `switchyard help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/switchyard-ai/switchyard/gateway/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := app.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
