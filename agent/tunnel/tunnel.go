// Package tunnel exposes the engine front through a Cloudflare quick tunnel
// (`cloudflared tunnel --url …`), for a node with no address the gateway can
// reach: a laptop behind NAT, a home GPU box.
//
// cloudflared prints the tunnel's https://….trycloudflare.com address inside
// a banner in its log; that is the only way a quick tunnel tells it, so the
// log is read until the address appears. The process lives as long as the
// agent: Stop ends it, and Done tells when it ended on its own, since the
// advertised address is dead from then on.
package tunnel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultTimeout is how long Start waits for the tunnel's address.
const DefaultTimeout = 30 * time.Second

// keptLines is how much of cloudflared's log is kept to explain a failure.
const keptLines = 12

var (
	// ErrNotInstalled means no cloudflared was found on PATH.
	ErrNotInstalled = errors.New("cloudflared is not installed (not found on PATH): install it, or run without --expose")
	// ErrNoURL means cloudflared ran but printed no tunnel address in time.
	ErrNoURL = errors.New("cloudflared printed no https://….trycloudflare.com address")
)

// Options configure Start.
type Options struct {
	// Binary is the cloudflared to run, a name looked up on PATH or a path;
	// empty means "cloudflared".
	Binary string
	// LocalURL is what the tunnel forwards to: the front's local address,
	// such as http://127.0.0.1:8081.
	LocalURL string
	// Timeout bounds the wait for the address; 0 means DefaultTimeout.
	Timeout time.Duration
	Logger  *slog.Logger
}

// Tunnel is a running cloudflared quick tunnel.
type Tunnel struct {
	url    string
	cmd    *exec.Cmd
	cancel context.CancelFunc
	done   chan struct{}
	logger *slog.Logger

	mu      sync.Mutex
	err     error
	stopped bool
}

// Start runs cloudflared and returns once it has printed the tunnel's
// address. When it cannot — cloudflared missing, exiting, or silent for
// Timeout — the process is stopped and the error says why in plain words,
// with the end of cloudflared's log.
func Start(ctx context.Context, o Options) (*Tunnel, error) {
	if o.Binary == "" {
		o.Binary = "cloudflared"
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	path, err := exec.LookPath(o.Binary)
	if err != nil {
		return nil, ErrNotInstalled
	}
	// The process outlives Start's ctx: it ends only with Stop.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cmd := exec.CommandContext(runCtx, path, "tunnel", "--no-autoupdate", "--url", o.LocalURL)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	// A cloudflared that ignores SIGTERM is killed after this.
	cmd.WaitDelay = 5 * time.Second
	out := &logWriter{found: make(chan string, 1), pattern: regexp.MustCompile(quickTunnelPattern), logger: o.Logger}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("starting cloudflared: %w", err)
	}
	t := &Tunnel{cmd: cmd, cancel: cancel, done: make(chan struct{}), logger: o.Logger}
	go func() {
		err := cmd.Wait()
		t.mu.Lock()
		t.err = err
		t.mu.Unlock()
		close(t.done)
	}()

	timer := time.NewTimer(o.Timeout)
	defer timer.Stop()
	select {
	case t.url = <-out.found:
		o.Logger.Info("cloudflared quick tunnel is up", "url", t.url, "forwards_to", o.LocalURL)
		return t, nil
	case <-t.done:
		// Even had it printed an address, that tunnel is gone with it.
		t.cancel()
		return nil, fmt.Errorf("%w: cloudflared exited (%v) before printing it%s", ErrNoURL, t.Err(), out.tail())
	case <-timer.C:
		_ = t.Stop()
		return nil, fmt.Errorf("%w within %s%s", ErrNoURL, o.Timeout, out.tail())
	case <-ctx.Done():
		_ = t.Stop()
		return nil, ctx.Err()
	}
}

// URL is the tunnel's public address, https://….trycloudflare.com.
func (t *Tunnel) URL() string { return t.url }

// Done is closed when cloudflared has exited, stopped or not.
func (t *Tunnel) Done() <-chan struct{} { return t.done }

// Err is how cloudflared exited, once Done is closed.
func (t *Tunnel) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Stop ends cloudflared (SIGTERM, then a kill after 5 s) and waits for it.
func (t *Tunnel) Stop() error {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
	t.cancel()
	<-t.done
	return nil
}

// Stopped reports whether Stop was called, to tell a stop from a crash.
func (t *Tunnel) Stopped() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stopped
}

const quickTunnelPattern = `https://([a-z0-9]+(?:-[a-z0-9]+)*)\.trycloudflare\.com\b`

// quickTunnelURL matches a quick tunnel's address. Quick tunnels are named by
// random words joined by hyphens; api.trycloudflare.com, which appears in
// cloudflared's own error lines, is the service that hands them out.
func quickTunnelURL(re *regexp.Regexp, line string) string {
	for _, m := range re.FindAllStringSubmatch(line, -1) {
		if m[1] != "api" {
			return m[0]
		}
	}
	return ""
}

// logWriter receives cloudflared's stdout and stderr (exec calls Write from
// one goroutine at a time when both are the same writer). It looks for the
// address, keeps the last lines for error messages and logs them at debug.
type logWriter struct {
	found   chan string
	pattern *regexp.Regexp
	logger  *slog.Logger

	mu      sync.Mutex
	partial []byte
	lines   []string
	sent    bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.line(strings.TrimRight(string(w.partial[:i]), "\r"))
		w.partial = w.partial[i+1:]
	}
	// A line without an end this long is not a log line; keep memory bounded.
	if len(w.partial) > 64<<10 {
		w.line(string(w.partial))
		w.partial = nil
	}
	return len(p), nil
}

func (w *logWriter) line(l string) {
	if strings.TrimSpace(l) == "" {
		return
	}
	w.lines = append(w.lines, l)
	if len(w.lines) > keptLines {
		w.lines = w.lines[len(w.lines)-keptLines:]
	}
	if strings.Contains(l, " ERR ") {
		w.logger.Warn("cloudflared: " + l)
	} else {
		w.logger.Debug("cloudflared: " + l)
	}
	if !w.sent {
		if u := quickTunnelURL(w.pattern, l); u != "" {
			w.sent = true
			w.found <- u
		}
	}
}

// tail is the end of cloudflared's log, indented, for an error message.
func (w *logWriter) tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.lines) == 0 {
		return " (it printed nothing)"
	}
	return "; its last lines:\n    " + strings.Join(w.lines, "\n    ")
}
