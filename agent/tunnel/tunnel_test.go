package tunnel_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/agent/tunnel"
)

// banner is what cloudflared 2024–2025 prints on stderr for a quick tunnel,
// cut short; it names other https addresses before the tunnel's own.
const banner = `2025-06-01T10:00:00Z INF Thank you for trying Cloudflare Tunnel. Doing so, without a Cloudflare account, is a quick way to experiment and try it out. However, be aware that these account-less Tunnels have no uptime guarantee, are subject to the Cloudflare Online Services Terms of Use (https://www.cloudflare.com/website-terms/), and Cloudflare reserves the right to investigate your use of Tunnels for violations of such terms. If you intend to use Tunnels in production you should use a pre-created named tunnel by following: https://developers.cloudflare.com/cloudflare-one/connections/connect-apps
2025-06-01T10:00:00Z INF Requesting new quick Tunnel on trycloudflare.com...
2025-06-01T10:00:01Z INF +--------------------------------------------------------------------------------------------+
2025-06-01T10:00:01Z INF |  Your quick Tunnel has been created! Visit it at (it may take some time to be reachable):  |
2025-06-01T10:00:01Z INF |  https://seasonal-deck-organisms-sf.trycloudflare.com                                      |
2025-06-01T10:00:01Z INF +--------------------------------------------------------------------------------------------+
2025-06-01T10:00:01Z INF Cannot determine default configuration path. No file [config.yml config.yaml] in [~/.cloudflared ~/.cloudflare-warp ~/cloudflare-warp /etc/cloudflared /usr/local/etc/cloudflared]
2025-06-01T10:00:02Z INF Registered tunnel connection connIndex=0 connection=6f2c location=ams01 protocol=quic
`

const wantURL = "https://seasonal-deck-organisms-sf.trycloudflare.com"

// standIn puts a cloudflared shell script on PATH that records its arguments
// in the returned file and then runs body.
func standIn(t *testing.T, body string) (argsFile string) {
	t.Helper()
	dir := t.TempDir()
	argsFile = filepath.Join(dir, "args")
	script := "#!/bin/sh\necho \"$@\" > '" + argsFile + "'\n" + body + "\n"
	if err := os.WriteFile(filepath.Join(dir, "cloudflared"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return argsFile
}

func bannerThen(rest string) string {
	return "cat >&2 <<'EOF'\n" + banner + "EOF\n" + rest
}

func TestStartFindsTheTunnelURL(t *testing.T) {
	argsFile := standIn(t, bannerThen("exec sleep 3600"))
	tun, err := tunnel.Start(t.Context(), tunnel.Options{LocalURL: "http://127.0.0.1:18081", Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if tun.URL() != wantURL {
		t.Errorf("URL() = %q, want %q", tun.URL(), wantURL)
	}
	args, _ := os.ReadFile(argsFile)
	if got := strings.TrimSpace(string(args)); got != "tunnel --no-autoupdate --url http://127.0.0.1:18081" {
		t.Errorf("cloudflared ran with %q", got)
	}
	select {
	case <-tun.Done():
		t.Fatal("cloudflared ended on its own")
	default:
	}
	start := time.Now()
	if err := tun.Stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("Stop took %s: SIGTERM did not end it", d)
	}
	select {
	case <-tun.Done():
	default:
		t.Fatal("Done still open after Stop")
	}
	if !tun.Stopped() {
		t.Error("Stopped() = false after Stop")
	}
}

func TestStartFromStdout(t *testing.T) {
	standIn(t, "echo 'INF |  https://a-b.trycloudflare.com  |'\nexec sleep 3600")
	tun, err := tunnel.Start(t.Context(), tunnel.Options{LocalURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer tun.Stop()
	if tun.URL() != "https://a-b.trycloudflare.com" {
		t.Errorf("URL() = %q", tun.URL())
	}
}

func TestDoneWhenCloudflaredDies(t *testing.T) {
	standIn(t, bannerThen("sleep 0.2; exit 3"))
	tun, err := tunnel.Start(t.Context(), tunnel.Options{LocalURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-tun.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after cloudflared exited")
	}
	if tun.Err() == nil || tun.Stopped() {
		t.Errorf("Err() = %v, Stopped() = %v; want an exit error from a crash", tun.Err(), tun.Stopped())
	}
}

func TestStartFailsPlainly(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		missing      bool
		want         error
		wantText     []string
	}{
		{name: "not installed", missing: true, want: tunnel.ErrNotInstalled, wantText: []string{"not installed"}},
		{
			name:     "exits before an address",
			script:   `echo '2025-06-01T10:00:00Z ERR failed to request quick Tunnel: Post "https://api.trycloudflare.com/tunnel": dial tcp: lookup api.trycloudflare.com: no such host' >&2; exit 1`,
			want:     tunnel.ErrNoURL,
			wantText: []string{"exited", "no such host"},
		},
		{
			name:     "silent",
			script:   "echo 'INF Requesting new quick Tunnel on trycloudflare.com...' >&2; exec sleep 3600",
			want:     tunnel.ErrNoURL,
			wantText: []string{"within 300ms", "Requesting new quick Tunnel"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.missing {
				t.Setenv("PATH", t.TempDir())
			} else {
				standIn(t, tc.script)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			tun, err := tunnel.Start(ctx, tunnel.Options{LocalURL: "http://127.0.0.1:1", Timeout: 300 * time.Millisecond})
			if err == nil {
				tun.Stop()
				t.Fatalf("Start succeeded with URL %q", tun.URL())
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			for _, w := range tc.wantText {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %q, want it to say %q", err, w)
				}
			}
		})
	}
}
