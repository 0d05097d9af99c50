package installtest

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The doctor's own checks, around the agent's doctor (a stand-in here):
// what is installed, whether the service runs, the clock, and Rosetta on a
// Mac.
func TestDoctor(t *testing.T) {
	dateHeader := func(offset time.Duration) string {
		return "Date: " + time.Now().Add(offset).UTC().Format(http.TimeFormat) + "\n"
	}
	for _, tc := range []struct {
		name  string
		p     platform
		setup func(s *sandbox)
		code  int
		want  []string
		not   []string
	}{
		{
			name: "all good", p: linuxRoot, code: 0,
			setup: func(s *sandbox) {
				s.write(filepath.Join(s.web, "http/gw.example.com:8080/healthz.headers"), dateHeader(0), 0o644)
				s.write(filepath.Join(s.web, "http/gw.example.com:8080/healthz"), "ok\n", 0o644)
			},
			want: []string{
				"ok: switchyard-agent v1.0.0 is installed",
				"ok: the agent's service is running",
				"ok: this machine is kept awake while the agent runs (systemd-inhibit)",
				"ok: this machine's clock agrees with the gateway's",
				"ok: the gateway at " + gateway + " accepts this key for node \"anna\"",
				"all checks passed",
			},
		},
		{
			name: "not installed", p: linuxUser, code: 1,
			setup: func(s *sandbox) { _, _ = s.run("--uninstall") },
			want:  []string{"problem: switchyard-agent is not installed here", "hint: install it: install-node.sh --gateway"},
		},
		{
			name: "service not running", p: linuxRoot, code: 1,
			setup: func(s *sandbox) {
				s.write(filepath.Join(s.state, "units/system/switchyard-agent.service"), "inactive\n", 0o644)
			},
			want: []string{"problem: the agent's service is not running (stopped)", "hint: start it: systemctl start switchyard-agent.service", "1 problem(s) found"},
		},
		{
			name: "service failing", p: macUser, code: 1,
			setup: func(s *sandbox) {
				s.write(filepath.Join(s.state, "launchd/ai.switchyard.agent.status"), "\tstate = not running\n\tlast exit code = 2\n", 0o644)
			},
			want: []string{"problem: the agent's service keeps failing", "Library/Logs/switchyard-agent.log"},
		},
		{
			name: "clock ahead", p: linuxRoot, code: 1,
			setup: func(s *sandbox) {
				s.write(filepath.Join(s.web, "http/gw.example.com:8080/healthz.headers"), dateHeader(-10*time.Minute), 0o644)
				s.write(filepath.Join(s.web, "http/gw.example.com:8080/healthz"), "ok\n", 0o644)
			},
			want: []string{"problem: this machine's clock is 10 minutes ahead of the gateway's", "hint: turn on network time: timedatectl set-ntp true"},
		},
		{
			name: "clock behind, on a Mac, through --gateway-http", p: macUser, code: 1,
			setup: func(s *sandbox) {
				s.write(filepath.Join(s.web, "https/api.example.com:443/healthz.headers"), dateHeader(3*time.Hour), 0o644)
				s.write(filepath.Join(s.web, "https/api.example.com:443/healthz"), "ok\n", 0o644)
				if out, code := s.run("--gateway-http", "https://api.example.com"); code != 0 {
					s.t.Fatalf("setting --gateway-http: %s", out)
				}
			},
			want: []string{"problem: this machine's clock is 3 hours behind the gateway's", "Set time and date automatically"},
		},
		{
			name: "clock not comparable", p: linuxRoot, code: 0,
			want: []string{"note: the clock could not be compared with the gateway's: nothing answered at http://gw.example.com:8080/healthz"},
		},
		{
			name: "Ollama under Rosetta", p: macUser, code: 1,
			setup: func(s *sandbox) {
				s.write(filepath.Join(s.state, "file-kind"), "Mach-O 64-bit executable x86_64\n", 0o644)
			},
			want: []string{"problem: Ollama is an Intel build running under Rosetta", "install the Apple silicon build of Ollama"},
		},
		{
			name: "shell under Rosetta", p: macUser, code: 1,
			setup: func(s *sandbox) { s.write(filepath.Join(s.state, "translated"), "", 0o644) },
			want:  []string{"problem: this shell runs under Rosetta", "ok: Ollama is an Apple silicon build"},
		},
		{
			name: "the agent doctor's problems", p: linuxUser, code: 1,
			setup: func(s *sandbox) {
				s.write(filepath.Join(s.state, "doctor-output"), "ok: the engine (ollama) answers at http://127.0.0.1:11434\nproblem: Ollama is running "+model+" on the CPU: no GPU memory is used\n  hint: Ollama found no usable GPU\n1 problem(s) found\n", 0o644)
			},
			want: []string{"problem: Ollama is running " + model + " on the CPU", "  hint: Ollama found no usable GPU", "1 problem(s) found"},
		},
		{
			name: "agent binary missing", p: linuxUser, code: 1,
			setup: func(s *sandbox) { must(s.t, os.Remove(s.layout().bin)) },
			want:  []string{"problem: the agent's settings are here, but its binary is missing", "ok: the engine (ollama) answers at http://127.0.0.1:11434"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSandbox(t, tc.p)
			s.publish("latest/download", "v1.0.0", "ok", "")
			s.ollamaRunning(model)
			s.install()
			if tc.setup != nil {
				tc.setup(s)
			}
			s.resetCalls()
			out, code := s.run("--doctor")
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			wantLines(t, out, tc.want...)
			if strings.Count(out, "problem(s) found")+strings.Count(out, "all checks passed") != 1 {
				t.Errorf("want one summary line:\n%s", out)
			}
			for _, c := range s.calls() {
				for _, bad := range []string{"restart", "kickstart", "bootstrap", "enable", "disable", "pull", "useradd"} {
					if strings.Contains(c, bad) {
						t.Errorf("the doctor changed something: %s", c)
					}
				}
			}
		})
	}
}
