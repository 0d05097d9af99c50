//go:build !linux || !cgo

package gpu

import (
	"context"
	"log/slog"
	"runtime"

	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

// New returns a collector that reports no GPUs: NVML is read only by agents
// built for Linux with cgo. It says so once in the log.
func New(logger *slog.Logger) Collector {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	note := "no NVIDIA GPU readings: this agent was built without cgo, which NVML needs"
	if runtime.GOOS != "linux" {
		note = "no NVIDIA GPU: NVML is not available on " + runtime.GOOS
	}
	logger.Info("no GPU figures in the heartbeat", "reason", note)
	return stub{note: note}
}

type stub struct {
	note string
}

var _ Collector = stub{}

func (s stub) Collect(ctx context.Context) ([]*switchyardv1.GpuStats, error) {
	return nil, ctx.Err()
}

func (s stub) Note() string { return s.note }

func (s stub) Close() error { return nil }
