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
	"time"
)

// ProfileEntry is one line of a profile's top list.
type ProfileEntry struct {
	Share  float64 `json:"share"` // of all samples, 0–1
	Symbol string  `json:"symbol"`
}

// ProfileResult is where the gateway's CPU goes: perf samples of the
// running gateway under load, and pprof of the in-process hot path
// benchmark.
type ProfileResult struct {
	PerfRate     int            `json:"perf_rate,omitempty"`
	PerfSeconds  float64        `json:"perf_seconds,omitempty"`
	PerfSamples  int            `json:"perf_samples,omitempty"`
	PerfTop      []ProfileEntry `json:"perf_top,omitempty"`        // by symbol, self time
	PerfDSO      []ProfileEntry `json:"perf_by_dso,omitempty"`     // gateway code vs kernel
	PerfGroups   []ProfileEntry `json:"perf_groups,omitempty"`     // self time by area of the code
	PerfCum      []ProfileEntry `json:"perf_cumulative,omitempty"` // inclusive time of the request path's parts
	PerfNote     string         `json:"perf_note,omitempty"`
	PprofTop     []ProfileEntry `json:"pprof_hot_path_top,omitempty"` // flat
	PprofCum     []ProfileEntry `json:"pprof_hot_path_cum,omitempty"`
	PprofNote    string         `json:"pprof_note,omitempty"`
	HotPathNsOp  float64        `json:"hot_path_ns_per_op,omitempty"`
	HarnessNsOp  float64        `json:"harness_ns_per_op,omitempty"`
	HotPathAlloc float64        `json:"hot_path_allocs_per_op,omitempty"`
}

// perfGroups sorts the gateway's self time into the areas an engineer
// would act on; the first matching pattern wins.
func perfGroups() []struct{ name, re string } {
	return []struct{ name, re string }{
		// With cpu-clock sampling (no hardware counters, as in most VMs) a
		// sample that falls while interrupts are off lands where they come
		// back on: after a context switch or a wake-up.
		{"kernel: context switches and wake-ups", `^\[k\] (finish_task_switch|_raw_spin_unlock_irqrestore|__schedule|schedule|try_to_wake_up|irqentry_exit|ttwu)`},
		{"kernel: network stack and other syscalls", `^\[k\]|^entry_|^__x64|^do_syscall|^tcp_|^__tcp|^ip_|^__ip|^sock_|^__sock|^__sys|^_raw_spin|^__schedule|^schedule|^__softirq`},
		{"gateway: openai pipeline", `switchyard/gateway/openai\.`},
		{"gateway: upstream client", `switchyard/gateway/upstream\.`},
		{"gateway: redis state (limits, leases)", `switchyard/gateway/redisstate\.|go-redis`},
		{"gateway: auth", `switchyard/gateway/auth\.`},
		{"gateway: metering", `switchyard/gateway/metering\.|jackc/pgx`},
		{"gateway: route and catalog", `switchyard/gateway/(route|catalog)\.`},
		{"logging (log/slog)", `^log/slog\.`},
		{"metrics (prometheus)", `prometheus`},
		{"encoding/json", `^encoding/json\.`},
		{"net/http", `^net/http\.|^net/textproto\.|^bufio\.`},
		{"net (poller, sockets)", `^net\.|^internal/poll\.|^syscall\.|^internal/runtime/syscall`},
		{"crypto (key hashing, request ids)", `^crypto/|^vendor/golang.org/x/crypto`},
		{"runtime: garbage collector", `^runtime\.(gc|scanobject|greyobject|findObject|markBits|heapBits|wbBuf|bulkBarrier|sweep|mark|(.*)Mark|spanOf|typePointers)`},
		{"runtime: memory allocation", `^runtime\.(mallocgc|malloc|nextFreeFast|memclr|(.*)alloc|newobject|makeslice|growslice|mcache|mcentral|mheap|mspan)`},
		{"runtime: scheduler, channels and timers", `^runtime\.(schedule|findRunnable|park|ready|futex|notesleep|notewakeup|stopm|startm|runqget|netpoll|goready|casgstatus|execute|(.*)[Tt]imer|mcall|gopark|wakep|lock|unlock|usleep|nanotime|procyield|osyield|selectgo|chanrecv|chansend|closechan|sema|send|recv|goexit|newproc|systemstack)|^__vdso_clock_gettime|^time\.`},
		{"context", `^context\.`},
		{"runtime: other", `^runtime\.|^internal/runtime|^aeshash|^memeqbody|^indexbyte|^cmpbody`},
	}
}

// groupProfile sums top entries by perfGroups, "other" for the rest.
func groupProfile(entries []ProfileEntry) []ProfileEntry {
	groups := perfGroups()
	res := make([]*regexp.Regexp, len(groups))
	for i, g := range groups {
		res[i] = regexp.MustCompile(g.re)
	}
	sums := map[string]float64{}
	for _, e := range entries {
		name := "other"
		for i, re := range res {
			if re.MatchString(e.Symbol) {
				name = groups[i].name
				break
			}
		}
		sums[name] += e.Share
	}
	var out []ProfileEntry
	for name, v := range sums {
		out = append(out, ProfileEntry{Share: v, Symbol: name})
	}
	sortEntries(out)
	return out
}

func sortEntries(es []ProfileEntry) {
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && (es[j].Share > es[j-1].Share || es[j].Share == es[j-1].Share && es[j].Symbol < es[j-1].Symbol); j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
}

// perfEntryPoints are the functions whose inclusive time says where a
// request's CPU goes: the server side, the handler and its steps, the
// upstream transport, Redis, metering, logging and the collector.
func perfEntryPoints() *regexp.Regexp {
	return regexp.MustCompile(`^(net/http\.\(\*conn\)\.serve|net/http\.\(\*persistConn\)\.(readLoop|writeLoop)|` +
		`github\.com/switchyard-ai/switchyard/gateway/[a-z]+\.\(\*[A-Za-z]+\)\.[A-Za-z]+$|` +
		`github\.com/redis/go-redis/v9\.\(\*baseClient\)\.process$|github\.com/jackc/pgx/v5\.\(\*Conn\)\.[A-Z][A-Za-z]*$|` +
		`log/slog\.\(\*Logger\)\.LogAttrs|runtime\.gcBgMarkWorker$|runtime\.mallocgc$|runtime\.schedule$)`)
}

// perfChildLine matches `perf report --children` rows: "  35.00%  1.00%  [.] symbol".
var perfChildLine = regexp.MustCompile(`^\s*([0-9.]+)%\s+[0-9.]+%\s+(?:\[[.k]\] )?(.+?)\s*$`)

// parsePerfChildren keeps the inclusive share of the entry points.
func parsePerfChildren(out []byte, n int) []ProfileEntry {
	want := perfEntryPoints()
	var es []ProfileEntry
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := perfChildLine.FindStringSubmatch(sc.Text())
		if m == nil || !want.MatchString(m[2]) || seen[m[2]] {
			continue
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			continue
		}
		seen[m[2]] = true
		es = append(es, ProfileEntry{Share: v / 100, Symbol: m[2]})
	}
	sortEntries(es)
	return es[:min(len(es), n)]
}

// perfLine matches a line of `perf report --stdio --no-children` sorted
// by symbol or dso: "    12.34%  [.] runtime.mallocgc" or "  40.00%  switchyard".
var perfLine = regexp.MustCompile(`^\s*([0-9.]+)%\s+(.+?)\s*$`)

// parsePerfReport reads a perf report's percentage lines.
func parsePerfReport(out []byte) []ProfileEntry {
	var es []ProfileEntry
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		m := perfLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			continue
		}
		sym := m[2]
		// "[.] symbol" is user space, "[k] symbol" the kernel.
		if rest, ok := strings.CutPrefix(sym, "[.] "); ok {
			sym = rest
		} else if rest, ok := strings.CutPrefix(sym, "[k] "); ok {
			sym = "[k] " + rest
		}
		es = append(es, ProfileEntry{Share: v / 100, Symbol: sym})
	}
	return es
}

// perfSamples reads the sample count from perf report's header.
var perfSamplesLine = regexp.MustCompile(`# Samples: ([0-9.]+)([KM]?)`)

func parsePerfSamples(out []byte) int {
	m := perfSamplesLine.FindSubmatch(out)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	switch string(m[2]) {
	case "K":
		v *= 1e3
	case "M":
		v *= 1e6
	}
	return int(v)
}

// perfProfile samples pid's CPU for d while load runs, and reads the
// report by symbol and by shared object.
func perfProfile(ctx context.Context, perf, dir string, pid int, d time.Duration, load func()) (ProfileResult, error) {
	var res ProfileResult
	data := filepath.Join(dir, "perf.data")
	rec := exec.CommandContext(ctx, perf, "record", "-F", "997", "-g", "-o", data, "-p", strconv.Itoa(pid), "--", "sleep", fmt.Sprint(d.Seconds()))
	var recOut bytes.Buffer
	rec.Stdout, rec.Stderr = &recOut, &recOut
	if err := rec.Start(); err != nil {
		return res, err
	}
	load()
	if err := rec.Wait(); err != nil {
		return res, fmt.Errorf("perf record: %v: %s", err, bytes.TrimSpace(recOut.Bytes()))
	}
	res.PerfSeconds = d.Seconds()
	bySym, err := exec.CommandContext(ctx, perf, "report", "-i", data, "--stdio", "--no-children", "-F", "overhead,sym", "-g", "none", "--percent-limit", "0.05").Output()
	if err != nil {
		return res, fmt.Errorf("perf report: %w", err)
	}
	all := parsePerfReport(bySym)
	res.PerfSamples = parsePerfSamples(bySym)
	res.PerfGroups = groupProfile(all)
	res.PerfTop = all[:min(len(all), 25)]
	byDSO, err := exec.CommandContext(ctx, perf, "report", "-i", data, "--stdio", "--no-children", "-F", "overhead,dso", "-g", "none").Output()
	if err == nil {
		res.PerfDSO = parsePerfReport(byDSO)
	}
	children, err := exec.CommandContext(ctx, perf, "report", "-i", data, "--stdio", "--children", "--sort", "sym", "-g", "none").Output()
	if err == nil {
		res.PerfCum = parsePerfChildren(children, 25)
	}
	_ = os.Remove(data)
	return res, nil
}

// pprofLine matches `go tool pprof -top` rows:
// "     flat  flat%   sum%        cum   cum%" then
// "    1.20s 12.00% 12.00%      2.50s 25.00%  runtime.mallocgc".
var pprofLine = regexp.MustCompile(`^\s*[0-9.]+\w*\s+([0-9.]+)%\s+[0-9.]+%\s+[0-9.]+\w*\s+([0-9.]+)%\s+(.+?)\s*$`)

// parsePprofTop returns the flat and cumulative shares of each function.
func parsePprofTop(out []byte) (flat, cum []ProfileEntry) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := pprofLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		f, _ := strconv.ParseFloat(m[1], 64)
		c, _ := strconv.ParseFloat(m[2], 64)
		flat = append(flat, ProfileEntry{Share: f / 100, Symbol: m[3]})
		cum = append(cum, ProfileEntry{Share: c / 100, Symbol: m[3]})
	}
	sortEntries(cum)
	return flat, cum
}
