package main

import (
	"io"
	"math"
	"net"
	"strings"
	"testing"
	"time"
)

func TestParseStatCPUAndMemory(t *testing.T) {
	// A command name with spaces and a parenthesis, as /proc allows.
	stat := []byte("4242 (switch (yard) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 150 37 0 0 20 0 12 0 100 2000000 3000 18446744073709551615\n")
	ticks, err := parseStatCPU(stat)
	if err != nil || ticks != 187 {
		t.Errorf("parseStatCPU = %d, %v; want 150+37", ticks, err)
	}
	if _, err := parseStatCPU([]byte("garbage")); err == nil {
		t.Error("a line without ')' parsed")
	}
	status := []byte("Name:\tswitchyard\nVmHWM:\t   81920 kB\nVmRSS:\t   40960 kB\nThreads:\t12\n")
	rss, hwm := parseStatusMem(status)
	if rss != 40960<<10 || hwm != 81920<<10 {
		t.Errorf("parseStatusMem = %d, %d", rss, hwm)
	}
}

const exposition = `# HELP switchyard_overhead_seconds Request time minus time waiting on the upstream.
# TYPE switchyard_overhead_seconds histogram
switchyard_overhead_seconds_bucket{endpoint="chat/completions",le="0.0001"} 10
switchyard_overhead_seconds_bucket{endpoint="chat/completions",le="0.001"} 90
switchyard_overhead_seconds_bucket{endpoint="chat/completions",le="0.01"} 100
switchyard_overhead_seconds_bucket{endpoint="chat/completions",le="+Inf"} 100
switchyard_overhead_seconds_sum{endpoint="chat/completions"} 0.05
switchyard_overhead_seconds_count{endpoint="chat/completions"} 100
switchyard_overhead_seconds_bucket{endpoint="embeddings",le="0.0001"} 1
switchyard_overhead_seconds_bucket{endpoint="embeddings",le="+Inf"} 1
switchyard_overhead_seconds_sum{endpoint="embeddings"} 0.00005
switchyard_overhead_seconds_count{endpoint="embeddings"} 1
go_goroutines 42
go_memstats_heap_inuse_bytes 1.2345e+07
`

func TestParseHistogramAndDelta(t *testing.T) {
	h, ok := parseHistogram([]byte(exposition), "switchyard_overhead_seconds", `endpoint="chat/completions"`)
	if !ok || h.Count != 100 || h.Sum != 0.05 || len(h.Bounds) != 4 || !math.IsInf(h.Bounds[3], 1) {
		t.Fatalf("parseHistogram = %+v, %v", h, ok)
	}
	before := histogram{Bounds: h.Bounds, Counts: []float64{0, 0, 0, 0}}
	d := h.delta(before)
	if d.Count != 100 || math.Abs(d.MeanMS-0.5) > 1e-9 {
		t.Errorf("delta count %v mean %v ms, want 100 and 0.5", d.Count, d.MeanMS)
	}
	if d.P50UpperMS != 1 || d.P99UpperMS != 10 {
		t.Errorf("delta p50 ≤ %v ms, p99 ≤ %v ms; want 1 and 10", d.P50UpperMS, d.P99UpperMS)
	}
	if _, ok := parseHistogram([]byte(exposition), "switchyard_overhead_seconds", `endpoint="nope"`); ok {
		t.Error("a series that is not there was found")
	}
	if z := h.delta(h); z.Count != 0 {
		t.Errorf("no new observations gave %+v", z)
	}
}

func TestMetricValue(t *testing.T) {
	v, err := metricValue([]byte(exposition), "go_memstats_heap_inuse_bytes")
	if err != nil || v != 12345000 {
		t.Errorf("heap = %v, %v", v, err)
	}
	if v, err := metricValue([]byte(exposition), "go_goroutines"); err != nil || v != 42 {
		t.Errorf("goroutines = %v, %v", v, err)
	}
	if _, err := metricValue([]byte(exposition), "go_nope"); err == nil {
		t.Error("a missing metric was found")
	}
}

func TestParsePerfReport(t *testing.T) {
	out := []byte(`# To display the perf.data header info, please use --header/--header-only options.
#
# Samples: 12K of event 'cpu-clock:ppp'
# Overhead  Symbol
# ........  ......
#
    30.00%  [k] finish_task_switch.isra.0
    10.00%  [.] runtime.mallocgcSmallNoscan
     5.00%  [.] github.com/switchyard-ai/switchyard/gateway/openai.(*Handler).serveChain
     4.00%  [.] encoding/json.(*decodeState).object
     1.00%  [k] tcp_sendmsg_locked
     0.50%  [.] some.unknown.function
`)
	es := parsePerfReport(out)
	if len(es) != 6 || es[0].Symbol != "[k] finish_task_switch.isra.0" || es[1].Symbol != "runtime.mallocgcSmallNoscan" || math.Abs(es[0].Share-0.3) > 1e-9 {
		t.Fatalf("parsePerfReport = %+v", es)
	}
	if n := parsePerfSamples(out); n != 12000 {
		t.Errorf("samples = %d, want 12000", n)
	}
	groups := map[string]float64{}
	for _, g := range groupProfile(es) {
		groups[g.Symbol] = g.Share
	}
	for name, want := range map[string]float64{
		"kernel: context switches and wake-ups":    0.30,
		"runtime: memory allocation":               0.10,
		"gateway: openai pipeline":                 0.05,
		"encoding/json":                            0.04,
		"kernel: network stack and other syscalls": 0.01,
		"other": 0.005,
	} {
		if math.Abs(groups[name]-want) > 1e-9 {
			t.Errorf("group %q = %v, want %v (all: %v)", name, groups[name], want, groups)
		}
	}
}

func TestParsePprofTop(t *testing.T) {
	out := []byte(`File: openai.test
Showing nodes accounting for 2.5s, 100% of 2.5s total
      flat  flat%   sum%        cum   cum%
     0.50s 20.00% 20.00%      0.50s 20.00%  runtime.memmove
     0.25s 10.00% 30.00%      2.00s 80.00%  github.com/switchyard-ai/switchyard/gateway/openai.(*Handler).serveCall
         0     0% 30.00%      1.00s 40.00%  github.com/switchyard-ai/switchyard/gateway/openai.(*Handler).finish
`)
	flat, cum := parsePprofTop(out)
	if len(flat) != 3 || flat[0].Symbol != "runtime.memmove" || math.Abs(flat[0].Share-0.2) > 1e-9 {
		t.Fatalf("flat = %+v", flat)
	}
	if cum[0].Share != 0.8 || !strings.HasSuffix(cum[0].Symbol, "serveCall") {
		t.Errorf("cum not sorted by share: %+v", cum)
	}
	ours := filterOurs(cum, 10)
	if len(ours) != 2 {
		t.Errorf("filterOurs kept %+v", ours)
	}
}

func TestParseGoBench(t *testing.T) {
	out := []byte(`goos: linux
goarch: amd64
pkg: github.com/switchyard-ai/switchyard/scheduler
cpu: AMD EPYC
BenchmarkPick10-2      	 4000000	       259.9 ns/op	       1 B/op	       0 allocs/op
BenchmarkPick10000-2   	    4000	    272578 ns/op	    1995 B/op	       1 allocs/op
PASS
pkg: github.com/switchyard-ai/switchyard/gateway/openai
BenchmarkHotPath       	   25000	     46131 ns/op
`)
	bs := parseGoBench(out)
	if len(bs) != 3 {
		t.Fatalf("parseGoBench = %+v", bs)
	}
	want := GoBench{Package: "github.com/switchyard-ai/switchyard/scheduler", Name: "BenchmarkPick10000", Iterations: 4000, NsPerOp: 272578, BytesPerOp: 1995, AllocsPerOp: 1}
	if bs[1] != want {
		t.Errorf("got %+v, want %+v", bs[1], want)
	}
	if bs[2].Name != "BenchmarkHotPath" || bs[2].Package != "github.com/switchyard-ai/switchyard/gateway/openai" || bs[2].NsPerOp != 46131 {
		t.Errorf("a line without -benchmem columns or GOMAXPROCS suffix: %+v", bs[2])
	}
}

func TestTimeWaitTo(t *testing.T) {
	table := []byte(`  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0100007F:A001 0100007F:1F40 06 00000000:00000000 03:00001234 00000000     0        0 0 3 0
   2: 0100007F:A002 0100007F:1F40 06 00000000:00000000 03:00001234 00000000     0        0 0 3 0
   3: 0100007F:A003 0100007F:1F40 01 00000000:00000000 00:00000000 00000000     0        0 7 1 0
   4: 0100007F:1F40 0100007F:A004 06 00000000:00000000 03:00001234 00000000     0        0 0 3 0
`)
	if n := timeWaitTo(table, 0x1F40); n != 2 {
		t.Errorf("timeWaitTo = %d, want the 2 TIME_WAIT rows toward port 8000", n)
	}
}

func TestRedisHostPort(t *testing.T) {
	for in, want := range map[string]string{
		"redis://127.0.0.1:6379":     "127.0.0.1:6379",
		"redis://localhost":          "localhost:6379",
		"redis://:secret@10.0.0.1/2": "10.0.0.1:6379",
	} {
		if got, err := redisHostPort(in); err != nil || got != want {
			t.Errorf("redisHostPort(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := redisHostPort("rediss://x:1"); err == nil {
		t.Error("a TLS URL was accepted for the plain TCP delay proxy")
	}
}

func TestDelayProxyHoldsWhatTheClientSends(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	const delay = 30 * time.Millisecond
	p, err := startDelayProxy(echo.Addr().String(), delay)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	c, err := net.Dial("tcp", p.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 4)
	for _, msg := range []string{"ping", "pong"} {
		start := time.Now()
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo through the proxy: %q, %v", buf, err)
		}
		if rtt := time.Since(start); rtt < delay {
			t.Errorf("round trip %v, want at least the delay %v", rtt, delay)
		}
	}
}

func TestParseGCTrace(t *testing.T) {
	line := "gc 12 @3.201s 1%: 0.018+1.2+0.003 ms clock, 0.037+0.10/0.96/0.33+0.007 ms cpu, 40->41->20 MB, 42 MB goal, 3 MB stacks, 0 MB globals, 2 P"
	c, ok := parseGCTrace(line)
	if !ok || c != (gcCycle{N: 12, LiveMiB: 20, GoalMiB: 42, Stacks: 3}) {
		t.Errorf("parseGCTrace = %+v, %v", c, ok)
	}
	forced := "gc 3 @0.5s 0%: 0.01+0.2+0.01 ms clock, 0.02+0.1/0.2/0+0.02 ms cpu, 4->4->1 MB, 8 MB goal, 0 MB stacks, 0 MB globals, 2 P (forced)"
	if c, ok := parseGCTrace(forced); !ok || c.LiveMiB != 1 {
		t.Errorf("a forced collection: %+v, %v", c, ok)
	}
	for _, l := range []string{`{"level":"INFO","msg":"request"}`, "gc 1 @0.1s: nonsense"} {
		if _, ok := parseGCTrace(l); ok {
			t.Errorf("%q parsed as a collection", l)
		}
	}
	var w gcWatch
	for _, l := range []string{"noise", line, forced} {
		w.observe(l)
	}
	if n, last := w.state(); n != 2 || last.N != 3 {
		t.Errorf("watch saw %d collections, last %+v", n, last)
	}
}

func TestParsePerfChildren(t *testing.T) {
	out := []byte(`# Children      Self  Symbol
    60.00%     0.10%  [.] net/http.(*conn).serve
    45.00%     0.20%  [.] github.com/switchyard-ai/switchyard/gateway/openai.(*Handler).serveCall
    45.00%     0.00%  [.] github.com/switchyard-ai/switchyard/gateway/openai.(*Handler).serveCall
    12.00%     0.00%  [.] net/http.(*persistConn).readLoop
     8.00%     1.00%  [.] encoding/json.Unmarshal
     5.00%     0.50%  [.] github.com/switchyard-ai/switchyard/gateway/redisstate.(*Limiter).Admit
     3.00%     3.00%  [.] runtime.mallocgc
     2.00%     0.00%  [k] do_syscall_64
`)
	es := parsePerfChildren(out, 10)
	var names []string
	for _, e := range es {
		names = append(names, shortSymbol(e.Symbol))
	}
	want := "net/http.(*conn).serve gateway/openai.(*Handler).serveCall net/http.(*persistConn).readLoop gateway/redisstate.(*Limiter).Admit runtime.mallocgc"
	if strings.Join(names, " ") != want {
		t.Errorf("entry points = %v\nwant %s", names, want)
	}
	if es[0].Share != 0.6 {
		t.Errorf("share = %v", es[0].Share)
	}
}
