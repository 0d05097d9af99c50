package installtest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Running the script again with nothing new changes nothing: no download of
// the agent, no file rewritten, no restart. Settings given once are
// remembered, so the re-run needs no flags.
func TestRerunChangesNothing(t *testing.T) {
	for _, p := range []platform{linuxRoot, linuxUser, macUser} {
		t.Run(p.name, func(t *testing.T) {
			s := newSandbox(t, p)
			s.publish("latest/download", "v1.0.0", "ok", "")
			s.ollamaRunning(model)
			s.install()
			l := s.layout()
			files := []string{l.bin, l.env, l.key, l.agentUnit}
			before := map[string]time.Time{}
			for _, f := range files {
				fi, err := os.Stat(f)
				must(t, err)
				before[f] = fi.ModTime()
			}
			time.Sleep(20 * time.Millisecond)
			s.resetCalls()

			for _, args := range [][]string{nil, {"--gateway", gateway, "--node-id", nodeID, "--key", nodeKey, "--model", model}} {
				out, code := s.run(args...)
				if code != 0 {
					t.Fatalf("re-run %v: exit %d:\n%s", args, code, out)
				}
				wantLines(t, out, "ok: nothing changed: agent v1.0.0 runs with these settings already")
			}
			for _, f := range files {
				fi, err := os.Stat(f)
				must(t, err)
				if !fi.ModTime().Equal(before[f]) {
					t.Errorf("%s was rewritten", strings.TrimPrefix(f, s.dir))
				}
			}
			for _, c := range s.calls() {
				for _, bad := range []string{"restart", "kickstart", "bootstrap", "daemon-reload", "ollama pull", "agent v1.0.0 run", "download/" + p.asset()} {
					if strings.Contains(c, bad) {
						t.Errorf("a no-op re-run called %q", c)
					}
				}
			}
		})
	}
}

// A re-run with one setting changed rewrites that setting and restarts the
// agent, and leaves the rest (the binary, the service files) alone.
func TestRerunChangesOnlyWhatChanged(t *testing.T) {
	s := newSandbox(t, linuxRoot)
	s.publish("latest/download", "v1.0.0", "ok", "")
	s.ollamaRunning(model)
	s.install()
	l := s.layout()
	unitBefore, _ := os.Stat(l.agentUnit)
	binBefore, _ := os.Stat(l.bin)
	s.resetCalls()

	out, code := s.run("--model", "qwen3:8b", "--key", "syn_rotatedkey0_abcdefghijklmnopqrstuvwxyz012345", "--tls")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	wantLines(t, out, "pulling qwen3:8b", "node key written", "settings written", "restarting the agent", "lists node anna")
	env := s.read(l.env)
	if !strings.Contains(env, `SWITCHYARD_MODELS="qwen3:8b"`) || !strings.Contains(env, `SWITCHYARD_GATEWAY_TLS="true"`) ||
		!strings.Contains(env, `SWITCHYARD_GATEWAY="`+gateway+`"`) {
		t.Errorf("agent.env after the change:\n%s", env)
	}
	if got := s.read(l.key); got != "syn_rotatedkey0_abcdefghijklmnopqrstuvwxyz012345\n" {
		t.Errorf("key file %q", got)
	}
	unitAfter, _ := os.Stat(l.agentUnit)
	binAfter, _ := os.Stat(l.bin)
	if !unitAfter.ModTime().Equal(unitBefore.ModTime()) || !binAfter.ModTime().Equal(binBefore.ModTime()) {
		t.Errorf("the unit or the binary was rewritten")
	}
	if s.called("systemctl daemon-reload") || s.called("curl https://github.com/switchyard-ai/switchyard/releases/latest/download/switchyard-agent") {
		t.Errorf("unneeded calls:\n%s", strings.Join(s.calls(), "\n"))
	}
	if !s.called("systemctl restart switchyard-agent.service") || !s.called("ollama pull qwen3:8b") {
		t.Errorf("calls:\n%s", strings.Join(s.calls(), "\n"))
	}
}

// A newer release replaces the agent, keeps the previous one, and restarts;
// a pinned version stays pinned on later re-runs.
func TestUpgrade(t *testing.T) {
	for _, p := range []platform{linuxRoot, macUser} {
		t.Run(p.name, func(t *testing.T) {
			s := newSandbox(t, p)
			v1 := s.publish("latest/download", "v1.0.0", "ok", "")
			s.ollamaRunning(model)
			s.install()
			v2 := s.publish("latest/download", "v1.1.0", "ok", "")
			s.resetCalls()

			out, code := s.run()
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			wantLines(t, out, "agent v1.1.0 installed in place of v1.0.0 (SHA-256 matches checksums.txt)", "restarting the agent", "lists node anna")
			l := s.layout()
			if s.read(l.bin) != string(v2) {
				t.Errorf("the agent was not replaced")
			}
			if s.read(filepath.Join(filepath.Dir(l.state), "switchyard-agent.previous")) != string(v1) {
				t.Errorf("the previous agent was not kept")
			}
			if !s.called("agent v1.1.0 run") {
				t.Errorf("the new agent did not start; calls:\n%s", strings.Join(s.calls(), "\n"))
			}

			// Pin a version: later re-runs follow it, not the latest.
			v12 := s.publish("download/v1.2.0", "v1.2.0", "ok", "")
			out, code = s.run("--version", "v1.2.0")
			if code != 0 || s.read(l.bin) != string(v12) {
				t.Fatalf("pinning v1.2.0: exit %d:\n%s", code, out)
			}
			s.publish("latest/download", "v1.3.0", "ok", "")
			out, code = s.run()
			if code != 0 || !strings.Contains(out, "nothing changed: agent v1.2.0") {
				t.Errorf("a re-run after pinning v1.2.0: exit %d:\n%s", code, out)
			}
		})
	}
}

// A new agent that does not start is replaced by the previous one, which
// starts again; the run says so and fails.
func TestRollback(t *testing.T) {
	for _, p := range []platform{linuxRoot, linuxUser, macUser} {
		t.Run(p.name, func(t *testing.T) {
			s := newSandbox(t, p)
			v1 := s.publish("latest/download", "v1.0.0", "ok", "")
			s.ollamaRunning(model)
			s.install()
			s.publish("latest/download", "v2.0.0", "crash", "")
			s.resetCalls()

			out, code := s.run()
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			wantLines(t, out,
				"agent v2.0.0 installed in place of v1.0.0",
				"problem: the new agent (v2.0.0) did not start:",
				"panic: v2.0.0 cannot start",
				"putting back the previous agent (v1.0.0)",
				"the previous agent (v1.0.0) runs again and the gateway lists the node",
			)
			if s.read(s.layout().bin) != string(v1) {
				t.Errorf("the previous agent is not back in place")
			}
			// v2 ran, then v1 again.
			calls := s.calls()
			if v2, v1 := slices.Index(calls, "agent v2.0.0 run"), slices.Index(calls, "agent v1.0.0 run"); v2 < 0 || v1 < v2 {
				t.Errorf("calls:\n%s", strings.Join(calls, "\n"))
			}
		})
	}
}

// A download that does not match the published checksum is refused before
// anything is installed, Ollama included.
func TestChecksumMismatch(t *testing.T) {
	s := newSandbox(t, linuxRoot)
	s.publish("latest/download", "v1.0.0", "ok", strings.Repeat("ab", 32))
	s.ollamaInstaller()
	out, code := s.run("--gateway", gateway, "--node-id", nodeID, "--key", nodeKey, "--model", model)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	wantLines(t, out, "but the published checksum is "+strings.Repeat("ab", 32)+": it was not installed", "nothing was changed")
	l := s.layout()
	for _, f := range []string{l.bin, l.env, l.key, l.agentUnit} {
		if s.exists(f) {
			t.Errorf("%s exists after a refused download", strings.TrimPrefix(f, s.dir))
		}
	}
	if s.called("curl https://ollama.com") || s.called("ollama") {
		t.Errorf("Ollama was touched:\n%s", strings.Join(s.calls(), "\n"))
	}
}

// --agent-bin installs a local binary: checked against a checksums.txt
// beside it when there is one.
func TestAgentBin(t *testing.T) {
	s := newSandbox(t, linuxRoot)
	s.ollamaRunning(model)
	local := filepath.Join(s.dir, "build", "switchyard-agent")
	s.write(local, agentScript("v9.9.9-dev", "ok", "linux/amd64"), 0o644)

	out := s.install("--agent-bin", local)
	wantLines(t, out, "agent v9.9.9-dev installed", "not verified")
	if mode(t, local) != 0o644 {
		t.Errorf("the script changed the given file's mode")
	}
	if s.called("curl https://github.com") {
		t.Errorf("downloaded despite --agent-bin")
	}

	// A checksums.txt beside it that disagrees stops the run.
	s.write(local, agentScript("v9.9.10-dev", "ok", "linux/amd64"), 0o755)
	s.write(filepath.Join(filepath.Dir(local), "checksums.txt"), strings.Repeat("0", 64)+"  switchyard-agent\n", 0o644)
	out, code := s.run("--agent-bin", local)
	if code != 1 || !strings.Contains(out, "published checksum") {
		t.Errorf("exit %d:\n%s", code, out)
	}
	// A later run without --agent-bin keeps the installed binary.
	out, code = s.run()
	if code != 0 || !strings.Contains(out, "nothing changed: agent v9.9.9-dev") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

// When the gateway does not list the node, the run explains why with the
// agent's log and its doctor, and fails.
func TestInstallExplainsWhyTheNodeIsNotListed(t *testing.T) {
	for _, tc := range []struct {
		name, behaviour string
		want            []string
	}{
		{"key refused", "refused", []string{
			"problem: the gateway at " + gateway + " refuses this node's key",
			`this key belongs to node \"other\"`,
			"the agent's doctor says:",
			"    problem: the gateway refuses this key",
		}},
		{"gateway unreachable", "unreachable", []string{
			"problem: the gateway has not listed node anna after 0s",
			"the gateway is not reachable; heartbeats will be retried",
			"    problem: the gateway refuses this key",
			"the agent keeps trying; check again with: install-node.sh --doctor",
		}},
		{"agent does not start", "crash", []string{
			"problem: the agent did not stay up",
			"panic: v1.0.0 cannot start",
			"hint: its log: journalctl -u switchyard-agent.service",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSandbox(t, linuxRoot)
			s.publish("latest/download", "v1.0.0", tc.behaviour, "")
			s.ollamaRunning(model)
			s.write(filepath.Join(s.state, "doctor-output"), "ok: the engine (ollama) answers\nproblem: the gateway refuses this key: this key belongs to node \"other\", not \"anna\"\n1 problem(s) found\n", 0o644)
			out, code := s.run("--gateway", gateway, "--node-id", nodeID, "--key", nodeKey, "--model", model, "--wait", "0")
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			wantLines(t, out, tc.want...)
			if strings.Contains(out, "1 problem(s) found") {
				t.Errorf("the agent doctor's own summary was passed through")
			}
		})
	}
}

// --uninstall removes what the script installed and nothing else: the
// agent, its settings, key, services and user, the models it pulled, and
// Ollama when it installed it, unless --keep-engine.
func TestUninstall(t *testing.T) {
	for _, tc := range []struct {
		name        string
		p           platform
		ollamaByUs  bool
		keepEngine  bool
		wantCalls   []string
		wantGone    []string // relative to the sandbox
		wantKept    []string
		wantOutputs []string
	}{
		{
			name: "linux root, Ollama installed by the script", p: linuxRoot, ollamaByUs: true,
			wantCalls: []string{"ollama rm " + model, "systemctl disable --now switchyard-agent.service", "systemctl disable --now switchyard-agent-awake.service",
				"systemctl disable --now ollama.service", "userdel switchyard"},
			wantGone:    []string{"late/ollama", "root/etc/systemd/system/ollama.service"},
			wantOutputs: []string{"removed the model " + model, "removed Ollama and its models", "removed the system user switchyard"},
		},
		{
			name: "linux user, Ollama there before", p: linuxUser,
			wantCalls: []string{"ollama rm " + model, "systemctl --user disable --now switchyard-agent.service"},
			wantKept:  []string{"late/ollama"},
		},
		{
			name: "macOS, Ollama installed by the script", p: macUser, ollamaByUs: true,
			wantCalls:   []string{"ollama rm " + model, "launchctl bootout gui/501/ai.switchyard.agent", "launchctl bootout gui/501/ai.switchyard.ollama"},
			wantGone:    []string{"home/Applications/Ollama.app", "home/Library/LaunchAgents/ai.switchyard.ollama.plist", "home/Library/Logs/switchyard-agent.log"},
			wantOutputs: []string{"removed Ollama (~/Applications/Ollama.app"},
		},
		{
			name: "macOS, --keep-engine", p: macUser, ollamaByUs: true, keepEngine: true,
			wantCalls:   []string{"launchctl bootout gui/501/ai.switchyard.agent"},
			wantKept:    []string{"home/Applications/Ollama.app/Contents/Resources/ollama", "home/Library/LaunchAgents/ai.switchyard.ollama.plist"},
			wantOutputs: []string{"the engine and the models stay (--keep-engine)"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSandbox(t, tc.p)
			s.publish("latest/download", "v1.0.0", "ok", "")
			switch {
			case !tc.ollamaByUs:
				s.ollamaRunning()
			case tc.p.kernel == "Linux":
				s.ollamaInstaller()
			default:
				s.write(filepath.Join(s.web, "https/ollama.com:443/download/Ollama-darwin.zip"), "PK", 0o644)
			}
			s.install()
			s.resetCalls()

			args := []string{"--uninstall"}
			if tc.keepEngine {
				args = append(args, "--keep-engine")
			}
			out, code := s.run(args...)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			wantLines(t, out, append(tc.wantOutputs, "removed the agent, its settings and its key", `RevokeNodeKey {"node_id":"anna"}`)...)
			for _, c := range tc.wantCalls {
				if !s.called(c) {
					t.Errorf("no call %q; calls:\n%s", c, strings.Join(s.calls(), "\n"))
				}
			}
			for _, f := range tc.wantGone {
				if s.exists(filepath.Join(s.dir, f)) {
					t.Errorf("%s is still there", f)
				}
			}
			for _, f := range tc.wantKept {
				if !s.exists(filepath.Join(s.dir, f)) {
					t.Errorf("%s was removed", f)
				}
			}
			for _, f := range s.leftovers() {
				if strings.Contains(f, "switchyard-agent") || strings.Contains(f, "ai.switchyard.agent") {
					t.Errorf("left behind: %s", f)
				}
			}
			if tc.keepEngine {
				if s.called("ollama rm") {
					t.Errorf("--keep-engine removed a model")
				}
			}

			out, code = s.run("--uninstall")
			if code != 0 || !strings.Contains(out, "nothing to remove") {
				t.Errorf("a second uninstall: exit %d:\n%s", code, out)
			}
		})
	}
}
