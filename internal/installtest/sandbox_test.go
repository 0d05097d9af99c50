package installtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// realTools are the only real commands the script and the stand-ins find on
// PATH; everything that could change the machine is a stand-in.
var realTools = []string{
	"awk", "basename", "cat", "chmod", "cmp", "cp", "date", "dirname", "env", "grep",
	"head", "mkdir", "mktemp", "mv", "rm", "sed", "sh", "sha256sum", "sleep", "sort",
	"tail", "touch", "tr", "wc",
}

type platform struct {
	name    string
	kernel  string // uname -s
	machine string // uname -m
	uid     int
}

var (
	linuxRoot = platform{"linux-root", "Linux", "x86_64", 0}
	linuxUser = platform{"linux-user", "Linux", "aarch64", 1000}
	macUser   = platform{"macos", "Darwin", "arm64", 501}
)

// asset is the release file name of the agent for the platform.
func (p platform) asset() string {
	arch := map[string]string{"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}[p.machine]
	return "switchyard-agent-" + strings.ToLower(p.kernel) + "-" + arch
}

// sandbox is one throwaway machine: a home, a root for the system-wide
// paths, the stand-ins, the stand-ins' state and the web the curl stand-in
// serves.
type sandbox struct {
	t     *testing.T
	p     platform
	shell string
	dir   string
	home  string
	root  string
	bin   string // stand-ins
	kit   string // stand-ins not on PATH
	late  string // on PATH too: where the Ollama installer stand-in puts ollama
	state string
	web   string
	env   []string
}

const (
	gateway  = "gw.example.com:9090"
	nodeID   = "anna"
	nodeKey  = "syn_abcdefghijkl_0123456789abcdefghijklmnopqrstuv"
	model    = "gemma4:26b-a4b-it-qat"
	releases = "https/github.com:443/switchyard-ai/switchyard/releases"
)

func newSandbox(t *testing.T, p platform) *sandbox {
	t.Helper()
	dir := t.TempDir()
	s := &sandbox{
		t: t, p: p, shell: "sh", dir: dir,
		home: filepath.Join(dir, "home"), root: filepath.Join(dir, "root"),
		bin: filepath.Join(dir, "bin"), kit: filepath.Join(dir, "kit"), late: filepath.Join(dir, "late"),
		state: filepath.Join(dir, "state"), web: filepath.Join(dir, "web"),
	}
	sys := filepath.Join(dir, "sys")
	for _, d := range []string{s.home, s.root, s.bin, s.kit, s.late, s.state, s.web, sys, filepath.Join(dir, "tmp")} {
		must(t, os.MkdirAll(d, 0o755))
	}
	for _, name := range realTools {
		path, err := exec.LookPath(name)
		if err != nil {
			t.Fatalf("the tests need %s: %v", name, err)
		}
		must(t, os.Symlink(path, filepath.Join(sys, name)))
	}
	standins, err := os.ReadDir("testdata/standins")
	must(t, err)
	for _, e := range standins {
		data, err := os.ReadFile(filepath.Join("testdata/standins", e.Name()))
		must(t, err)
		// ollama is on PATH only once it is installed (see
		// ollamaRunning and ollamaInstaller).
		dest := s.bin
		if e.Name() == "ollama" {
			dest = s.kit
		}
		must(t, os.WriteFile(filepath.Join(dest, e.Name()), data, 0o755))
	}
	s.env = []string{
		"PATH=" + s.bin + ":" + s.late + ":" + sys,
		"HOME=" + s.home,
		"USER=tester",
		"LC_ALL=C",
		"TMPDIR=" + filepath.Join(dir, "tmp"),
		"SWITCHYARD_INSTALL_ROOT=" + s.root,
		"STANDIN_STATE=" + s.state,
		"STANDIN_WEB=" + s.web,
		"STANDIN_BIN=" + s.kit,
		"STANDIN_UNAME_S=" + p.kernel,
		"STANDIN_UNAME_M=" + p.machine,
		fmt.Sprintf("STANDIN_UID=%d", p.uid),
		"STANDIN_USER=tester",
	}
	if p.kernel == "Darwin" {
		// macOS's /bin/sh is bash in POSIX mode: use it where it exists.
		if _, err := exec.LookPath("bash"); err == nil {
			s.shell = "bash"
		}
	}
	return s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func scriptPath(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "scripts", "install-node.sh"))
	must(t, err)
	return p
}

// run runs the script with args and returns its output and exit code.
func (s *sandbox) run(args ...string) (string, int) {
	s.t.Helper()
	return s.exec(nil, append([]string{scriptPath(s.t)}, args...)...)
}

// pipe runs the script as "curl … | sh -s -- args" does.
func (s *sandbox) pipe(args ...string) (string, int) {
	s.t.Helper()
	script, err := os.ReadFile(scriptPath(s.t))
	must(s.t, err)
	return s.exec(script, append([]string{"-s", "--"}, args...)...)
}

func (s *sandbox) exec(stdin []byte, args ...string) (string, int) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.shell, args...)
	if s.shell == "bash" {
		cmd.Args = append([]string{"bash", "--posix"}, args...)
	}
	cmd.Env = s.env
	cmd.Dir = s.home
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		s.t.Fatalf("the script ran past its time:\n%s", out)
	}
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			s.t.Fatal(err)
		}
		code = ee.ExitCode()
	}
	return string(out), code
}

// install runs a first install with the usual flags and fails the test
// unless it succeeds.
func (s *sandbox) install(extra ...string) string {
	s.t.Helper()
	out, code := s.run(append([]string{"--gateway", gateway, "--node-id", nodeID, "--key", nodeKey, "--model", model}, extra...)...)
	if code != 0 {
		s.t.Fatalf("install exited %d:\n%s", code, out)
	}
	return out
}

// calls are the commands the stand-ins were asked to run, in order.
func (s *sandbox) calls() []string {
	data, _ := os.ReadFile(filepath.Join(s.state, "calls"))
	return strings.Split(strings.TrimRight(string(data), "\n"), "\n")
}

func (s *sandbox) resetCalls() { _ = os.Remove(filepath.Join(s.state, "calls")) }

// called reports whether some call begins with prefix.
func (s *sandbox) called(prefix string) bool {
	return slices.ContainsFunc(s.calls(), func(c string) bool { return strings.HasPrefix(c, prefix) })
}

func (s *sandbox) write(path string, data string, mode os.FileMode) {
	s.t.Helper()
	must(s.t, os.MkdirAll(filepath.Dir(path), 0o755))
	must(s.t, os.WriteFile(path, []byte(data), mode))
}

func (s *sandbox) read(path string) string {
	s.t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		s.t.Fatalf("reading %s: %v", strings.TrimPrefix(path, s.dir), err)
	}
	return string(data)
}

func (s *sandbox) exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// agentScript is a stand-in agent of a version. Its run prints what the
// real agent logs in its first moments, as behaviour says: ok (a heartbeat
// accepted), crash (exits 1 at once), refused (the key refused),
// unreachable (no gateway); $STANDIN_STATE/agent-behaviour overrides that.
func agentScript(version, behaviour, platform string) string {
	return strings.NewReplacer("VERSION", version, "BEHAVIOUR", behaviour, "PLATFORM", platform).Replace(`#!/bin/sh
# stand-in switchyard-agent VERSION
case ${1:-} in
version) echo "switchyard-agent VERSION go1.26.8 PLATFORM" ;;
run)
	echo "agent VERSION run" >>"$STANDIN_STATE/calls"
	env | grep '^SWITCHYARD_' | sort >"$STANDIN_STATE/agent-env"
	if [ ! -r "${SWITCHYARD_NODE_KEY_FILE:-/nonexistent}" ]; then
		echo '{"level":"ERROR","msg":"bad configuration: --key-file (SWITCHYARD_NODE_KEY_FILE): cannot read it"}' >&2
		exit 2
	fi
	cp "$SWITCHYARD_NODE_KEY_FILE" "$STANDIN_STATE/agent-key"
	behaviour=BEHAVIOUR
	if [ -f "$STANDIN_STATE/agent-behaviour" ]; then behaviour=$(cat "$STANDIN_STATE/agent-behaviour"); fi
	if [ "$behaviour" = crash ]; then
		echo 'panic: VERSION cannot start' >&2
		exit 1
	fi
	echo '{"level":"INFO","msg":"switchyard-agent running","version":"VERSION"}' >&2
	case $behaviour in
	ok) echo '{"level":"INFO","msg":"the gateway accepted this node'"'"'s heartbeat","node_id":"'"$SWITCHYARD_NODE_ID"'"}' >&2 ;;
	refused) echo '{"level":"ERROR","msg":"the gateway refused this node'"'"'s key: this key belongs to node \"other\", not \"anna\"","code":"PermissionDenied"}' >&2 ;;
	unreachable) echo '{"level":"WARN","msg":"the gateway is not reachable; heartbeats will be retried until it is","code":"Unavailable"}' >&2 ;;
	esac
	;;
doctor)
	echo "agent VERSION doctor" >>"$STANDIN_STATE/calls"
	if [ -f "$STANDIN_STATE/doctor-output" ]; then
		cat "$STANDIN_STATE/doctor-output"
		exit 1
	fi
	echo "ok: the engine ($SWITCHYARD_ENGINE) answers at $SWITCHYARD_ENGINE_URL"
	echo "ok: the gateway at $SWITCHYARD_GATEWAY accepts this key for node \"$SWITCHYARD_NODE_ID\""
	echo "all checks passed"
	;;
*) exit 2 ;;
esac
`)
}

// publish puts an agent for the sandbox's platform into a release folder
// (relative to the releases path: "latest/download" or "download/v1.2.0"),
// with a checksums.txt in the release's format. sum, when not empty,
// replaces the agent's true SHA-256 there.
func (s *sandbox) publish(folder, version, behaviour, sum string) []byte {
	s.t.Helper()
	dir := filepath.Join(s.web, releases, folder)
	arch := strings.TrimPrefix(s.p.asset(), "switchyard-agent-")
	agent := []byte(agentScript(version, behaviour, strings.Replace(arch, "-", "/", 1)))
	s.write(filepath.Join(dir, s.p.asset()), string(agent), 0o644)
	if sum == "" {
		h := sha256.Sum256(agent)
		sum = hex.EncodeToString(h[:])
	}
	var sums strings.Builder
	for _, other := range []string{"switchyard-agent-darwin-arm64", "switchyard-agent-linux-amd64", "switchyard-agent-linux-arm64", "switchyard-linux-amd64"} {
		if other == s.p.asset() {
			fmt.Fprintf(&sums, "%s  %s\n", sum, other)
		} else {
			fmt.Fprintf(&sums, "%064x  %s\n", len(other), other)
		}
	}
	s.write(filepath.Join(dir, "checksums.txt"), sums.String(), 0o644)
	return agent
}

// ollamaRunning makes Ollama installed (on PATH) and answering, with models
// already pulled.
func (s *sandbox) ollamaRunning(models ...string) {
	s.t.Helper()
	s.write(filepath.Join(s.late, "ollama"), s.read(filepath.Join(s.kit, "ollama")), 0o755)
	s.write(filepath.Join(s.web, "http/127.0.0.1:11434/api/version"), `{"version":"0.12.6"}`, 0o644)
	s.write(filepath.Join(s.state, "ollama-models"), strings.Join(append(models, ""), "\n"), 0o644)
}

// ollamaInstaller serves a stand-in of Ollama's Linux installer: it puts
// ollama on PATH and starts Ollama's own systemd unit, as the real one does.
func (s *sandbox) ollamaInstaller() {
	s.write(filepath.Join(s.web, "https/ollama.com:443/install.sh"), `#!/bin/sh
echo ">>> Installing ollama (stand-in)"
cp "$STANDIN_BIN/ollama" "`+s.late+`/ollama"
mkdir -p "$SWITCHYARD_INSTALL_ROOT/etc/systemd/system"
printf '[Service]\nExecStart=%s serve\n' "`+s.late+`/ollama" >"$SWITCHYARD_INSTALL_ROOT/etc/systemd/system/ollama.service"
systemctl daemon-reload
systemctl enable --now ollama
`, 0o644)
}

// Paths of an install, by platform.
type layout struct {
	bin, env, key, state, unitDir, agentUnit, awakeUnit, ollamaUnit, agentLog string
}

func (s *sandbox) layout() layout {
	switch {
	case s.p.kernel == "Darwin":
		base := filepath.Join(s.home, "Library/Application Support/switchyard-agent")
		return layout{
			bin: filepath.Join(base, "switchyard-agent"), env: filepath.Join(base, "agent.env"),
			key: filepath.Join(base, "node-key"), state: filepath.Join(base, "install-state"),
			unitDir:    filepath.Join(s.home, "Library/LaunchAgents"),
			agentUnit:  filepath.Join(s.home, "Library/LaunchAgents/ai.switchyard.agent.plist"),
			ollamaUnit: filepath.Join(s.home, "Library/LaunchAgents/ai.switchyard.ollama.plist"),
			agentLog:   filepath.Join(s.home, "Library/Logs/switchyard-agent.log"),
		}
	case s.p.uid == 0:
		units := filepath.Join(s.root, "etc/systemd/system")
		return layout{
			bin: filepath.Join(s.root, "usr/local/bin/switchyard-agent"), env: filepath.Join(s.root, "etc/switchyard-agent/agent.env"),
			key: filepath.Join(s.root, "etc/switchyard-agent/node-key"), state: filepath.Join(s.root, "var/lib/switchyard-agent/install-state"),
			unitDir: units, agentUnit: filepath.Join(units, "switchyard-agent.service"),
			awakeUnit: filepath.Join(units, "switchyard-agent-awake.service"), ollamaUnit: filepath.Join(units, "switchyard-ollama.service"),
		}
	default:
		units := filepath.Join(s.home, ".config/systemd/user")
		return layout{
			bin: filepath.Join(s.home, ".local/bin/switchyard-agent"), env: filepath.Join(s.home, ".config/switchyard-agent/agent.env"),
			key: filepath.Join(s.home, ".config/switchyard-agent/node-key"), state: filepath.Join(s.home, ".local/share/switchyard-agent/install-state"),
			unitDir: units, agentUnit: filepath.Join(units, "switchyard-agent.service"),
			awakeUnit: filepath.Join(units, "switchyard-agent-awake.service"), ollamaUnit: filepath.Join(units, "switchyard-ollama.service"),
		}
	}
}

// filesWith lists the files under the sandbox's home and root whose content
// contains needle, skipping those in except.
func (s *sandbox) filesWith(needle string, except ...string) []string {
	var found []string
	for _, top := range []string{s.home, s.root, s.state} {
		_ = filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || slices.Contains(except, path) {
				return nil
			}
			if data, err := os.ReadFile(path); err == nil && bytes.Contains(data, []byte(needle)) {
				found = append(found, strings.TrimPrefix(path, s.dir))
			}
			return nil
		})
	}
	return found
}

// leftovers lists what the install left under the home and the root,
// beside what was there before (the folders themselves, the stand-in
// Ollama's files).
func (s *sandbox) leftovers() []string {
	var left []string
	for _, top := range []string{s.home, s.root} {
		_ = filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				left = append(left, strings.TrimPrefix(path, s.dir))
			}
			return nil
		})
	}
	return left
}

func wantLines(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("the output lacks %q:\n%s", w, out)
		}
	}
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	must(t, err)
	return fi.Mode().Perm()
}
