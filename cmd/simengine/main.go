// Command simengine serves a simulated inference engine (see
// internal/simengine) for tests, demos and benchmarks.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/switchyard-ai/switchyard/internal/simengine"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := simengine.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "simengine:", err)
		os.Exit(2)
	}
}
