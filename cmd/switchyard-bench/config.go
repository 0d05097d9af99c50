package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Phases of a run, in the order they run.
const (
	PhaseOverhead  = "overhead"  // added latency at fixed rates: direct, nginx, Switchyard
	PhaseAblation  = "ablation"  // what tenant limits cost: Redis round trips on the request path
	PhaseStreaming = "streaming" // added time to first token and per-chunk delay
	PhaseHeap      = "heap"      // heap per open stream
	PhaseProfile   = "profile"   // CPU samples of the gateway under load (perf)
	PhaseRouting   = "routing"   // six simulated nodes: Switchyard vs nginx round-robin and least_conn
	PhaseGoBench   = "gobench"   // go test -bench: scheduler, leases, the hot path
)

func allPhases() []string {
	return []string{PhaseOverhead, PhaseAblation, PhaseStreaming, PhaseHeap, PhaseProfile, PhaseRouting, PhaseGoBench}
}

// Config is every setting of a run. Each one is a flag; the service URLs
// also read SWITCHYARD_BENCH_* variables.
type Config struct {
	BinDir      string
	Out         string // BENCHMARKS.md
	ResultsDir  string
	DatabaseURL string // an administrative connection: the bench creates and drops its own database
	RedisURL    string
	Nginx       string // nginx binary; "" skips the nginx arms
	Perf        string // perf binary; "" skips the CPU samples
	GoTool      string // go binary for the gobench phase; "" skips it
	Phases      []string
	Keep        bool   // keep the processes' logs and configuration files
	Render      string // a run's raw JSON: write the report from it, measure nothing

	Rates     []int           // requests per second, overhead phase
	Latencies []time.Duration // fixed upstream latency, overhead phase
	Reps      int
	Duration  time.Duration // one measurement
	Warmup    time.Duration // per arm and rate, discarded

	StreamRate     int
	StreamDuration time.Duration
	StreamTTFT     time.Duration
	StreamTPS      float64
	StreamTokens   int

	Streams []int // concurrent open streams for the heap phase

	AblationRate int
	RedisDelay   time.Duration

	ProfileRate     int
	ProfileDuration time.Duration

	RoutingLoad     float64 // share of the cluster's capacity
	RoutingDuration time.Duration
	RoutingWarmup   time.Duration
	RoutingTokens   int
	RoutingTimeout  time.Duration // a request still unanswered then counts as failed
	Seed            uint64

	GoBenchTime    string // -benchtime for the gobench phase
	PprofBenchTime string // -benchtime of the profiled hot path run
}

// parseConfig reads args (and getenv for the service URLs) into a Config,
// reporting every problem at once.
func parseConfig(args []string, stderr io.Writer, getenv func(string) string) (Config, error) {
	fs := flag.NewFlagSet("switchyard-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	var c Config
	var phases, rates, latencies, streams, seed string
	fs.StringVar(&c.BinDir, "bin", "bin", "folder holding the switchyard, switchyard-agent and simengine binaries")
	fs.StringVar(&c.Out, "out", "BENCHMARKS.md", "the report to write")
	fs.StringVar(&c.ResultsDir, "results", "bench/results", "folder for the raw JSON")
	fs.StringVar(&c.DatabaseURL, "database-url", env("SWITCHYARD_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		"Postgres URL with the right to create databases (SWITCHYARD_BENCH_DATABASE_URL)")
	fs.StringVar(&c.RedisURL, "redis-url", env("SWITCHYARD_BENCH_REDIS_URL", "redis://127.0.0.1:6379"), "Redis URL (SWITCHYARD_BENCH_REDIS_URL)")
	fs.StringVar(&c.Nginx, "nginx", "nginx", "nginx binary; empty skips the nginx arms")
	fs.StringVar(&c.Perf, "perf", "perf", "perf binary for CPU samples of the gateway; empty skips them")
	fs.StringVar(&c.GoTool, "go", "go", "go binary for the go test -bench phase; empty skips it")
	fs.StringVar(&c.Render, "render", "", "write --out from this raw JSON of an earlier run, and measure nothing")
	fs.BoolVar(&c.Keep, "keep", false, "keep the folder with the processes' logs and configuration files")
	fs.StringVar(&phases, "phases", strings.Join(allPhases(), ","), "phases to run, comma-separated: "+strings.Join(allPhases(), ", "))
	fs.StringVar(&rates, "rates", "500,1000,2000,4000", "request rates (per second) of the overhead phase")
	fs.StringVar(&latencies, "latencies", "60ms,0s", "fixed upstream latencies of the overhead phase")
	fs.IntVar(&c.Reps, "reps", 3, "repetitions of each measurement; the median is reported")
	fs.DurationVar(&c.Duration, "duration", 5*time.Second, "length of one overhead measurement")
	fs.DurationVar(&c.Warmup, "warmup", time.Second, "warm-up before each rate, per arm, not measured")
	fs.IntVar(&c.StreamRate, "stream-rate", 100, "streams started per second in the streaming phase")
	fs.DurationVar(&c.StreamDuration, "stream-duration", 5*time.Second, "length of one streaming measurement")
	fs.DurationVar(&c.StreamTTFT, "stream-ttft", 50*time.Millisecond, "the simulated engine's time to first token in the streaming phase")
	fs.Float64Var(&c.StreamTPS, "stream-tps", 100, "the simulated engine's tokens per second in the streaming phase")
	fs.IntVar(&c.StreamTokens, "stream-tokens", 32, "tokens per stream in the streaming phase")
	fs.StringVar(&streams, "streams", "1000,10000", "concurrent open streams of the heap phase")
	fs.IntVar(&c.AblationRate, "ablation-rate", 500, "request rate of the ablation phase")
	fs.DurationVar(&c.RedisDelay, "redis-delay", 5*time.Millisecond, "delay added to every Redis command in the ablation phase")
	fs.IntVar(&c.ProfileRate, "profile-rate", 2000, "request rate while the gateway's CPU is sampled")
	fs.DurationVar(&c.ProfileDuration, "profile-duration", 8*time.Second, "how long the gateway's CPU is sampled")
	fs.Float64Var(&c.RoutingLoad, "routing-load", 0.6, "arrival rate of the routing phase as a share of the cluster's capacity")
	fs.DurationVar(&c.RoutingDuration, "routing-duration", 40*time.Second, "arrivals measured per routing run")
	fs.DurationVar(&c.RoutingWarmup, "routing-warmup", 10*time.Second, "arrivals before each routing run, not measured (the gateway learns node speeds)")
	fs.IntVar(&c.RoutingTokens, "routing-tokens", 64, "output tokens per request in the routing phase")
	fs.DurationVar(&c.RoutingTimeout, "routing-timeout", 30*time.Second, "a routing request unanswered after this counts as failed")
	fs.StringVar(&seed, "seed", "1", "seed of the arrival processes")
	fs.StringVar(&c.GoBenchTime, "benchtime", "1s", "-benchtime of the go test -bench phase")
	fs.StringVar(&c.PprofBenchTime, "pprof-benchtime", "3s", "-benchtime of the CPU-profiled BenchmarkHotPath run")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if fs.NArg() > 0 {
		bad("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	for p := range strings.SplitSeq(phases, ",") {
		p = strings.TrimSpace(p)
		switch {
		case p == "":
		case !slices.Contains(allPhases(), p):
			bad("--phases: %q is not one of %s", p, strings.Join(allPhases(), ", "))
		case !slices.Contains(c.Phases, p):
			c.Phases = append(c.Phases, p)
		}
	}
	if len(c.Phases) == 0 {
		bad("--phases: name at least one phase")
	}
	var err error
	if c.Rates, err = positiveInts(rates); err != nil {
		bad("--rates: %v", err)
	}
	if c.Streams, err = positiveInts(streams); err != nil {
		bad("--streams: %v", err)
	}
	if c.Latencies, err = durations(latencies); err != nil {
		bad("--latencies: %v", err)
	}
	if c.Seed, err = strconv.ParseUint(seed, 10, 64); err != nil {
		bad("--seed: %q is not a whole number", seed)
	}
	if c.Reps < 1 {
		bad("--reps must be at least 1")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
		zero bool // zero allowed
	}{
		{"--duration", c.Duration, false}, {"--warmup", c.Warmup, true},
		{"--stream-duration", c.StreamDuration, false}, {"--stream-ttft", c.StreamTTFT, true},
		{"--profile-duration", c.ProfileDuration, false}, {"--redis-delay", c.RedisDelay, false},
		{"--routing-duration", c.RoutingDuration, false}, {"--routing-warmup", c.RoutingWarmup, true},
		{"--routing-timeout", c.RoutingTimeout, false},
	} {
		if d.v < 0 || d.v == 0 && !d.zero {
			bad("%s must be a positive duration", d.name)
		}
	}
	if c.StreamRate < 1 || c.ProfileRate < 1 || c.AblationRate < 1 {
		bad("--stream-rate, --ablation-rate and --profile-rate must be at least 1")
	}
	if c.StreamTPS <= 0 {
		bad("--stream-tps must be positive")
	}
	if c.StreamTokens < 2 || c.RoutingTokens < 1 {
		bad("--stream-tokens must be at least 2 (a gap needs two chunks) and --routing-tokens at least 1")
	}
	if c.RoutingLoad <= 0 || c.RoutingLoad > 2 {
		bad("--routing-load must be in (0, 2]")
	}
	return c, errors.Join(errs...)
}

// has reports whether the run includes phase p.
func (c Config) has(p string) bool { return slices.Contains(c.Phases, p) }

func positiveInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a whole number ≥ 1", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("is empty")
	}
	return out, nil
}

func durations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%q is not a duration such as 60ms", f)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, errors.New("is empty")
	}
	return out, nil
}
