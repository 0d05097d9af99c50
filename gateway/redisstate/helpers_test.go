package redisstate

import (
	"bufio"
	"context"
	"net"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-ai/switchyard/internal/testenv"
)

// testTimeout is the per-call timeout of tests that are not about timeouts:
// generous, so that a loaded machine does not trip the breaker and turn a
// shared-counter test into a per-replica one.
const testTimeout = 2 * time.Second

// sharedRedis returns a Redis on the shared server, configured as Open
// configures it, and a raw client to inspect keys; both use the test's
// private prefix.
func sharedRedis(t testing.TB, o Options) (*Redis, *redis.Client) {
	t.Helper()
	raw, prefix := testenv.Redis(t)
	o.Prefix = prefix
	if o.Timeout == 0 {
		o.Timeout = testTimeout
	}
	return guarded(t, testenv.RedisURL(), o, nil), raw
}

// guarded builds a Redis on url with the client set-up Open uses.
func guarded(t testing.TB, url string, o Options, dial dialFunc) *Redis {
	t.Helper()
	c, err := newClient(url, o.timeout(), dial)
	if err != nil {
		t.Fatalf("newClient(%q): %v", url, err)
	}
	r := New(c, o)
	t.Cleanup(func() { r.Close() })
	return r
}

// closedAddr returns a loopback address nothing listens on, so that a dial
// there is refused at once.
func closedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// dialCounter counts the connections a client tries to open: the proof that
// a call refused by the breaker did no network I/O.
type dialCounter struct{ n atomic.Int64 }

func (d *dialCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.n.Add(1)
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

// fakeClock is an injected clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{now: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// privateRedis is a redis-server process of the test's own, which the test
// may kill, freeze (SIGSTOP) and restart on the same port without
// disturbing the shared server.
type privateRedis struct {
	t    testing.TB
	addr string
	mu   sync.Mutex
	cmd  *exec.Cmd
}

func startPrivateRedis(t testing.TB) *privateRedis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Unavailable(t, "redis-server is not installed: %v", err)
	}
	p := &privateRedis{t: t, addr: testenv.Addr(t)}
	p.start()
	t.Cleanup(p.kill)
	return p
}

func (p *privateRedis) url() string { return "redis://" + p.addr + "/0" }

func (p *privateRedis) start() {
	p.t.Helper()
	_, port, _ := net.SplitHostPort(p.addr)
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no")
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start redis-server: %v", err)
	}
	p.mu.Lock()
	p.cmd = cmd
	p.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if pingRaw(p.addr) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.t.Fatalf("private redis-server on %s did not answer PING", p.addr)
}

// pingRaw speaks RESP by hand so that readiness does not go through the
// client under test.
func pingRaw(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

func (p *privateRedis) signal(sig syscall.Signal) {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v to redis-server: %v", sig, err)
	}
}

func (p *privateRedis) freeze() { p.signal(syscall.SIGSTOP) }
func (p *privateRedis) thaw()   { p.signal(syscall.SIGCONT) }

// kill ends the process (thawing it first so that it can die) and waits.
func (p *privateRedis) kill() {
	p.mu.Lock()
	cmd := p.cmd
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// ping is a call through the guard, as every user makes them.
func ping(r *Redis) error {
	return r.Ping(context.Background())
}
