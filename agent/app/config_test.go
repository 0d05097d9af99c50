package app

import (
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestBadConfigurationExits2NamingEveryProblem(t *testing.T) {
	secret := "sk-live-very-secret-value"
	missingFile := filepath.Join(t.TempDir(), "nope.key")
	badFile := filepath.Join(t.TempDir(), "bad.key")
	if err := os.WriteFile(badFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{
			name: "nothing set",
			want: []string{"--gateway (SWITCHYARD_GATEWAY): is required", "--node-id (SWITCHYARD_NODE_ID): is required", "--key (SWITCHYARD_NODE_KEY): is required"},
		},
		{
			name: "every value wrong",
			args: []string{"--gateway", "http://gw:9090", "--node-id", "a b", "--engine", "mlx", "--engine-url", "localhost:11434",
				"--listen", "8081", "--advertise-url", "10.0.0.5:8081", "--slots", "-1", "--shutdown-timeout", "soon",
				"--expose", "ngrok", "--log-format", "xml", "--log-level", "loud"},
			env: map[string]string{"SWITCHYARD_NODE_KEY": secret, "SWITCHYARD_GATEWAY_TLS": "maybe"},
			want: []string{"--gateway", "without a scheme", "--node-id", "spaces", "--engine (SWITCHYARD_ENGINE): must be one of",
				"--engine-url", "--listen (SWITCHYARD_FRONT_ADDR)", "--advertise-url (SWITCHYARD_ADVERTISE_URL)",
				"--slots", "--shutdown-timeout", "--expose (SWITCHYARD_EXPOSE): the only choice is cloudflared",
				"--log-format", "--log-level", "--tls (SWITCHYARD_GATEWAY_TLS)", "--key (SWITCHYARD_NODE_KEY): is not a node key"},
		},
		{
			name: "openai without a URL, tunnel and URL both",
			args: []string{"--gateway", "gw:9090", "--node-id", "n1", "--engine", "openai", "--expose", "cloudflared", "--advertise-url", "http://10.0.0.5:8081"},
			env:  map[string]string{"SWITCHYARD_NODE_KEY": nodeKey},
			want: []string{"--engine-url (SWITCHYARD_ENGINE_URL): is required with --engine=openai", "--expose (SWITCHYARD_EXPOSE): and --advertise-url both"},
		},
		{
			name: "key file missing",
			args: []string{"--gateway", "gw:9090", "--node-id", "n1", "--key-file", missingFile},
			want: []string{"--key-file (SWITCHYARD_NODE_KEY_FILE): cannot read " + missingFile + ": no such file"},
		},
		{
			name: "key file holds no node key",
			args: []string{"--gateway", "gw:9090", "--node-id", "n1", "--key-file", badFile},
			want: []string{"does not hold a node key"},
		},
		{
			name: "key and key file as flags",
			args: []string{"--gateway", "gw:9090", "--node-id", "n1", "--key", secret, "--key-file", badFile},
			want: []string{"both set"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, cmd := range []string{"run", "doctor"} {
				var stdout, stderr strings.Builder
				code := MainEnv(t.Context(), append([]string{cmd}, tc.args...), &stdout, &stderr, envMap(tc.env))
				if code != 2 {
					t.Fatalf("%s: exit %d, want 2; stderr:\n%s", cmd, code, stderr.String())
				}
				out := stderr.String()
				if !strings.HasPrefix(out, "switchyard-agent "+cmd+": bad configuration:\n") {
					t.Errorf("%s: stderr starts %q", cmd, out)
				}
				for _, w := range tc.want {
					if !strings.Contains(out, w) {
						t.Errorf("%s: stderr does not say %q:\n%s", cmd, w, out)
					}
				}
				if strings.Contains(out, secret) || strings.Contains(out+stdout.String(), "very-secret") {
					t.Errorf("%s: the output repeats the key:\n%s", cmd, out)
				}
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{nil, {"serve"}, {"run", "--no-such-flag"}, {"run", "extra"}} {
		if code := MainEnv(t.Context(), args, io.Discard, io.Discard, envMap(nil)); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	var out strings.Builder
	if code := MainEnv(t.Context(), []string{"run", "-h"}, io.Discard, &out, envMap(map[string]string{"SWITCHYARD_NODE_KEY": nodeKey})); code != 0 {
		t.Errorf("-h: exit %d, want 0", code)
	}
	if strings.Contains(out.String(), nodeKey) || !strings.Contains(out.String(), "SWITCHYARD_NODE_KEY") {
		t.Errorf("-h prints the key from the environment, or not the variables:\n%s", out.String())
	}
}

func TestFlagsWinOverTheEnvironment(t *testing.T) {
	env := map[string]string{
		"SWITCHYARD_GATEWAY": "env-gw:9090", "SWITCHYARD_NODE_ID": "env-node", "SWITCHYARD_NODE_KEY": nodeKey,
		"SWITCHYARD_ENGINE": "vllm", "SWITCHYARD_SLOTS": "3", "SWITCHYARD_MODELS": "a, b,,a",
		"SWITCHYARD_GATEWAY_TLS": "true", "SWITCHYARD_SHUTDOWN_TIMEOUT": "1m", "SWITCHYARD_FRONT_ADDR": "127.0.0.1:9999",
		"SWITCHYARD_NODE_KEY_FILE": "/does/not/matter",
	}
	c, err := parseConfig("run", []string{"--gateway", "flag-gw:9090", "--engine", "tgi", "--tls=false", "--key", otherKey}, io.Discard, envMap(env))
	if err != nil {
		t.Fatal(err)
	}
	if c.Gateway != "flag-gw:9090" || c.NodeID != "env-node" || c.Engine != "tgi" || c.EngineURL != "http://127.0.0.1:8080" ||
		c.Slots != 3 || strings.Join(c.Models, ",") != "a,b" || c.TLS || c.ShutdownTimeout != time.Minute ||
		c.Key != otherKey || c.advertiseHost != "127.0.0.1" {
		t.Errorf("config %+v", c)
	}
	// Both variables set, neither as a flag, is one too many.
	if _, err := parseConfig("run", nil, io.Discard, envMap(env)); err == nil || !strings.Contains(err.Error(), "both set") {
		t.Errorf("key and key file from the environment: %v, want a conflict", err)
	}
	delete(env, "SWITCHYARD_NODE_KEY_FILE")
	for kind, want := range map[string]string{
		"ollama": "http://127.0.0.1:11434", "vllm": "http://127.0.0.1:8000", "sglang": "http://127.0.0.1:8000",
		"tgi": "http://127.0.0.1:8080", "llamacpp": "http://127.0.0.1:8080",
	} {
		c, err := parseConfig("run", []string{"--engine", kind}, io.Discard, envMap(env))
		if err != nil || c.EngineURL != want {
			t.Errorf("%s: engine URL %q (%v), want %q", kind, c.EngineURL, err, want)
		}
	}
}

func TestAdvertiseHost(t *testing.T) {
	a := func(name, ip string) ifaceAddr { return ifaceAddr{name: name, addr: netip.MustParseAddr(ip)} }
	for _, tc := range []struct {
		name, listen string
		addrs        []ifaceAddr
		want         string
		wantErr      bool
	}{
		{"listen names a host", "10.1.2.3:8081", nil, "10.1.2.3", false},
		{"listen names a name", "node7.lan:8081", nil, "node7.lan", false},
		{"first private IPv4", ":8081", []ifaceAddr{a("eth0", "203.0.113.7"), a("eth0", "fe80::1"), a("eth1", "192.168.1.20"), a("eth2", "10.0.0.9")}, "192.168.1.20", false},
		{"container bridge passed over", "0.0.0.0:8081", []ifaceAddr{a("docker0", "172.17.0.1"), a("wlan0", "10.0.0.5")}, "10.0.0.5", false},
		{"bridge when nothing else", "[::]:8081", []ifaceAddr{a("docker0", "172.17.0.1")}, "172.17.0.1", false},
		{"tailscale after RFC 1918", ":8081", []ifaceAddr{a("tailscale0", "100.101.102.103"), a("en0", "192.168.0.4")}, "192.168.0.4", false},
		{"tailscale alone", ":8081", []ifaceAddr{a("tailscale0", "100.101.102.103"), a("en0", "198.51.100.1")}, "100.101.102.103", false},
		{"unique local IPv6", ":8081", []ifaceAddr{a("en0", "fd12::5")}, "fd12::5", false},
		{"no private address", ":8081", []ifaceAddr{a("en0", "198.51.100.1")}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := advertiseHost(tc.listen, func() ([]ifaceAddr, error) { return tc.addrs, nil })
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("advertiseHost = %q, %v; want %q (error %v)", got, err, tc.want, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "--advertise-url") {
				t.Errorf("the error does not say what to set: %v", err)
			}
		})
	}
	if _, err := advertiseHost(":8081", func() ([]ifaceAddr, error) { return nil, errors.New("boom") }); err == nil {
		t.Error("an interface listing error was ignored")
	}
}

func TestAdvertisedURL(t *testing.T) {
	c := config{advertiseHost: "fd12::5"}
	if got, _ := c.advertised(8081); got != "http://[fd12::5]:8081" {
		t.Errorf("advertised = %q", got)
	}
	c = config{AdvertiseURL: "https://node.example/x"}
	if got, _ := c.advertised(8081); got != "https://node.example/x" {
		t.Errorf("advertised = %q", got)
	}
	for listen, want := range map[string]string{
		":8081": "http://127.0.0.1:8081", "0.0.0.0:8081": "http://127.0.0.1:8081", "[::]:8081": "http://127.0.0.1:8081",
		"10.0.0.5:8081": "http://10.0.0.5:8081", "[::1]:8081": "http://[::1]:8081",
	} {
		if got := localFrontURL(listen, 8081); got != want {
			t.Errorf("localFrontURL(%q) = %q, want %q", listen, got, want)
		}
	}
}

func TestVersion(t *testing.T) {
	var out strings.Builder
	if code := MainEnv(t.Context(), []string{"version"}, &out, io.Discard, envMap(nil)); code != 0 {
		t.Fatalf("exit %d", code)
	}
	f := strings.Fields(out.String())
	if len(f) < 4 || f[0] != "switchyard-agent" || f[1] != "dev" || !strings.HasPrefix(f[len(f)-2], "go") || !strings.Contains(f[len(f)-1], "/") {
		t.Errorf("version printed %q", out.String())
	}
}
