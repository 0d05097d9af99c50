// Command switchyard-bench measures Switchyard so that every performance
// claim comes from one command anyone can run (scripts/bench.sh):
//
//   - overhead: open-loop load (vegeta) at fixed rates against a simulated
//     engine with a fixed latency, directly, through nginx proxy_pass and
//     through `switchyard serve` with auth, limits and metering on real
//     Postgres and Redis; the latency each proxy adds, its errors, the
//     highest rate it sustains, and the gateway's CPU and RSS;
//   - streaming: added time to first token and per-chunk delay;
//   - heap: the gateway's heap per open stream at thousands of streams;
//   - profile: perf samples of the gateway under load;
//   - routing: six simulated nodes of mixed speeds behind agents, routed by
//     the gateway, against nginx round-robin and least_conn in front of the
//     same engines;
//   - gobench: the benchmarks beside the code (scheduler, leases, the hot
//     path) and a pprof of the hot path.
//
// It writes BENCHMARKS.md and the raw JSON. It starts every process it
// measures as its own child (the binaries from --bin, nginx from PATH) on
// loopback ports, creates its own Postgres database and Redis key prefix,
// and removes them afterwards.
//
// The code lives in this main package, apart from the gateway's: it talks
// to the binaries over HTTP only and imports nothing of the module.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// benchModel is the model of the overhead, streaming and heap phases.
const benchModel = "bench-model"

// responseTokens is what the overhead phase's engine answers.
const responseTokens = 16

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cfg, err := parseConfig(args, stderr, getenv)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "switchyard-bench: bad arguments:\n%v\n", err)
		return 2
	}
	logf := func(format string, a ...any) {
		fmt.Fprintf(stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	}
	if cfg.Render != "" {
		if err := rerender(cfg.Render, cfg.Out); err != nil {
			fmt.Fprintf(stderr, "switchyard-bench: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "wrote %s from %s\n", cfg.Out, cfg.Render)
		return 0
	}
	if err := checkTools(&cfg, logf); err != nil {
		fmt.Fprintf(stderr, "switchyard-bench: %v\n", err)
		return 2
	}
	r, err := measure(ctx, cfg, args, logf)
	// A run that failed before measuring anything leaves the last report
	// alone.
	if r != nil && len(r.Phases) > 0 {
		if werr := writeReport(cfg, r); werr != nil {
			fmt.Fprintf(stderr, "switchyard-bench: %v\n", werr)
			return 1
		}
		fmt.Fprintf(stdout, "wrote %s and %s\n", cfg.Out, r.RawJSON)
	}
	if err != nil {
		fmt.Fprintf(stderr, "switchyard-bench: %v\n", err)
		return 1
	}
	return 0
}

// checkTools finds the binaries and tools the phases need. nginx is never
// installed here: without it the run stops and says how to get it, unless
// --nginx "" asks for a run without the nginx arms.
func checkTools(cfg *Config, logf func(string, ...any)) error {
	var errs []error
	for _, b := range []string{"switchyard", "switchyard-agent", "simengine"} {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, b)); err != nil {
			errs = append(errs, fmt.Errorf("--bin %s: no %s binary there (build it with go build -o %s ./cmd/%s)", cfg.BinDir, b, cfg.BinDir, b))
		}
	}
	if cfg.Nginx != "" {
		p, err := exec.LookPath(cfg.Nginx)
		if err != nil {
			errs = append(errs, fmt.Errorf("nginx (%s) is not installed: install it (Debian/Ubuntu: apt-get install nginx; macOS: brew install nginx), or pass --nginx '' to run without the nginx arms", cfg.Nginx))
		}
		cfg.Nginx = p
	}
	if cfg.Perf != "" && cfg.has(PhaseProfile) {
		p, err := exec.LookPath(cfg.Perf)
		if err != nil {
			logf("perf not found: the gateway's CPU will not be sampled (the pprof of the hot path benchmark still runs)")
			p = ""
		}
		cfg.Perf = p
	}
	if cfg.GoTool != "" && cfg.has(PhaseGoBench) {
		p, err := exec.LookPath(cfg.GoTool)
		if err != nil {
			logf("go not found: the benchmarks beside the code will not run")
			p = ""
		} else if _, err := os.Stat("go.mod"); err != nil {
			logf("not in the module's root (no go.mod): the benchmarks beside the code will not run")
			p = ""
		}
		cfg.GoTool = p
	}
	return errors.Join(errs...)
}

// measure runs the phases and returns the report, also when a phase
// failed or the run was interrupted: what was measured is kept.
func measure(ctx context.Context, cfg Config, args []string, logf func(string, ...any)) (*Report, error) {
	r := &Report{
		Schema:  1,
		Started: time.Now(),
		Command: describeCommand(args, os.Getenv("SWITCHYARD_BENCH_INVOCATION")),
		Machine: describeMachine(cfg.GoTool),
		Settings: Settings{
			Rates: cfg.Rates, Reps: cfg.Reps, DurationS: cfg.Duration.Seconds(), WarmupS: cfg.Warmup.Seconds(),
			ResponseTokens: responseTokens, StreamRate: cfg.StreamRate, StreamSeconds: cfg.StreamDuration.Seconds(),
			Streams: cfg.Streams, ProfileRate: cfg.ProfileRate, Seed: cfg.Seed,
		},
		Errors: map[string]string{},
	}
	for _, l := range cfg.Latencies {
		r.Settings.LatenciesMS = append(r.Settings.LatenciesMS, ms(l))
	}
	r.Notes = append(r.Notes, reducedNotes(cfg)...)
	defer func() {
		r.Finished = time.Now()
		r.Machine.LoadAvgEnd = loadAverage()
		r.derive()
	}()

	r.Machine.FileLimit = raiseFileLimit(1 << 16)
	r.Machine.Nginx = nginxVersion(cfg.Nginx)
	r.Machine.Postgres = postgresVersion(ctx, cfg.DatabaseURL)
	r.Machine.Redis = redisVersion(ctx, cfg.RedisURL)
	logf("machine: %s, %d cores, load %s; open-file limit %d", r.Machine.CPU, r.Machine.Cores, r.Machine.LoadAvgStart, r.Machine.FileLimit)

	dir, err := os.MkdirTemp("", "switchyard-bench-")
	if err != nil {
		return r, err
	}
	if cfg.Keep {
		logf("logs and configuration files are kept in %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	ps := &procs{dir: dir}
	defer ps.stopAll()

	db, err := createDatabase(ctx, cfg.DatabaseURL)
	if err != nil {
		return r, err
	}
	defer func() {
		ps.stopAll() // the gateway holds connections to the database
		if err := db.drop(); err != nil {
			logf("could not drop database %s: %v", db.name, err)
		}
	}()
	prefix := "switchyard-bench-" + randomHex(4) + ":"
	defer func() {
		ps.stopAll() // nothing may write under the prefix after it is cleared
		if err := clearRedisPrefix(cfg.RedisURL, prefix); err != nil {
			logf("could not clear Redis keys under %s: %v", prefix, err)
		}
	}()

	logf("starting switchyard serve on database %s, Redis prefix %s", db.name, prefix)
	gw, err := startGateway(ctx, ps, cfg.BinDir, db.url, cfg.RedisURL, prefix, nil)
	if err != nil {
		return r, err
	}
	if err := gw.configure(ctx); err != nil {
		return r, err
	}
	sim, err := startEngine(ctx, ps, cfg.BinDir, "sim", "--model", benchModel, "--max-tokens", fmt.Sprint(responseTokens))
	if err != nil {
		return r, err
	}
	if err := gw.vendor(ctx, "sim", sim.url+"/v1", benchModel); err != nil {
		return r, err
	}
	var nginx *proc
	nginxAddr := ""
	if cfg.Nginx != "" {
		if nginxAddr, err = freeAddr(); err != nil {
			return r, err
		}
		u, _ := url.Parse(sim.url)
		if nginx, err = startNginx(ctx, ps, cfg.Nginx, "nginx", []nginxServer{{Listen: nginxAddr, Upstream: []string{u.Host}}}); err != nil {
			return r, err
		}
	} else {
		r.Notes = append(r.Notes, "nginx was not used (--nginx ''): no nginx arm, no ratio to nginx, no nginx routing baselines.")
	}
	arms := armsFor(sim, nginxAddr, gw)
	r.Arms = map[string]ArmNote{
		ArmDirect:     {Path: "client → simengine"},
		ArmNginx:      {Path: "client → nginx → simengine"},
		ArmSwitchyard: {Path: "client → switchyard serve (auth, limits and budgets in Redis, metering to Postgres) → simengine as a vendor"},
	}
	if err := smokeTest(ctx, arms); err != nil {
		return r, err
	}
	logf("arms ready: %s", describeArms(arms))

	simURL, _ := url.Parse(sim.url)
	simPort, _ := strconv.Atoi(simURL.Port())
	setup := &overheadSetup{sim: sim, simPort: simPort, gw: gw, nginx: nginx, arms: arms, model: benchModel, tokens: responseTokens, verbose: logf}
	phase := func(name string, fn func() error) {
		if !cfg.has(name) || ctx.Err() != nil {
			return
		}
		start := time.Now()
		logf("phase %s", name)
		// A phase that overloaded the gateway may have left its vendor
		// paused by the circuit breaker: wait until every arm answers.
		if err := waitArms(ctx, arms, 60*time.Second); err != nil {
			r.Errors[name] = err.Error()
			logf("phase %s skipped: %v", name, err)
			return
		}
		err := fn()
		p := Phase{Name: name, Seconds: time.Since(start).Seconds(), LoadAvg: loadAverage(), Finished: err == nil && ctx.Err() == nil}
		r.Phases = append(r.Phases, p)
		if err != nil {
			r.Errors[name] = err.Error()
			logf("phase %s failed: %v", name, err)
		}
		// What is measured so far is written at once: a run that dies
		// later keeps it.
		if err := checkpoint(cfg, r); err != nil {
			logf("could not write the results so far: %v", err)
		}
	}

	phase(PhaseOverhead, func() error {
		points, err := setup.runOverhead(ctx, cfg)
		r.Overhead = points
		return err
	})
	phase(PhaseAblation, func() error {
		res, err := runAblation(ctx, ps, cfg, db.url, prefix, gw, sim, cfg.AblationRate, cfg.RedisDelay, logf)
		r.Ablation = res
		return err
	})
	phase(PhaseStreaming, func() error {
		res, err := streamingPhase(ctx, cfg, sim, arms, logf)
		r.Streaming = res
		return err
	})
	phase(PhaseHeap, func() error {
		hs, err := heapPhase(ctx, cfg, sim, gw, arms[len(arms)-1], r.Machine.FileLimit, logf)
		r.Heap = hs
		return err
	})
	phase(PhaseProfile, func() error {
		if cfg.Perf == "" {
			r.Notes = append(r.Notes, "perf was not available: the gateway's CPU was not sampled under load.")
			return nil
		}
		if err := sim.configure(ctx, map[string]any{"latency": cfg.Latencies[0].String(), "ttft": "0s", "tps": 0}); err != nil {
			return err
		}
		body := chatBody(benchModel, false, responseTokens)
		var load LoadRun
		p, err := perfProfile(ctx, cfg.Perf, dir, gw.pid(), cfg.ProfileDuration, func() {
			load = attack(ctx, arms[len(arms)-1], body, cfg.ProfileRate, cfg.ProfileDuration)
		})
		p.PerfRate = cfg.ProfileRate
		if err != nil {
			p.PerfNote = err.Error()
		}
		logf("profile: %d samples at %d rps (p50 %.2f ms, %d errors)", p.PerfSamples, cfg.ProfileRate, load.Latency.P50MS, load.Errors)
		r.Profile = mergeProfile(r.Profile, p)
		return nil
	})
	phase(PhaseRouting, func() error {
		rs, err := startRouting(ctx, ps, cfg, gw)
		if err != nil {
			return err
		}
		res := rs.runRouting(ctx, cfg, logf)
		r.Routing = &res
		return nil
	})
	phase(PhaseGoBench, func() error {
		if cfg.GoTool == "" {
			r.Notes = append(r.Notes, "go was not available in the module's root: the benchmarks beside the code did not run.")
			return nil
		}
		benches, prof, err := runGoBench(ctx, cfg.GoTool, dir, cfg.RedisURL, cfg.GoBenchTime, cfg.PprofBenchTime)
		r.GoBench = benches
		for _, b := range benches {
			switch b.Name {
			case "BenchmarkHotPath":
				prof.HotPathNsOp, prof.HotPathAlloc = b.NsPerOp, b.AllocsPerOp
			case "BenchmarkHarnessOnly":
				prof.HarnessNsOp = b.NsPerOp
			}
		}
		r.Profile = mergeProfile(r.Profile, prof)
		return err
	})
	if ctx.Err() != nil {
		r.Notes = append(r.Notes, "The run was interrupted; the phases it finished are reported.")
		return r, ctx.Err()
	}
	return r, nil
}

// describeCommand is the command line the report shows: the script's own
// when it started the tool (it names itself in invocation), without the
// flags that only say where this machine keeps things.
func describeCommand(args []string, invocation string) string {
	var kept []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") {
			kept = append(kept, a)
			continue
		}
		switch name {
		case "bin", "nginx", "perf", "go", "database-url", "redis-url", "out", "results":
			if !hasValue && i+1 < len(args) {
				i++ // the value
			}
			continue
		case "keep":
			continue
		}
		kept = append(kept, a)
	}
	cmd := "switchyard-bench"
	if invocation != "" {
		cmd = invocation
	}
	return strings.TrimSpace(cmd + " " + strings.Join(kept, " "))
}

// waitArms waits until every arm answers a request.
func waitArms(ctx context.Context, arms []arm, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		err := smokeTest(ctx, arms)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Second)
	}
}

// smokeTest sends one request on each arm: a measurement of an arm that
// answers errors would measure nothing.
func smokeTest(ctx context.Context, arms []arm) error {
	body := chatBody(benchModel, false, responseTokens)
	for _, a := range arms {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.URL, strings.NewReader(string(body)))
		for k, v := range a.Header {
			req.Header[k] = v
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("arm %s: %w", a.Name, err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("arm %s answered %s: %s", a.Name, resp.Status, strings.TrimSpace(string(raw)))
		}
	}
	return nil
}

func streamingPhase(ctx context.Context, cfg Config, sim *engine, arms []arm, logf func(string, ...any)) (*StreamingResult, error) {
	if err := sim.configure(ctx, map[string]any{"latency": "0s", "ttft": cfg.StreamTTFT.String(), "tps": cfg.StreamTPS}); err != nil {
		return nil, err
	}
	res := &StreamingResult{EngineTTFTMS: ms(cfg.StreamTTFT), EngineTPS: cfg.StreamTPS, Tokens: cfg.StreamTokens, Rate: cfg.StreamRate}
	body := chatBody(benchModel, true, cfg.StreamTokens)
	c := streamClient()
	defer c.CloseIdleConnections()
	for _, a := range arms {
		streamLoad(ctx, c, a, body, cfg.StreamTokens, cfg.StreamRate, cfg.Warmup)
	}
	for rep := range cfg.Reps {
		for i := range arms {
			a := arms[(i+rep)%len(arms)]
			run := streamLoad(ctx, c, a, body, cfg.StreamTokens, cfg.StreamRate, cfg.StreamDuration)
			run.Rep = rep + 1
			res.Runs = append(res.Runs, run)
			logf("streaming rep=%d %-10s %d streams, %d errors, TTFT p50 %.2f ms p99 %.2f ms, gap p50 %.2f ms p99 %.2f ms",
				rep+1, a.Name, run.Streams, run.Errors, run.TTFT.P50MS, run.TTFT.P99MS, run.Gap.P50MS, run.Gap.P99MS)
			if ctx.Err() != nil {
				summarizeStreaming(res)
				return res, ctx.Err()
			}
		}
	}
	summarizeStreaming(res)
	return res, nil
}

func heapPhase(ctx context.Context, cfg Config, sim *engine, gw *gateway, sy arm, fileLimit uint64, logf func(string, ...any)) ([]HeapPoint, error) {
	// Every stream sends its first chunk at once and then stalls, for
	// less than the gateway's 60 s stream idle timeout.
	if err := sim.configure(ctx, map[string]any{"latency": "0s", "ttft": "0s", "tps": 0, "stall_after": map[string]any{"chunks": 1, "for": "50s"}}); err != nil {
		return nil, err
	}
	defer func() {
		_ = sim.configure(context.WithoutCancel(ctx), map[string]any{"stall_after": map[string]any{"chunks": 0, "for": "0s"}})
	}()
	body := chatBody(benchModel, true, responseTokens)
	fit := streamsThatFit(fileLimit)
	var out []HeapPoint
	for _, n := range cfg.Streams {
		held := min(n, fit)
		if held < 1 {
			return out, fmt.Errorf("the open-file limit (%d) leaves no room for streams", fileLimit)
		}
		p, err := holdStreams(ctx, gw, sy, body, held, fileLimit, logf)
		p.Wanted = n
		if held < n {
			note := fmt.Sprintf("only %d streams fit the open-file limit of %d (the gateway holds two descriptors per stream, and needs some for itself); raise the limit (ulimit -n) to hold %d.", held, fileLimit, n)
			if p.Note != "" {
				note += " " + p.Note
			}
			p.Note = note
		}
		out = append(out, p)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// mergeProfile combines the perf and pprof halves of the profile.
func mergeProfile(into *ProfileResult, p ProfileResult) *ProfileResult {
	if into == nil {
		return &p
	}
	if p.PerfSamples > 0 || p.PerfNote != "" {
		into.PerfRate, into.PerfSeconds, into.PerfSamples = p.PerfRate, p.PerfSeconds, p.PerfSamples
		into.PerfTop, into.PerfDSO, into.PerfGroups, into.PerfNote, into.PerfCum = p.PerfTop, p.PerfDSO, p.PerfGroups, p.PerfNote, p.PerfCum
	}
	if len(p.PprofTop) > 0 || p.PprofNote != "" || p.HotPathNsOp > 0 {
		into.PprofTop, into.PprofCum, into.PprofNote = p.PprofTop, p.PprofCum, p.PprofNote
		into.HotPathNsOp, into.HarnessNsOp, into.HotPathAlloc = p.HotPathNsOp, p.HarnessNsOp, p.HotPathAlloc
	}
	return into
}

// writeReport writes BENCHMARKS.md and the raw JSON (named by the run's
// start). The report is written even when the JSON cannot be.
func writeReport(cfg Config, r *Report) error {
	if err := os.MkdirAll(cfg.ResultsDir, 0o755); err != nil {
		return err
	}
	r.RawJSON = filepath.ToSlash(filepath.Join(cfg.ResultsDir, r.Started.UTC().Format("20060102T150405Z")+".json"))
	mdErr := os.WriteFile(cfg.Out, []byte(renderMarkdown(r)), 0o644)
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return errors.Join(mdErr, fmt.Errorf("encode the results: %w", err))
	}
	return errors.Join(mdErr, os.WriteFile(r.RawJSON, append(raw, '\n'), 0o644))
}

// rerender writes the report again from a run's raw JSON, with the
// targets and analysis recomputed from its measurements, and writes those
// derived parts back into the JSON (the measurements stay as they were).
func rerender(jsonPath, out string) error {
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		return err
	}
	var r Report
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("%s: %w", jsonPath, err)
	}
	if r.Schema != 1 {
		return fmt.Errorf("%s: schema %d, this tool reads 1", jsonPath, r.Schema)
	}
	r.RawJSON = filepath.ToSlash(jsonPath)
	r.derive()
	if err := os.WriteFile(out, []byte(renderMarkdown(&r)), 0o644); err != nil {
		return err
	}
	again, err := json.MarshalIndent(&r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(jsonPath, append(again, '\n'), 0o644)
}

// checkpoint writes the results so far, with the targets and notes they
// allow, into the same files the finished run will replace.
func checkpoint(cfg Config, r *Report) error {
	c := *r
	c.Finished = time.Now()
	c.Machine.LoadAvgEnd = loadAverage()
	c.Notes = append(append([]string(nil), c.Notes...), "This is a checkpoint of a run still going or cut short: it holds the phases finished so far.")
	c.derive()
	return writeReport(cfg, &c)
}

// reducedNotes says where a run measured less than the full matrix.
func reducedNotes(cfg Config) []string {
	full, err := parseConfig(nil, io.Discard, func(string) string { return "" })
	if err != nil {
		return nil
	}
	var notes []string
	diff := func(what, got, want string) {
		if got != want {
			notes = append(notes, fmt.Sprintf("Reduced or changed run: %s %s (the full matrix: %s).", what, got, want))
		}
	}
	diff("rates", fmt.Sprint(cfg.Rates), fmt.Sprint(full.Rates))
	diff("upstream latencies", fmt.Sprint(cfg.Latencies), fmt.Sprint(full.Latencies))
	diff("repetitions", fmt.Sprint(cfg.Reps), fmt.Sprint(full.Reps))
	diff("measurement length", cfg.Duration.String(), full.Duration.String())
	diff("concurrent streams", fmt.Sprint(cfg.Streams), fmt.Sprint(full.Streams))
	diff("routing measurement", cfg.RoutingDuration.String(), full.RoutingDuration.String())
	diff("phases", strings.Join(cfg.Phases, ","), strings.Join(full.Phases, ","))
	return notes
}
