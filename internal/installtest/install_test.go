package installtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A fresh Linux machine, as root, reached the way users run the script
// (curl … | sh -s -- …): Ollama is missing and gets installed, the model
// pulled, the agent downloaded and verified, and the agent started as a
// system service under its own user with the machine kept awake.
func TestFreshLinuxInstallAsRoot(t *testing.T) {
	s := newSandbox(t, linuxRoot)
	agent := s.publish("latest/download", "v1.0.0", "ok", "")
	s.ollamaInstaller()

	out, code := s.pipe("--gateway", gateway, "--node-id", nodeID, "--key", nodeKey, "--model", model)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	wantLines(t, out,
		"linux/amd64, a systemd system service",
		"installing Ollama with its official installer",
		"pulling "+model,
		"agent v1.0.0 installed",
		"SHA-256 matches checksums.txt",
		"created the system user switchyard",
		"ok: the gateway at "+gateway+" lists node "+nodeID,
	)
	l := s.layout()
	if got := s.read(l.bin); got != string(agent) {
		t.Errorf("the installed agent is not the published one")
	}
	if m := mode(t, l.bin); m != 0o755 {
		t.Errorf("agent mode %v", m)
	}
	if got := s.read(l.key); got != nodeKey+"\n" {
		t.Errorf("key file holds %q", got)
	}
	if m := mode(t, l.key); m != 0o600 {
		t.Errorf("key file mode %v, want 0600", m)
	}
	if !s.called("chown switchyard:switchyard " + l.key) {
		t.Errorf("the key file was not given to the service user; calls:\n%s", strings.Join(s.calls(), "\n"))
	}
	env := s.read(l.env)
	for _, want := range []string{
		`SWITCHYARD_GATEWAY="` + gateway + `"`, `SWITCHYARD_GATEWAY_TLS="false"`, `SWITCHYARD_NODE_ID="anna"`,
		`SWITCHYARD_NODE_KEY_FILE="` + l.key + `"`, `SWITCHYARD_ENGINE="ollama"`,
		`SWITCHYARD_ENGINE_URL="http://127.0.0.1:11434"`, `SWITCHYARD_MODELS="` + model + `"`,
	} {
		if !strings.Contains(env, want+"\n") {
			t.Errorf("agent.env lacks %s:\n%s", want, env)
		}
	}
	unit := s.read(l.agentUnit)
	for _, want := range []string{
		"User=switchyard", "EnvironmentFile=" + l.env, "ExecStart=" + l.bin + " run",
		"Restart=on-failure", "Wants=network-online.target switchyard-agent-awake.service", "WantedBy=multi-user.target",
	} {
		if !strings.Contains(unit, want+"\n") {
			t.Errorf("the agent's unit lacks %s:\n%s", want, unit)
		}
	}
	awake := s.read(l.awakeUnit)
	for _, want := range []string{"BindsTo=switchyard-agent.service", "systemd-inhibit --what=sleep:idle", "--mode=block"} {
		if !strings.Contains(awake, want) {
			t.Errorf("the awake unit lacks %s:\n%s", want, awake)
		}
	}
	for _, call := range []string{
		"curl https://ollama.com/install.sh",
		"systemctl enable --now ollama",
		"ollama pull " + model,
		"useradd --system --user-group --no-create-home",
		"systemctl daemon-reload",
		"systemctl enable switchyard-agent.service",
		"systemctl restart switchyard-agent.service",
		"agent v1.0.0 run",
		"systemd-inhibit --what=sleep:idle --who=switchyard-agent",
		"journalctl --no-pager -o cat -u switchyard-agent.service",
	} {
		if !s.called(call) {
			t.Errorf("no call %q; calls:\n%s", call, strings.Join(s.calls(), "\n"))
		}
	}
	// The agent got the key through its file, never through the
	// environment, and the key is in no other file nor in the output.
	agentEnv := s.read(filepath.Join(s.state, "agent-env"))
	if strings.Contains(agentEnv, "SWITCHYARD_NODE_KEY=") || !strings.Contains(agentEnv, "SWITCHYARD_NODE_KEY_FILE="+l.key) {
		t.Errorf("the agent's environment:\n%s", agentEnv)
	}
	if got := s.read(filepath.Join(s.state, "agent-key")); got != nodeKey+"\n" {
		t.Errorf("the agent read the key %q", got)
	}
	if strings.Contains(out, nodeKey) {
		t.Errorf("the output shows the key")
	}
	if f := s.filesWith(nodeKey, l.key, filepath.Join(s.state, "agent-key")); len(f) > 0 {
		t.Errorf("the key is also in %v", f)
	}
}

// A Linux user that is not root gets a user service; Ollama already runs
// with the model, so nothing is installed or pulled for it.
func TestFreshLinuxUserInstall(t *testing.T) {
	s := newSandbox(t, linuxUser)
	s.publish("latest/download", "v1.0.0", "ok", "")
	s.ollamaRunning(model)

	out := s.install()
	wantLines(t, out,
		"linux/arm64, a systemd user service",
		"ok: Ollama answers at http://127.0.0.1:11434",
		"ok: Ollama has "+model,
		"ok: the gateway at "+gateway+" lists node "+nodeID,
	)
	l := s.layout()
	if m := mode(t, l.key); m != 0o600 {
		t.Errorf("key file mode %v, want 0600", m)
	}
	if m := mode(t, filepath.Dir(l.key)); m != 0o700 {
		t.Errorf("settings folder mode %v, want 0700", m)
	}
	unit := s.read(l.agentUnit)
	if strings.Contains(unit, "User=") || !strings.Contains(unit, "WantedBy=default.target") {
		t.Errorf("the user unit:\n%s", unit)
	}
	for _, call := range []string{
		"systemctl --user enable switchyard-agent.service",
		"systemctl --user restart switchyard-agent.service",
		"loginctl enable-linger tester",
		"journalctl --user --no-pager -o cat --user-unit switchyard-agent.service",
		"systemd-inhibit --what=sleep:idle",
	} {
		if !s.called(call) {
			t.Errorf("no call %q; calls:\n%s", call, strings.Join(s.calls(), "\n"))
		}
	}
	for _, call := range []string{"ollama pull", "useradd", "curl https://ollama.com", "chown"} {
		if s.called(call) {
			t.Errorf("unexpected call %q", call)
		}
	}
	if len(s.filesWith("switchyard", "")) == 0 {
		t.Fatal("nothing written")
	}
	for _, f := range s.leftovers() {
		if strings.HasPrefix(f, "/root/") {
			t.Errorf("a user install wrote %s outside the home", f)
		}
	}
}

// A Mac with no Ollama: the app is unpacked into ~/Applications, served by
// a LaunchAgent of ours, and the agent runs as a LaunchAgent under
// caffeinate; no administrator rights are asked for.
func TestFreshMacInstall(t *testing.T) {
	s := newSandbox(t, macUser)
	s.publish("latest/download", "v1.0.0", "ok", "")
	s.write(filepath.Join(s.web, "https/ollama.com:443/download/Ollama-darwin.zip"), "PK stand-in", 0o644)

	out := s.install()
	wantLines(t, out,
		"darwin/arm64, launchd LaunchAgents for tester",
		"installing Ollama into ~/Applications",
		"starting Ollama as a service",
		"pulling "+model,
		"ok: the gateway at "+gateway+" lists node "+nodeID,
	)
	l := s.layout()
	app := filepath.Join(s.home, "Applications/Ollama.app/Contents/Resources/ollama")
	if !s.exists(app) {
		t.Errorf("Ollama.app not unpacked")
	}
	if m := mode(t, l.key); m != 0o600 {
		t.Errorf("key file mode %v, want 0600", m)
	}
	plist := s.read(l.agentUnit)
	for _, want := range []string{
		"<key>Label</key><string>ai.switchyard.agent</string>",
		"<string>/bin/sh</string>",
		`-i -s -w $$ &amp; exec "$0" run</string>`,
		"<string>" + l.bin + "</string>",
		"<string>" + l.env + "</string>",
		"<key>KeepAlive</key><dict><key>SuccessfulExit</key><false/></dict>",
		"<key>StandardErrorPath</key><string>" + l.agentLog + "</string>",
	} {
		if !strings.Contains(plist, want) {
			t.Errorf("the agent's plist lacks %s:\n%s", want, plist)
		}
	}
	if o := s.read(l.ollamaUnit); !strings.Contains(o, "<string>"+app+"</string>") || !strings.Contains(o, "<string>serve</string>") {
		t.Errorf("the Ollama plist:\n%s", o)
	}
	for _, call := range []string{
		"curl https://ollama.com/download/Ollama-darwin.zip",
		"launchctl bootstrap gui/501 " + l.ollamaUnit,
		"ollama pull " + model,
		"launchctl bootstrap gui/501 " + l.agentUnit,
		"agent v1.0.0 run",
	} {
		if !s.called(call) {
			t.Errorf("no call %q; calls:\n%s", call, strings.Join(s.calls(), "\n"))
		}
	}
	// caffeinate runs beside the agent, in the background.
	deadline := time.Now().Add(5 * time.Second)
	for !s.called("caffeinate -i -s -w ") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !s.called("caffeinate -i -s -w ") {
		t.Errorf("caffeinate was not started beside the agent; calls:\n%s", strings.Join(s.calls(), "\n"))
	}
	if log := s.read(l.agentLog); !strings.Contains(log, "the gateway accepted this node") {
		t.Errorf("the agent's log:\n%s", log)
	}
	for _, f := range s.leftovers() {
		if strings.HasPrefix(f, "/root/") {
			t.Errorf("a Mac install wrote %s outside the home", f)
		}
	}
	if strings.Contains(out, nodeKey) {
		t.Errorf("the output shows the key")
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"nothing given", nil, "missing --gateway --node-id --key --model"},
		{"a scheme in the gateway", []string{"--gateway", "https://gw:9090", "--node-id", "a", "--key", nodeKey, "--model", "m"}, "--gateway wants host:port without a scheme"},
		{"no port", []string{"--gateway", "gw", "--node-id", "a", "--key", nodeKey, "--model", "m"}, "--gateway wants host:port"},
		{"not a node key", []string{"--gateway", gateway, "--node-id", "a", "--key", "sya_admin", "--model", "m"}, "--key is not a node key: node keys begin with syn_"},
		{"an unknown engine", []string{"--gateway", gateway, "--node-id", "a", "--key", nodeKey, "--engine", "foo"}, "--engine must be ollama, vllm, sglang, tgi, llamacpp or openai"},
		{"a quote in a model", []string{"--gateway", gateway, "--node-id", "a", "--key", nodeKey, "--model", `m"x`}, "--model:"},
		{"an unknown flag", []string{"--gatway", gateway}, "unknown option --gatway"},
		{"a flag without its value", []string{"--gateway"}, "--gateway needs a value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSandbox(t, linuxRoot)
			out, code := s.run(tc.args...)
			if code != 2 || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, want 2 and %q:\n%s", code, tc.want, out)
			}
			if strings.Contains(out, "sya_admin") {
				t.Errorf("the output repeats the key given")
			}
			if len(s.leftovers()) > 0 {
				t.Errorf("a usage error left %v", s.leftovers())
			}
		})
	}
}

func TestHelp(t *testing.T) {
	s := newSandbox(t, linuxRoot)
	out, code := s.run("--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, flag := range []string{"--gateway", "--node-id", "--key", "--key-file", "--tls", "--model", "--engine", "--engine-url",
		"--version", "--agent-url", "--agent-bin", "--wait", "--doctor", "--uninstall", "--keep-engine", "--gateway-http"} {
		if !strings.Contains(out, flag) {
			t.Errorf("--help does not mention %s", flag)
		}
	}
	_ = os.Remove
}

// Ollama installed but not running, with no service of its own: the script
// runs it as a service of its own, beside the agent's.
func TestOllamaInstalledButStopped(t *testing.T) {
	for _, p := range []platform{linuxRoot, linuxUser} {
		t.Run(p.name, func(t *testing.T) {
			s := newSandbox(t, p)
			s.publish("latest/download", "v1.0.0", "ok", "")
			s.ollamaRunning(model)
			must(t, os.Remove(filepath.Join(s.web, "http/127.0.0.1:11434/api/version")))

			out := s.install()
			wantLines(t, out, "starting Ollama as a service", "ok: Ollama answers at http://127.0.0.1:11434")
			l := s.layout()
			unit := s.read(l.ollamaUnit)
			if !strings.Contains(unit, "ExecStart="+filepath.Join(s.late, "ollama")+" serve\n") {
				t.Errorf("the Ollama unit:\n%s", unit)
			}
			if got := strings.Contains(unit, "User=switchyard\n"); got != (p.uid == 0) {
				t.Errorf("the Ollama unit runs as the agent's user: %v, want %v", got, p.uid == 0)
			}
			if !s.called("systemctl") || !strings.Contains(strings.Join(s.calls(), "\n"), "enable --now switchyard-ollama.service") {
				t.Errorf("calls:\n%s", strings.Join(s.calls(), "\n"))
			}

			// Uninstalling removes that service too.
			if out, code := s.run("--uninstall"); code != 0 || !strings.Contains(out, "removed the service switchyard-ollama.service") {
				t.Errorf("uninstall: exit %d:\n%s", code, out)
			}
			if s.exists(l.ollamaUnit) {
				t.Errorf("the Ollama unit is still there")
			}
		})
	}
}
