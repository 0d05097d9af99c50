package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// GoBench is one line of `go test -bench` output.
type GoBench struct {
	Package     string  `json:"package"`
	Name        string  `json:"name"` // without the -GOMAXPROCS suffix
	Iterations  int64   `json:"iterations"`
	NsPerOp     float64 `json:"ns_per_op"`
	BytesPerOp  float64 `json:"bytes_per_op"`
	AllocsPerOp float64 `json:"allocs_per_op"`
}

var (
	benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+([0-9.]+) ns/op(.*)$`)
	benchPkg  = regexp.MustCompile(`^pkg: (\S+)`)
	benchUnit = regexp.MustCompile(`([0-9.]+) (B/op|allocs/op)`)
)

// parseGoBench reads the benchmark lines of `go test -bench -benchmem`.
func parseGoBench(out []byte) []GoBench {
	var res []GoBench
	pkg := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if m := benchPkg.FindStringSubmatch(line); m != nil {
			pkg = m[1]
			continue
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		b := GoBench{Package: pkg, Name: m[1]}
		b.Iterations, _ = strconv.ParseInt(m[2], 10, 64)
		b.NsPerOp, _ = strconv.ParseFloat(m[3], 64)
		for _, u := range benchUnit.FindAllStringSubmatch(m[4], -1) {
			v, _ := strconv.ParseFloat(u[1], 64)
			if u[2] == "B/op" {
				b.BytesPerOp = v
			} else {
				b.AllocsPerOp = v
			}
		}
		res = append(res, b)
	}
	return res
}

// goBenchPackages are the benchmarks beside the code that the report
// quotes: the scheduler at 10 to 10 000 nodes, Redis lease and limit
// operations, and the in-process hot path of one request.
func goBenchPackages() []string {
	return []string{"./scheduler", "./gateway/redisstate", "./gateway/openai"}
}

const goBenchPattern = `^Benchmark(Pick|LeaseAcquireRelease|Admit|HotPath|HarnessOnly)`

// runGoBench runs the benchmarks beside the code, then profiles the hot
// path with pprof. The Redis benchmarks use redisURL.
func runGoBench(ctx context.Context, goTool, dir, redisURL, benchtime, pprofBenchtime string) ([]GoBench, ProfileResult, error) {
	var prof ProfileResult
	args := append([]string{"test", "-run", "^$", "-bench", goBenchPattern, "-benchmem", "-benchtime", benchtime, "-count", "1"}, goBenchPackages()...)
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Env = append(os.Environ(), "SWITCHYARD_TEST_REDIS_URL="+redisURL)
	out, err := cmd.CombinedOutput()
	benches := parseGoBench(out)
	if err != nil {
		return benches, prof, fmt.Errorf("go test -bench: %v\n%s", err, lastLines(out, 20))
	}
	profile := filepath.Join(dir, "hotpath.pprof")
	testBin := filepath.Join(dir, "openai.test")
	cmd = exec.CommandContext(ctx, goTool, "test", "-run", "^$", "-bench", "^BenchmarkHotPath$", "-benchtime", pprofBenchtime,
		"-cpuprofile", profile, "-o", testBin, "./gateway/openai")
	if out, err := cmd.CombinedOutput(); err != nil {
		prof.PprofNote = fmt.Sprintf("go test -cpuprofile failed: %v: %s", err, lastLines(out, 5))
		return benches, prof, nil
	}
	top, err := exec.CommandContext(ctx, goTool, "tool", "pprof", "-top", "-nodecount", "400", testBin, profile).Output()
	if err != nil {
		prof.PprofNote = fmt.Sprintf("go tool pprof failed: %v", err)
		return benches, prof, nil
	}
	flat, cum := parsePprofTop(top)
	prof.PprofTop = flat[:min(len(flat), 20)]
	prof.PprofCum = filterOurs(cum, 20)
	return benches, prof, nil
}

// filterOurs keeps the cumulative entries of this module's functions (the
// parts of the pipeline), at most n.
func filterOurs(cum []ProfileEntry, n int) []ProfileEntry {
	var out []ProfileEntry
	for _, e := range cum {
		if strings.Contains(e.Symbol, "switchyard-ai/switchyard/") && !strings.Contains(e.Symbol, "_test.") && !strings.Contains(e.Symbol, "openai_test") {
			out = append(out, e)
			if len(out) == n {
				break
			}
		}
	}
	return out
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
