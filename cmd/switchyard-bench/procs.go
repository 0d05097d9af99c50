package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a child process whose output goes to a log file in the run's
// folder and is kept in memory, bounded, for readiness lines and failures.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{}
	log  *os.File
}

// tailBuffer keeps the first and the most recent output of a process,
// and hands each complete line to onLine when it is set.
type tailBuffer struct {
	mu      sync.Mutex
	head    []byte
	tail    []byte
	file    *os.File
	onLine  func(line string)
	partial []byte
}

const keepHead, keepTail = 16 << 10, 16 << 10

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.file != nil {
		_, _ = b.file.Write(p)
	}
	if room := keepHead - len(b.head); room > 0 {
		b.head = append(b.head, p[:min(room, len(p))]...)
	}
	b.tail = append(b.tail, p...)
	if len(b.tail) > keepTail {
		b.tail = append(b.tail[:0], b.tail[len(b.tail)-keepTail:]...)
	}
	if b.onLine != nil {
		rest := p
		for {
			i := bytes.IndexByte(rest, '\n')
			if i < 0 {
				if len(b.partial) < 1<<20 {
					b.partial = append(b.partial, rest...)
				}
				break
			}
			line := string(append(b.partial, rest[:i]...))
			b.partial = b.partial[:0]
			b.onLine(line)
			rest = rest[i+1:]
		}
	}
	return len(p), nil
}

func (b *tailBuffer) Head() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.head)
}

func (b *tailBuffer) Tail() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.tail)
}

// procs starts and stops every child of a run.
type procs struct {
	dir string // logs and configuration files
	mu  sync.Mutex
	all []*proc
}

func (ps *procs) start(name string, env []string, bin string, args ...string) (*proc, error) {
	return ps.startWatched(name, env, nil, bin, args...)
}

// startWatched is start with onLine called for every line of output.
func (ps *procs) startWatched(name string, env []string, onLine func(string), bin string, args ...string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	// Its own process group, so that a stop reaches what it starts and an
	// interrupt of the bench does not reach it before the bench stops it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	f, err := os.Create(filepath.Join(ps.dir, sanitize(name)+".log"))
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, cmd: cmd, out: &tailBuffer{file: f, onLine: onLine}, done: make(chan struct{}), log: f}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	ps.mu.Lock()
	ps.all = append(ps.all, p)
	ps.mu.Unlock()
	return p, nil
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func sanitize(s string) string { return unsafeName.ReplaceAllString(s, "_") }

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group and waits, then kills it.
func (p *proc) stop(within time.Duration) {
	if !p.exited() {
		_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(within):
			_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
			<-p.done
		}
	}
	p.out.mu.Lock()
	p.out.file = nil
	p.out.mu.Unlock()
	p.log.Close()
}

// stopAll stops every child, the most recently started first.
func (ps *procs) stopAll() {
	ps.mu.Lock()
	all := ps.all
	ps.all = nil
	ps.mu.Unlock()
	var wg sync.WaitGroup
	for i := len(all) - 1; i >= 0; i-- {
		wg.Add(1)
		go func(p *proc) { defer wg.Done(); p.stop(10 * time.Second) }(all[i])
	}
	wg.Wait()
}

// waitOutput waits until the process prints a line matching re and returns
// the first submatch.
func (p *proc) waitOutput(ctx context.Context, re *regexp.Regexp, within time.Duration) (string, error) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(p.out.Head()); m != nil {
			if len(m) > 1 {
				return m[1], nil
			}
			return m[0], nil
		}
		if p.exited() {
			return "", fmt.Errorf("%s exited:\n%s", p.name, p.out.Tail())
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("%s printed no %q within %v:\n%s", p.name, re.String(), within, p.out.Tail())
}

// waitHTTP waits until url answers with want.
func waitHTTP(ctx context.Context, p *proc, url string, want int, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if p != nil && p.exited() {
			return fmt.Errorf("%s exited:\n%s", p.name, p.out.Tail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	tail := ""
	if p != nil {
		tail = "\n" + p.out.Tail()
	}
	return fmt.Errorf("%s did not answer %d within %v (last: %s)%s", url, want, within, last, tail)
}

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// procSample is a process's CPU time and memory at one instant, from /proc.
type procSample struct {
	At       time.Time
	CPUTicks uint64 // utime + stime, in clock ticks
	RSSBytes uint64
	HWMBytes uint64 // peak RSS
}

// clockTicks is USER_HZ, which Linux fixes at 100 for /proc/<pid>/stat on
// every architecture Go supports.
const clockTicks = 100

func sampleProc(pid int) (procSample, error) {
	s := procSample{At: time.Now()}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	if s.CPUTicks, err = parseStatCPU(raw); err != nil {
		return s, err
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	s.RSSBytes, s.HWMBytes = parseStatusMem(status)
	return s, nil
}

// parseStatCPU reads utime and stime (fields 14 and 15) from a
// /proc/<pid>/stat line; the command name in parentheses may hold spaces,
// so fields are counted from the last ')'.
func parseStatCPU(raw []byte) (uint64, error) {
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc stat format")
	}
	f := strings.Fields(string(raw[i+1:]))
	// After ')': state(3) ppid(4) … utime(14) stime(15): indices 11 and 12.
	if len(f) < 13 {
		return 0, errors.New("unexpected /proc stat format")
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return u + s, nil
}

// parseStatusMem reads VmRSS and VmHWM (kB) from /proc/<pid>/status.
func parseStatusMem(raw []byte) (rss, hwm uint64) {
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := sc.Text()
		for _, f := range []struct {
			name string
			into *uint64
		}{{"VmRSS:", &rss}, {"VmHWM:", &hwm}} {
			if rest, ok := strings.CutPrefix(line, f.name); ok {
				fs := strings.Fields(rest)
				if len(fs) > 0 {
					if v, err := strconv.ParseUint(fs[0], 10, 64); err == nil {
						*f.into = v << 10
					}
				}
			}
		}
	}
	return rss, hwm
}

// childPIDs lists the direct children of pid (nginx's workers).
func childPIDs(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(raw, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(raw[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
}

// usage is what a set of processes used between two samples.
type usage struct {
	CPUCores float64 `json:"cpu_cores"` // CPU seconds per wall second
	RSSMiB   float64 `json:"rss_mib"`   // at the end
	PeakMiB  float64 `json:"peak_rss_mib"`
}

// meter samples a set of processes (a gateway, or nginx's master and
// workers) at the start and end of a measurement.
type meter struct {
	pids  []int
	start map[int]procSample
}

func startMeter(pids []int) *meter {
	m := &meter{pids: pids, start: map[int]procSample{}}
	for _, pid := range pids {
		if s, err := sampleProc(pid); err == nil {
			m.start[pid] = s
		}
	}
	return m
}

func (m *meter) stop() usage {
	var u usage
	var wall time.Duration
	var ticks uint64
	for _, pid := range m.pids {
		s0, ok := m.start[pid]
		if !ok {
			continue
		}
		s1, err := sampleProc(pid)
		if err != nil {
			continue
		}
		ticks += s1.CPUTicks - s0.CPUTicks
		wall = max(wall, s1.At.Sub(s0.At))
		u.RSSMiB += float64(s1.RSSBytes) / (1 << 20)
		u.PeakMiB += float64(s1.HWMBytes) / (1 << 20)
	}
	if wall > 0 {
		u.CPUCores = float64(ticks) / clockTicks / wall.Seconds()
	}
	return u
}

// raiseFileLimit lifts this process's open-file limit (inherited by the
// children it starts) to want, or as far as it is allowed, and returns the
// soft limit in force.
func raiseFileLimit(want uint64) uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	if lim.Cur >= want {
		return lim.Cur
	}
	// Raising the hard limit needs privilege; try, then settle for it.
	up := syscall.Rlimit{Cur: want, Max: max(lim.Max, want)}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &up) == nil {
		return want
	}
	up = syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &up) == nil {
		return lim.Max
	}
	return lim.Cur
}
