//go:build linux && cgo

package gpu

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

// New returns a collector over the host's NVML library. It never fails: a
// host without the library gets a collector that reports no GPUs and a note.
func New(logger *slog.Logger) Collector {
	return NewWithInterface(nvml.New(), logger)
}

// NewWithInterface returns a collector over lib, which tests replace with
// go-nvml's mock. It initialises NVML at once, so Note is meaningful before
// the first Collect.
func NewWithInterface(lib nvml.Interface, logger *slog.Logger) Collector {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &nvmlCollector{lib: lib, logger: logger}
	c.mu.Lock()
	c.start()
	c.mu.Unlock()
	return c
}

type nvmlCollector struct {
	lib    nvml.Interface
	logger *slog.Logger

	mu sync.Mutex
	// ready: Init succeeded and Shutdown is owed.
	ready bool
	// absent: the library is not installed, which no retry will change
	// while the agent runs.
	absent bool
	closed bool
	note   string
}

var _ Collector = (*nvmlCollector)(nil)

// start runs Init; the caller holds mu.
func (c *nvmlCollector) start() {
	ret := c.lib.Init()
	if ret == nvml.SUCCESS {
		c.ready = true
		c.setNote("")
		return
	}
	c.absent = ret == nvml.ERROR_LIBRARY_NOT_FOUND
	c.setNote(initNote(ret))
}

// initNote says in plain words why NVML did not start.
func initNote(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "no NVIDIA GPU: NVML library not found"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "no NVIDIA GPU: the NVIDIA driver is not loaded"
	case nvml.ERROR_NO_PERMISSION:
		return "NVIDIA GPU not readable: no permission to use NVML"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "NVIDIA GPU not readable: the NVML library and the kernel driver differ in version " +
			"(reboot after a driver upgrade)"
	}
	return fmt.Sprintf("NVIDIA GPU not readable: NVML did not start (%s)", ret.Error())
}

// setNote records why GPUs are unreadable and logs only a change, so a host
// without GPUs says so once rather than on every heartbeat. The caller holds
// mu.
func (c *nvmlCollector) setNote(note string) {
	if note == c.note {
		return
	}
	c.note = note
	if note == "" {
		c.logger.Info("reading NVIDIA GPUs through NVML")
		return
	}
	c.logger.Info("no GPU figures in the heartbeat", "reason", note)
}

func (c *nvmlCollector) Note() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.note
}

func (c *nvmlCollector) Collect(ctx context.Context) ([]*switchyardv1.GpuStats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c.closed || c.absent {
		return nil, nil
	}
	if !c.ready {
		// A driver that was loading or being upgraded may be ready now.
		c.start()
		if !c.ready {
			return nil, nil
		}
	}
	n, ret := c.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		c.setNote(fmt.Sprintf("NVIDIA GPU not readable: NVML could not count the GPUs (%s)", ret.Error()))
		return nil, nil
	}
	if n == 0 {
		c.setNote("no NVIDIA GPU: NVML found none")
		return nil, nil
	}
	out := make([]*switchyardv1.GpuStats, 0, n)
	for i := range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		dev, ret := c.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			c.logger.Debug("NVML: GPU skipped", "gpu", i, "error", ret.Error())
			continue
		}
		out = append(out, c.read(i, dev))
	}
	c.setNote("")
	return out, nil
}

// read takes one GPU's figures. A figure NVML cannot give (a consumer card
// without power readings, a GPU falling off the bus) is left zero; the
// others are still worth sending.
func (c *nvmlCollector) read(i int, dev nvml.Device) *switchyardv1.GpuStats {
	s := &switchyardv1.GpuStats{Index: int32(i)}
	if v, ret := dev.GetName(); c.ok(i, "name", ret) {
		s.Name = v
	}
	if v, ret := dev.GetUUID(); c.ok(i, "uuid", ret) {
		s.Uuid = v
	}
	if v, ret := dev.GetUtilizationRates(); c.ok(i, "utilization", ret) {
		s.UtilizationPct = int32(v.Gpu)
	}
	if v, ret := dev.GetMemoryInfo(); c.ok(i, "memory", ret) {
		s.MemoryUsedBytes = v.Used
		s.MemoryTotalBytes = v.Total
	}
	if v, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU); c.ok(i, "temperature", ret) {
		s.TemperatureC = int32(v)
	}
	if v, ret := dev.GetPowerUsage(); c.ok(i, "power", ret) {
		s.PowerWatts = float64(v) / 1000 // NVML reports milliwatts
	}
	return s
}

func (c *nvmlCollector) ok(i int, figure string, ret nvml.Return) bool {
	if ret == nvml.SUCCESS {
		return true
	}
	c.logger.Debug("NVML: GPU figure unavailable", "gpu", i, "figure", figure, "error", ret.Error())
	return false
}

func (c *nvmlCollector) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if !c.ready {
		return nil
	}
	c.ready = false
	if ret := c.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML shutdown: %w", ret)
	}
	return nil
}
