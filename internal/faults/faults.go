// Package faults starts private Redis and PostgreSQL servers for tests that
// break them on purpose: stopped, killed, paused (SIGSTOP) and resumed, or
// restarted on the same port while a gateway uses them. Each server is a
// child process of the test on a free loopback port, with its data in a
// temporary folder, so that a test never touches the machine's shared
// services. Where the server binaries are missing the test skips, or fails
// with CI=true (testenv.Unavailable).
package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/switchyard-ai/switchyard/internal/testenv"
)

// Server is one private server process. Its port stays the same across
// Stop/Kill and Start, so a client configured with URL reconnects to the
// restarted server as it would to a real one coming back.
type Server struct {
	t     testing.TB
	name  string
	port  int
	argv  []string
	cred  *syscall.Credential // nil: run as the test's own user
	ready func(ctx context.Context) error
	url   string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	out    *logBuffer
	paused bool
}

// URL is how a client reaches the server ("redis://…" or "postgres://…").
func (s *Server) URL() string { return s.url }

// Addr is the server's "127.0.0.1:port".
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Running reports whether the process runs (paused counts as running).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked()
}

func (s *Server) runningLocked() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Start starts the server (again) on its port and waits until it answers.
// It fails the test if the server does not come up within 30 s.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	if s.runningLocked() {
		s.mu.Unlock()
		s.t.Fatalf("%s: Start while it runs", s.name)
	}
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	s.out.mark()
	cmd.Stdout, cmd.Stderr = s.out, s.out
	cmd.SysProcAttr = procAttr(s.cred)
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		s.t.Fatalf("%s: start: %v", s.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done, s.paused = cmd, done, false
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	for ctx.Err() == nil {
		select {
		case <-done:
			s.t.Fatalf("%s exited at start-up:\n%s", s.name, s.out.since())
		default:
		}
		actx, acancel := context.WithTimeout(ctx, time.Second)
		err = s.ready(actx)
		acancel()
		if err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("%s did not answer within 30 s: %v\n%s", s.name, err, s.out.since())
}

// Stop shuts the server down the way its operator would (Redis: SIGTERM;
// PostgreSQL: fast shutdown, SIGINT, which disconnects clients) and waits
// for it to exit.
func (s *Server) Stop() {
	s.t.Helper()
	sig := syscall.SIGTERM
	if strings.HasPrefix(s.name, "postgres") {
		sig = syscall.SIGINT
	}
	s.signalAndWait(sig)
}

// Kill ends the server and every process it started with SIGKILL, as a
// crash or an OOM kill would.
func (s *Server) Kill() {
	s.t.Helper()
	s.signalAndWait(syscall.SIGKILL)
}

// Restart stops the server and starts it again on the same port.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.Start()
}

// Pause freezes the server and every process below it with SIGSTOP:
// connections stay open and new ones are even accepted by the kernel, but
// nothing answers, as with a hung server or a network black hole.
func (s *Server) Pause() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		s.t.Fatalf("%s: Pause while it does not run", s.name)
	}
	pid := s.cmd.Process.Pid
	// The server first, so that it starts no process while the others are
	// being stopped.
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		s.t.Fatalf("%s: SIGSTOP: %v", s.name, err)
	}
	for _, c := range descendants(pid) {
		_ = syscall.Kill(c, syscall.SIGSTOP)
	}
	s.paused = true
}

// Resume undoes Pause with SIGCONT.
func (s *Server) Resume() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		s.t.Fatalf("%s: Resume while it does not run", s.name)
	}
	pid := s.cmd.Process.Pid
	for _, c := range descendants(pid) {
		_ = syscall.Kill(c, syscall.SIGCONT)
	}
	if err := syscall.Kill(-pid, syscall.SIGCONT); err != nil {
		s.t.Fatalf("%s: SIGCONT: %v", s.name, err)
	}
	s.paused = false
}

// Output is what the server printed since it was last started.
func (s *Server) Output() string { return s.out.since() }

func (s *Server) signalAndWait(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	if !s.runningLocked() {
		s.mu.Unlock()
		return
	}
	pid, done, paused := s.cmd.Process.Pid, s.done, s.paused
	s.mu.Unlock()
	// Listed before the server goes: its orphans get another parent.
	children := descendants(pid)
	if sig == syscall.SIGKILL {
		// Everything at once, as a crash would: no orphan is left holding
		// the port or PostgreSQL's shared memory.
		_ = syscall.Kill(-pid, sig)
		for _, c := range children {
			_ = syscall.Kill(c, sig)
		}
	} else {
		_ = syscall.Kill(pid, sig)
	}
	if paused {
		// A stopped process cannot act on the signal.
		for _, c := range children {
			_ = syscall.Kill(c, syscall.SIGCONT)
		}
		_ = syscall.Kill(-pid, syscall.SIGCONT)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-done
		s.t.Errorf("%s did not exit within 30 s of %v; killed", s.name, sig)
	}
	// Wait for the children to be gone too, so that a restart finds the
	// port and the shared memory free.
	for _, c := range append(children, -pid) {
		for i := 0; i < 200 && syscall.Kill(c, 0) == nil && !zombie(c); i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
	s.mu.Lock()
	s.paused = false
	s.mu.Unlock()
}

// cleanup ends the server whatever its state.
func (s *Server) cleanup() {
	s.mu.Lock()
	running := s.runningLocked()
	var pid int
	var done chan struct{}
	if running {
		pid, done = s.cmd.Process.Pid, s.done
	}
	s.mu.Unlock()
	if !running {
		return
	}
	children := descendants(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(-pid, syscall.SIGCONT)
	for _, c := range children {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// freePort returns a loopback port nobody listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	_, p, err := net.SplitHostPort(testenv.Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// Redis starts a private redis-server with no persistence on a free
// loopback port and stops it when the test ends.
func Redis(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Unavailable(t, "redis-server is not installed: %v", err)
	}
	port := freePort(t)
	s := &Server{
		t:    t,
		name: "redis-server",
		port: port,
		argv: []string{bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--protected-mode", "no", "--dir", t.TempDir(), "--loglevel", "warning"},
		url: fmt.Sprintf("redis://127.0.0.1:%d/0", port),
		out: &logBuffer{},
	}
	s.ready = func(ctx context.Context) error {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second})
		defer c.Close()
		return c.Ping(ctx).Err()
	}
	t.Cleanup(s.cleanup)
	s.Start()
	return s
}

// Client returns a go-redis client on a private Redis, closed when the test
// ends, for looking at what the gateway stored.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// PostgresOptions tune Postgres.
type PostgresOptions struct {
	// NotStarted leaves the cluster initialised but stopped: Start it when
	// the test wants the database to appear.
	NotStarted bool
	// MaxConnections is the server's max_connections (default 100).
	MaxConnections int
}

// Postgres initialises a private PostgreSQL cluster (trust authentication,
// superuser "postgres", no fsync) in a temporary folder, starts it on a
// free loopback port, and removes it when the test ends. URL names the
// "postgres" database.
//
// initdb refuses to run as root, so when the test runs as root the cluster
// belongs to the "postgres" OS user and both initdb and the server run as
// that user.
func Postgres(t testing.TB, o PostgresOptions) *Server {
	t.Helper()
	bindir, err := postgresBinDir()
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL server binaries not found: %v", err)
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred, err = lookupCredential("postgres")
		if err != nil {
			testenv.Unavailable(t, "running as root, and no \"postgres\" user to run PostgreSQL as: %v", err)
		}
	}
	// Not t.TempDir: its parents are private to the test's user, and the
	// server may run as another one.
	root, err := os.MkdirTemp("", "switchyard-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	if cred != nil {
		if err := os.Chown(root, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(root, "data")
	initdb := exec.Command(filepath.Join(bindir, "initdb"), "-D", data, "-A", "trust", "-U", "postgres",
		"-E", "UTF8", "--locale=C", "-N")
	initdb.Env = append(os.Environ(), "LC_ALL=C")
	initdb.SysProcAttr = procAttr(cred)
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	maxConns := o.MaxConnections
	if maxConns <= 0 {
		maxConns = 100
	}
	port := freePort(t)
	s := &Server{
		t:    t,
		name: "postgres",
		port: port,
		cred: cred,
		argv: []string{filepath.Join(bindir, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", root,
			"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
			"-c", "full_page_writes=off", "-c", "max_connections=" + strconv.Itoa(maxConns),
			"-c", "shared_buffers=16MB", "-c", "log_min_messages=warning"},
		url: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		out: &logBuffer{},
	}
	s.ready = func(ctx context.Context) error {
		c, err := pgx.Connect(ctx, s.url)
		if err != nil {
			return err
		}
		defer c.Close(context.WithoutCancel(ctx))
		return c.Ping(ctx)
	}
	t.Cleanup(s.cleanup)
	if !o.NotStarted {
		s.Start()
	}
	return s
}

// postgresBinDir finds the folder holding initdb and postgres: on PATH,
// where pg_config says, or under Debian's /usr/lib/postgresql/<version>/bin
// (the newest version).
func postgresBinDir() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if dir := filepath.Dir(p); has(dir) {
			return dir, nil
		}
		// A symlink on PATH: the real folder holds both.
		if real, err := filepath.EvalSymlinks(p); err == nil && has(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); has(dir) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, dir := range dirs {
		if has(dir) {
			return dir, nil
		}
	}
	return "", errors.New("no initdb and postgres on PATH, from pg_config --bindir, or under /usr/lib/postgresql/*/bin")
}

func pgVersion(bindir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(bindir)), 64)
	return v
}

func lookupCredential(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// logBuffer keeps a server's output, and where its current run began.
type logBuffer struct {
	mu    sync.Mutex
	b     []byte
	start int
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	if len(l.b) > 1<<20 {
		cut := len(l.b) - 1<<19
		l.b = append([]byte(nil), l.b[cut:]...)
		l.start = max(l.start-cut, 0)
	}
	return len(p), nil
}

func (l *logBuffer) mark() {
	l.mu.Lock()
	l.start = len(l.b)
	l.mu.Unlock()
}

func (l *logBuffer) since() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b[l.start:])
}
