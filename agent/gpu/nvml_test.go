//go:build linux && cgo

package gpu

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"google.golang.org/protobuf/proto"

	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

// gpuFigures is what a fake GPU reports.
type gpuFigures struct {
	name, uuid string
	util       uint32
	used, tot  uint64
	tempC      uint32
	milliwatts uint32
	powerErr   nvml.Return
}

func fakeDevice(f gpuFigures) *mock.Device {
	return &mock.Device{
		GetNameFunc: func() (string, nvml.Return) { return f.name, nvml.SUCCESS },
		GetUUIDFunc: func() (string, nvml.Return) { return f.uuid, nvml.SUCCESS },
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: f.util, Memory: f.util / 2}, nvml.SUCCESS
		},
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: f.tot, Used: f.used, Free: f.tot - f.used}, nvml.SUCCESS
		},
		GetTemperatureFunc: func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
			if s != nvml.TEMPERATURE_GPU {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return f.tempC, nvml.SUCCESS
		},
		GetPowerUsageFunc: func() (uint32, nvml.Return) {
			if f.powerErr != nvml.SUCCESS {
				return 0, f.powerErr
			}
			return f.milliwatts, nvml.SUCCESS
		},
	}
}

// fakeLibrary is an NVML with the given GPUs; init is Init's answer.
func fakeLibrary(init nvml.Return, gpus ...gpuFigures) *mock.Interface {
	devs := make([]nvml.Device, len(gpus))
	for i, g := range gpus {
		devs[i] = fakeDevice(g)
	}
	return &mock.Interface{
		InitFunc:           func() nvml.Return { return init },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
	}
}

// logRecorder captures a logger's JSON lines.
type logRecorder struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (r *logRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.Write(p)
}

func (r *logRecorder) records(t *testing.T) []map[string]any {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(r.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

func newLogger(level slog.Level) (*slog.Logger, *logRecorder) {
	rec := &logRecorder{}
	return slog.New(slog.NewJSONHandler(rec, &slog.HandlerOptions{Level: level})), rec
}

var h100 = gpuFigures{
	name: "NVIDIA H100 80GB HBM3", uuid: "GPU-5f1c3f5e-8a2b-4d0e-9c6a-2b7e1d4f8a90",
	util: 87, used: 71_303_168_000, tot: 85_520_809_984, tempC: 64, milliwatts: 512_345,
}

var l4 = gpuFigures{
	name: "NVIDIA L4", uuid: "GPU-0a9e8c7d-6b5a-4f3e-8d2c-1b0a9f8e7d6c",
	util: 3, used: 1_048_576, tot: 24_146_608_128, tempC: 38, milliwatts: 16_250,
}

func TestCollectTwoGPUs(t *testing.T) {
	c := NewWithInterface(fakeLibrary(nvml.SUCCESS, h100, l4), nil)
	t.Cleanup(func() { _ = c.Close() })
	got, err := c.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []*switchyardv1.GpuStats{
		{Index: 0, Name: "NVIDIA H100 80GB HBM3", Uuid: "GPU-5f1c3f5e-8a2b-4d0e-9c6a-2b7e1d4f8a90",
			UtilizationPct: 87, MemoryUsedBytes: 71_303_168_000, MemoryTotalBytes: 85_520_809_984,
			TemperatureC: 64, PowerWatts: 512.345},
		{Index: 1, Name: "NVIDIA L4", Uuid: "GPU-0a9e8c7d-6b5a-4f3e-8d2c-1b0a9f8e7d6c",
			UtilizationPct: 3, MemoryUsedBytes: 1_048_576, MemoryTotalBytes: 24_146_608_128,
			TemperatureC: 38, PowerWatts: 16.25},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d GPUs, want %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("GPU %d = %v, want %v", i, got[i], want[i])
		}
	}
	if n := c.Note(); n != "" {
		t.Errorf("Note() = %q with readable GPUs", n)
	}
}

func TestLibraryNotFound(t *testing.T) {
	lib := fakeLibrary(nvml.ERROR_LIBRARY_NOT_FOUND)
	logger, rec := newLogger(slog.LevelDebug)
	c := NewWithInterface(lib, logger)
	for range 5 {
		got, err := c.Collect(context.Background())
		if err != nil || len(got) != 0 {
			t.Fatalf("Collect = %v, %v; want no GPUs and no error", got, err)
		}
	}
	if n := c.Note(); n != "no NVIDIA GPU: NVML library not found" {
		t.Errorf("Note() = %q", n)
	}
	recs := rec.records(t)
	if len(recs) != 1 {
		t.Fatalf("logged %d lines, want exactly one: %v", len(recs), recs)
	}
	if recs[0]["level"] != "INFO" || recs[0]["reason"] != "no NVIDIA GPU: NVML library not found" {
		t.Errorf("log line = %v, want the reason at info", recs[0])
	}
	// An absent library is not looked for again on every heartbeat.
	if n := len(lib.InitCalls()); n != 1 {
		t.Errorf("Init called %d times, want 1", n)
	}
	if len(lib.DeviceGetCountCalls()) != 0 {
		t.Error("devices counted without NVML")
	}
	if err := c.Close(); err != nil || len(lib.ShutdownCalls()) != 0 {
		t.Errorf("Close = %v with %d Shutdown calls; want nil and none", err, len(lib.ShutdownCalls()))
	}
}

func TestOneFigureFailingKeepsTheOthers(t *testing.T) {
	noPower := l4
	noPower.powerErr = nvml.ERROR_NOT_SUPPORTED
	logger, rec := newLogger(slog.LevelDebug)
	c := NewWithInterface(fakeLibrary(nvml.SUCCESS, h100, noPower), logger)
	got, err := c.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d GPUs, want 2", len(got))
	}
	want := &switchyardv1.GpuStats{Index: 1, Name: "NVIDIA L4", Uuid: "GPU-0a9e8c7d-6b5a-4f3e-8d2c-1b0a9f8e7d6c",
		UtilizationPct: 3, MemoryUsedBytes: 1_048_576, MemoryTotalBytes: 24_146_608_128, TemperatureC: 38}
	if !proto.Equal(got[1], want) {
		t.Errorf("GPU 1 = %v, want %v (power left zero, the rest kept)", got[1], want)
	}
	if got[0].GetPowerWatts() != 512.345 {
		t.Errorf("GPU 0 lost its power figure: %v", got[0])
	}
	var debug int
	for _, r := range rec.records(t) {
		if r["level"] == "DEBUG" && r["figure"] == "power" {
			debug++
		}
	}
	if debug != 1 {
		t.Errorf("want one debug line for the missing power figure, got %d", debug)
	}
}

func TestNoDevices(t *testing.T) {
	c := NewWithInterface(fakeLibrary(nvml.SUCCESS), nil)
	got, err := c.Collect(context.Background())
	if err != nil || len(got) != 0 {
		t.Fatalf("Collect = %v, %v", got, err)
	}
	if n := c.Note(); n != "no NVIDIA GPU: NVML found none" {
		t.Errorf("Note() = %q", n)
	}
}

// A driver that is not loaded yet (the agent started first at boot) is tried
// again, and the collector recovers when it is.
func TestInitRetriedUntilTheDriverLoads(t *testing.T) {
	lib := fakeLibrary(nvml.SUCCESS, l4)
	var calls int
	lib.InitFunc = func() nvml.Return {
		calls++
		if calls < 3 {
			return nvml.ERROR_DRIVER_NOT_LOADED
		}
		return nvml.SUCCESS
	}
	logger, rec := newLogger(slog.LevelInfo)
	c := NewWithInterface(lib, logger)
	if n := c.Note(); n != "no NVIDIA GPU: the NVIDIA driver is not loaded" {
		t.Errorf("Note() = %q", n)
	}
	if got, _ := c.Collect(context.Background()); len(got) != 0 {
		t.Fatalf("GPUs read before the driver loaded: %v", got)
	}
	got, err := c.Collect(context.Background())
	if err != nil || len(got) != 1 {
		t.Fatalf("Collect after the driver loaded = %v, %v", got, err)
	}
	if n := c.Note(); n != "" {
		t.Errorf("Note() = %q after recovering", n)
	}
	// One line for the failure (not one per try) and one for the recovery.
	if recs := rec.records(t); len(recs) != 2 {
		t.Errorf("logged %d lines, want 2: %v", len(recs), recs)
	}
}

func TestCloseShutsDownOnce(t *testing.T) {
	lib := fakeLibrary(nvml.SUCCESS, h100)
	c := NewWithInterface(lib, nil)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(lib.ShutdownCalls()); n != 1 {
		t.Errorf("Shutdown called %d times, want 1", n)
	}
	if got, err := c.Collect(context.Background()); err != nil || len(got) != 0 {
		t.Errorf("Collect after Close = %v, %v", got, err)
	}
}

func TestCollectHonoursContext(t *testing.T) {
	c := NewWithInterface(fakeLibrary(nvml.SUCCESS, h100), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Collect(ctx); err == nil {
		t.Fatal("Collect ignored a cancelled context")
	}
}

func TestCollectIsSafeConcurrently(t *testing.T) {
	c := NewWithInterface(fakeLibrary(nvml.SUCCESS, h100, l4), nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if got, err := c.Collect(context.Background()); err != nil || len(got) != 2 {
				t.Errorf("Collect = %v, %v", got, err)
			}
			_ = c.Note()
		})
	}
	wg.Wait()
}
