// Package gpu reads the node's NVIDIA GPUs through NVML for the heartbeat:
// each GPU's name, utilisation, memory, temperature and power.
//
// NVML needs cgo and Linux (github.com/NVIDIA/go-nvml loads libnvidia-ml at
// run time), so the collector sits behind Collector with a build-tagged stub:
// the agent still builds for a Mac or without cgo, and there reports no GPUs
// and says why. A host without the NVIDIA library is not an error either — a
// Mac or a CPU box runs the agent too — so it is told once in the log and in
// Note, and the agent carries on.
package gpu

import (
	"context"
	"fmt"
	"strings"

	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

// Collector reads the host's GPUs.
type Collector interface {
	// Collect reads every GPU now. It returns no GPUs, and no error, when the
	// GPUs cannot be read; Note says why. The error is for a context that
	// ended.
	Collect(ctx context.Context) ([]*switchyardv1.GpuStats, error)
	// Note is "" while the GPUs are readable, else the reason in plain words,
	// for the heartbeat's gpu_note and the doctor.
	Note() string
	// Close releases NVML; later Collects return no GPUs.
	Close() error
}

// Describe renders GPU figures as one line per GPU for people to read, as
// the agent's doctor prints them.
func Describe(stats []*switchyardv1.GpuStats) string {
	if len(stats) == 0 {
		return "no GPUs read"
	}
	lines := make([]string, 0, len(stats))
	for _, g := range stats {
		name := g.GetName()
		if name == "" {
			name = "(unnamed)"
		}
		lines = append(lines, fmt.Sprintf("GPU %d %s: memory %.1f / %.1f GiB, utilisation %d%%, %d °C, %.0f W",
			g.GetIndex(), name,
			float64(g.GetMemoryUsedBytes())/(1<<30), float64(g.GetMemoryTotalBytes())/(1<<30),
			g.GetUtilizationPct(), g.GetTemperatureC(), g.GetPowerWatts()))
	}
	return strings.Join(lines, "\n")
}
