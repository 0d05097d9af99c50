package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/template"
	"time"
)

// nginxServer is one listener of the nginx arm: a reverse proxy to
// upstream servers, balanced by nginx's default round-robin or by one of
// its named methods.
type nginxServer struct {
	Listen   string   // host:port
	Balance  string   // "" (round-robin) or "least_conn"
	Upstream []string // host:port of each server
}

// nginxConf is the whole configuration: nginx as the floor of one HTTP
// proxy hop, set up as an operator would for an LLM API: keep-alive to the
// upstreams, no buffering (Server-Sent Events pass through as they come),
// no access log (the cheapest nginx can be), worker count = CPU count.
var nginxConf = template.Must(template.New("nginx").Parse(`# Written by switchyard-bench; not for production.
daemon off;
master_process on;
worker_processes auto;
worker_rlimit_nofile 65535;
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log warn;

events {
    worker_connections 32768;
    multi_accept on;
}

http {
    access_log off;
    client_body_temp_path {{.Dir}}/client_body;
    proxy_temp_path {{.Dir}}/proxy;
    fastcgi_temp_path {{.Dir}}/fastcgi;
    uwsgi_temp_path {{.Dir}}/uwsgi;
    scgi_temp_path {{.Dir}}/scgi;
    keepalive_timeout 120s;
    keepalive_requests 1000000;
    client_body_buffer_size 64k;
{{range $i, $s := .Servers}}
    upstream up{{$i}} {
{{- if $s.Balance}}
        {{$s.Balance}};
{{- end}}
{{- range $s.Upstream}}
        server {{.}} max_fails=0;
{{- end}}
        keepalive 1024;
        keepalive_requests 1000000;
        keepalive_timeout 120s;
    }

    server {
        listen {{$s.Listen}} backlog=65535;
        location / {
            proxy_pass http://up{{$i}};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 300s;
            proxy_send_timeout 300s;
            add_header X-Upstream-Addr $upstream_addr always;
        }
    }
{{end}}
}
`))

// renderNginx writes the configuration of servers for an nginx whose
// files live in dir.
func renderNginx(dir string, servers []nginxServer) (string, error) {
	var b strings.Builder
	for _, s := range servers {
		if s.Balance != "" && s.Balance != "least_conn" {
			return "", fmt.Errorf("nginx balance %q is not supported", s.Balance)
		}
		if len(s.Upstream) == 0 {
			return "", fmt.Errorf("nginx server %s has no upstream", s.Listen)
		}
	}
	err := nginxConf.Execute(&b, struct {
		Dir     string
		Servers []nginxServer
	}{dir, servers})
	return b.String(), err
}

// nginxVersion reports `nginx -v`, or "" when nginx cannot run.
func nginxVersion(bin string) string {
	if bin == "" {
		return ""
	}
	out, err := exec.Command(bin, "-v").CombinedOutput()
	if err != nil {
		return ""
	}
	v := strings.TrimSpace(string(out))
	v = strings.TrimPrefix(v, "nginx version: ")
	return v
}

// startNginx writes the configuration to a folder of its own and runs
// nginx in the foreground as a child, waiting until every listener
// accepts.
func startNginx(ctx context.Context, ps *procs, bin, name string, servers []nginxServer) (*proc, error) {
	dir := filepath.Join(ps.dir, sanitize(name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	conf, err := renderNginx(dir, servers)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	p, err := ps.start(name, nil, bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", path)
	if err != nil {
		return nil, err
	}
	for _, s := range servers {
		if err := waitListening(ctx, p, s.Listen, 15*time.Second); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func waitListening(ctx context.Context, p *proc, addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited:\n%s", p.name, p.out.Tail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s: nothing listens on %s after %v:\n%s", p.name, addr, within, p.out.Tail())
}
