package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// database is the bench's own Postgres database, dropped afterwards.
type database struct {
	admin string // the administrative URL it was created through
	name  string
	url   string
}

func createDatabase(ctx context.Context, adminURL string) (*database, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("Postgres at %s: %w", redactURL(adminURL), err)
	}
	defer conn.Close(context.Background())
	d := &database{admin: adminURL, name: "switchyard_bench_" + randomHex(4)}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+d.name); err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		return nil, err
	}
	u.Path = "/" + d.name
	d.url = u.String()
	return d, nil
}

func (d *database) drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+d.name+" WITH (FORCE)")
	return err
}

// postgresVersion reports the server's version string.
func postgresVersion(ctx context.Context, adminURL string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "unknown"
	}
	defer conn.Close(context.Background())
	var v string
	if conn.QueryRow(ctx, "SHOW server_version").Scan(&v) != nil {
		return "unknown"
	}
	return v
}

// redisInfo reports the server's version, and clears keys under prefix.
func redisVersion(ctx context.Context, redisURL string) string {
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return "unknown"
	}
	c := redis.NewClient(opt)
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "unknown"
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "unknown"
}

// clearRedisPrefix deletes every key holding prefix (the gateway wraps
// its prefix in hash tags, so the match is not anchored).
func clearRedisPrefix(redisURL, prefix string) error {
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return err
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, "*"+prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			if err := c.Del(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		if err := c.Del(ctx, batch...).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}

func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		return "(set)"
	}
	return u.Redacted()
}

// gateway is a running `switchyard serve`.
type gateway struct {
	*proc
	http, grpc, metrics string // host:port
	admin               string // the bootstrap admin key
	client              string // a client key of the bench tenant
	keyring             string // SWITCHYARD_ENCRYPTION_KEYS
	gc                  *gcWatch
}

// startGateway runs `switchyard serve` on the bench's database and Redis
// prefix. A first replica gets a fresh keyring and bootstrap admin key;
// another replica is handed the first one's (like), so that it reads what
// the first sealed and accepts the same admin key.
func startGateway(ctx context.Context, ps *procs, bin, dbURL, redisURL, prefix string, like *gateway) (*gateway, error) {
	g := &gateway{}
	if like != nil {
		g.keyring, g.admin, g.client = like.keyring, like.admin, like.client
	} else {
		out, err := exec.CommandContext(ctx, filepath.Join(bin, "switchyard"), "keygen").Output()
		if err != nil {
			return nil, fmt.Errorf("switchyard keygen: %w", err)
		}
		g.keyring, g.admin = "1:"+strings.TrimSpace(string(out)), "bench-admin-"+randomHex(16)
	}
	var err error
	for _, a := range []*string{&g.http, &g.grpc, &g.metrics} {
		if *a, err = freeAddr(); err != nil {
			return nil, err
		}
	}
	env := []string{
		"SWITCHYARD_DATABASE_URL=" + dbURL,
		"SWITCHYARD_REDIS_URL=" + redisURL,
		"SWITCHYARD_REDIS_PREFIX=" + prefix,
		"SWITCHYARD_ENCRYPTION_KEYS=" + g.keyring,
		"SWITCHYARD_BOOTSTRAP_ADMIN_KEY=" + g.admin,
		"SWITCHYARD_HTTP_ADDR=" + g.http,
		"SWITCHYARD_GRPC_ADDR=" + g.grpc,
		"SWITCHYARD_METRICS_ADDR=" + g.metrics,
		// The simulated nodes listen on loopback, which the default
		// networks leave out on purpose.
		"SWITCHYARD_NODE_NETWORKS=127.0.0.0/8",
		"SWITCHYARD_SHUTDOWN_TIMEOUT=5s",
		"SWITCHYARD_LOG_LEVEL=info",
		"SWITCHYARD_LOG_FORMAT=json",
		// One line per garbage collection on stderr, with the heap it
		// found live: the heap phase reads the memory streams hold there.
		"GODEBUG=gctrace=1",
	}
	g.gc = &gcWatch{}
	name := "switchyard"
	if like != nil {
		name = "switchyard-replica"
	}
	p, err := ps.startWatched(name, env, g.gc.observe, filepath.Join(bin, "switchyard"), "serve")
	if err != nil {
		return nil, err
	}
	g.proc = p
	if err := waitHTTP(ctx, p, "http://"+g.http+"/readyz", 200, 60*time.Second); err != nil {
		return nil, err
	}
	return g, nil
}

// call makes an admin REST call and decodes the answer.
func (g *gateway) call(ctx context.Context, method, path string, body any) (map[string]any, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+g.http+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+g.admin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(raw))
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return m, nil
}

// benchTenant is the tenant every request of the bench runs as: limits
// and budgets set, high enough never to refuse, so that every request pays
// for checking them.
const benchTenant = "bench"

// configure creates the bench tenant and its client key.
func (g *gateway) configure(ctx context.Context) error {
	if _, err := g.call(ctx, "POST", "/admin/v1/tenants", map[string]any{"tenant": map[string]any{
		"id": benchTenant, "name": "load generator",
		"requests_per_minute": 1_000_000_000, "tokens_per_minute": 1_000_000_000_000,
		"daily_token_budget": 1_000_000_000_000, "monthly_cost_budget_usd": 1_000_000_000,
		"interactive": false,
	}}); err != nil {
		return err
	}
	m, err := g.call(ctx, "POST", "/admin/v1/tenants/"+benchTenant+"/keys", map[string]any{"name": "bench"})
	if err != nil {
		return err
	}
	key, _ := m["api_key"].(string)
	if key == "" {
		return fmt.Errorf("no api_key in the key creation answer")
	}
	g.client = key
	return nil
}

// vendor registers an OpenAI-compatible vendor at baseURL with a key, and
// a model served by it.
func (g *gateway) vendor(ctx context.Context, id, baseURL, model string) error {
	if _, err := g.call(ctx, "POST", "/admin/v1/vendors", map[string]any{"vendor": map[string]any{"id": id, "base_url": baseURL, "enabled": true}}); err != nil {
		return err
	}
	if _, err := g.call(ctx, "POST", "/admin/v1/vendors/"+id+":setKey", map[string]any{"api_key": "sk-bench-" + randomHex(8)}); err != nil {
		return err
	}
	_, err := g.call(ctx, "POST", "/admin/v1/models", map[string]any{"model": map[string]any{
		"id": model, "vendor": id, "input_price_per_mtok": 0.15, "output_price_per_mtok": 0.6, "enabled": true,
	}})
	return err
}

// metric reads one unlabelled sample from the gateway's /metrics.
func (g *gateway) metric(ctx context.Context, name string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+g.metrics+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return metricValue(raw, name)
}

// metricValue finds an unlabelled sample in a Prometheus text exposition.
func metricValue(exposition []byte, name string) (float64, error) {
	for line := range strings.SplitSeq(string(exposition), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			var v float64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%g", &v); err != nil {
				return 0, fmt.Errorf("metric %s: %w", name, err)
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("metric %s not exposed", name)
}

// engine is a running simengine.
type engine struct {
	*proc
	url string // base URL, without /v1
}

var simLine = regexp.MustCompile(`simengine listening on (http://\S+)`)

func startEngine(ctx context.Context, ps *procs, bin, name string, args ...string) (*engine, error) {
	p, err := ps.start(name, nil, filepath.Join(bin, "simengine"), append([]string{"--listen", "127.0.0.1:0", "--log-level", "warn"}, args...)...)
	if err != nil {
		return nil, err
	}
	u, err := p.waitOutput(ctx, simLine, 20*time.Second)
	if err != nil {
		return nil, err
	}
	return &engine{proc: p, url: u}, nil
}

// configure changes the engine's run-time knobs (POST /sim/config).
func (e *engine) configure(ctx context.Context, knobs map[string]any) error {
	b, _ := json.Marshal(knobs)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/sim/config", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("simengine knobs %s: %s: %s", b, resp.Status, raw)
	}
	return nil
}

// simStats is the part of GET /sim/stats the bench reads.
type simStats struct {
	Running int   `json:"running"`
	Waiting int   `json:"waiting"`
	Served  int64 `json:"served"`
}

func (e *engine) stats(ctx context.Context) (simStats, error) {
	var s simStats
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/sim/stats", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}
