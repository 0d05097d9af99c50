package app

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/switchyard-ai/switchyard/keyring"
)

// Config is every setting of the gateway. Each one is a flag and a
// SWITCHYARD_* environment variable; flags win.
type Config struct {
	DatabaseURL          string
	DatabaseMaxConns     int32
	RedisURL             string
	RedisPrefix          string
	RedisTimeout         time.Duration
	HTTPAddr             string
	GRPCAddr             string
	MetricsAddr          string
	EncryptionKeys       string
	EncryptionPrimary    string
	BootstrapAdminKey    string
	DBOutageGrace        time.Duration
	BudgetOnRedisFailure string // open | closed
	NodeNetworks         []netip.Prefix
	ShutdownTimeout      time.Duration
	ShutdownDrainDelay   time.Duration
	MeteringBuffer       int
	LogFormat            string // json | text
	LogLevel             slog.Level
	TLSCert, TLSKey      string
	MaxBodyBytes         int64
	SlotTTL              time.Duration
	HeartbeatInterval    time.Duration
	NodeSuspectAfter     time.Duration
	NodeOfflineAfter     time.Duration

	Keyring *keyring.Keyring // parsed from EncryptionKeys/EncryptionPrimary by Validate
}

// defaultNodeNetworks are the private ranges nodes may live in (SPEC §4.3).
// Loopback, link-local and cloud-metadata addresses are left out on purpose.
const defaultNodeNetworks = "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10,fc00::/7"

// rawConfig holds the settings as typed by the operator, before validation.
type rawConfig struct {
	databaseURL, databaseMaxConns, redisURL        string
	httpAddr, grpcAddr, metricsAddr                string
	encryptionKeys, encryptionPrimary, bootstrap   string
	dbOutageGrace, budgetOnRedisFailure, nodeNets  string
	shutdownTimeout, logFormat, logLevel           string
	tlsCert, tlsKey, maxBodyBytes                  string
	slotTTL, heartbeat, suspectAfter, offlineAfter string
	redisPrefix, redisTimeout                      string
	drainDelay, meteringBuffer                     string
}

// addr defaults differ between serve (all interfaces) and dev (loopback).
type addrDefaults struct{ http, grpc, metrics string }

var (
	serveAddrs = addrDefaults{":8080", ":9090", ":9100"}
	devAddrs   = addrDefaults{"127.0.0.1:8080", "127.0.0.1:9090", "127.0.0.1:9100"}
)

func bindFlags(fs *flag.FlagSet, getenv func(string) string, d addrDefaults) *rawConfig {
	r := &rawConfig{}
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	fs.StringVar(&r.databaseURL, "database-url", env("SWITCHYARD_DATABASE_URL", ""), "Postgres URL (SWITCHYARD_DATABASE_URL)")
	fs.StringVar(&r.databaseMaxConns, "database-max-conns", env("SWITCHYARD_DATABASE_MAX_CONNS", "25"), "most Postgres connections per replica (SWITCHYARD_DATABASE_MAX_CONNS)")
	fs.StringVar(&r.redisURL, "redis-url", env("SWITCHYARD_REDIS_URL", ""), "Redis URL; cluster seeds comma-separated (SWITCHYARD_REDIS_URL)")
	fs.StringVar(&r.redisPrefix, "redis-prefix", env("SWITCHYARD_REDIS_PREFIX", "switchyard:"), "prefix of every Redis key, for gateways sharing one Redis (SWITCHYARD_REDIS_PREFIX)")
	fs.StringVar(&r.redisTimeout, "redis-timeout", env("SWITCHYARD_REDIS_TIMEOUT", "100ms"), "the most one Redis call may take, retry included; a hung Redis costs a request this once (SWITCHYARD_REDIS_TIMEOUT)")
	fs.StringVar(&r.httpAddr, "http-addr", env("SWITCHYARD_HTTP_ADDR", d.http), "HTTP listener: OpenAI API, REST admin, health (SWITCHYARD_HTTP_ADDR)")
	fs.StringVar(&r.grpcAddr, "grpc-addr", env("SWITCHYARD_GRPC_ADDR", d.grpc), "gRPC listener (SWITCHYARD_GRPC_ADDR)")
	fs.StringVar(&r.metricsAddr, "metrics-addr", env("SWITCHYARD_METRICS_ADDR", d.metrics), "Prometheus listener (SWITCHYARD_METRICS_ADDR)")
	fs.StringVar(&r.encryptionKeys, "encryption-keys", env("SWITCHYARD_ENCRYPTION_KEYS", ""), "keyring \"1:<base64>,2:<base64>\" (SWITCHYARD_ENCRYPTION_KEYS; prefer the variable: flags show in process lists)")
	fs.StringVar(&r.encryptionPrimary, "encryption-primary", env("SWITCHYARD_ENCRYPTION_PRIMARY", ""), "keyring version that encrypts; default the newest (SWITCHYARD_ENCRYPTION_PRIMARY)")
	fs.StringVar(&r.bootstrap, "bootstrap-admin-key", env("SWITCHYARD_BOOTSTRAP_ADMIN_KEY", ""), "an admin key accepted before any exists (SWITCHYARD_BOOTSTRAP_ADMIN_KEY)")
	fs.StringVar(&r.dbOutageGrace, "db-outage-grace", env("SWITCHYARD_DB_OUTAGE_GRACE", "10m"), "how long known keys keep working while Postgres is down (SWITCHYARD_DB_OUTAGE_GRACE)")
	fs.StringVar(&r.budgetOnRedisFailure, "budget-on-redis-failure", env("SWITCHYARD_BUDGET_ON_REDIS_FAILURE", "open"), "open|closed: budgets while Redis is down (SWITCHYARD_BUDGET_ON_REDIS_FAILURE)")
	fs.StringVar(&r.nodeNets, "node-networks", env("SWITCHYARD_NODE_NETWORKS", defaultNodeNetworks), "CIDRs the gateway may dial nodes in (SWITCHYARD_NODE_NETWORKS)")
	fs.StringVar(&r.shutdownTimeout, "shutdown-timeout", env("SWITCHYARD_SHUTDOWN_TIMEOUT", "30s"), "time given to in-flight requests on SIGTERM (SWITCHYARD_SHUTDOWN_TIMEOUT)")
	fs.StringVar(&r.drainDelay, "shutdown-drain-delay", env("SWITCHYARD_SHUTDOWN_DRAIN_DELAY", "0s"), "on SIGTERM, how long to keep serving with /readyz at 503 before refusing new connections (SWITCHYARD_SHUTDOWN_DRAIN_DELAY)")
	fs.StringVar(&r.meteringBuffer, "metering-buffer", env("SWITCHYARD_METERING_BUFFER", "10000"), "usage events held while Postgres cannot take them; more are dropped and counted (SWITCHYARD_METERING_BUFFER)")
	fs.StringVar(&r.logFormat, "log-format", env("SWITCHYARD_LOG_FORMAT", "json"), "json|text (SWITCHYARD_LOG_FORMAT)")
	fs.StringVar(&r.logLevel, "log-level", env("SWITCHYARD_LOG_LEVEL", "info"), "debug|info|warn|error (SWITCHYARD_LOG_LEVEL)")
	fs.StringVar(&r.tlsCert, "tls-cert", env("SWITCHYARD_TLS_CERT", ""), "serve TLS with this certificate file (SWITCHYARD_TLS_CERT)")
	fs.StringVar(&r.tlsKey, "tls-key", env("SWITCHYARD_TLS_KEY", ""), "…and this key file (SWITCHYARD_TLS_KEY)")
	fs.StringVar(&r.slotTTL, "slot-ttl", env("SWITCHYARD_SLOT_TTL", "15s"), "lifetime of a node slot lease, renewed while the call runs (SWITCHYARD_SLOT_TTL)")
	fs.StringVar(&r.heartbeat, "heartbeat-interval", env("SWITCHYARD_HEARTBEAT_INTERVAL", "5s"), "how often agents are told to heartbeat (SWITCHYARD_HEARTBEAT_INTERVAL)")
	fs.StringVar(&r.suspectAfter, "node-suspect-after", env("SWITCHYARD_NODE_SUSPECT_AFTER", "12s"), "silence after which a node is suspect (SWITCHYARD_NODE_SUSPECT_AFTER)")
	fs.StringVar(&r.offlineAfter, "node-offline-after", env("SWITCHYARD_NODE_OFFLINE_AFTER", "30s"), "silence after which a node is offline (SWITCHYARD_NODE_OFFLINE_AFTER)")
	fs.StringVar(&r.maxBodyBytes, "max-body-bytes", env("SWITCHYARD_MAX_BODY_BYTES", strconv.Itoa(8<<20)), "largest request body (SWITCHYARD_MAX_BODY_BYTES)")
	return r
}

// validate turns the raw settings into a Config, reporting every problem at
// once. No message repeats a value that may be secret (keys, URLs with
// passwords).
func (r *rawConfig) validate(requireDB, requireKeyring bool) (Config, error) {
	var errs []error
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{name}, args...)...))
	}
	c := Config{
		DatabaseURL: r.databaseURL, RedisURL: r.redisURL, RedisPrefix: r.redisPrefix,
		HTTPAddr: r.httpAddr, GRPCAddr: r.grpcAddr, MetricsAddr: r.metricsAddr,
		EncryptionKeys: r.encryptionKeys, EncryptionPrimary: r.encryptionPrimary,
		BootstrapAdminKey: r.bootstrap, BudgetOnRedisFailure: r.budgetOnRedisFailure,
		LogFormat: r.logFormat, TLSCert: r.tlsCert, TLSKey: r.tlsKey,
	}

	switch {
	case r.databaseURL == "" && requireDB:
		bad("SWITCHYARD_DATABASE_URL", "is required by serve (a Postgres URL such as postgres://user@host:5432/switchyard)")
	case r.databaseURL != "":
		if _, err := pgxpool.ParseConfig(r.databaseURL); err != nil {
			bad("SWITCHYARD_DATABASE_URL", "is not a valid Postgres URL or connection string")
		}
	}
	if n, err := strconv.ParseInt(r.databaseMaxConns, 10, 32); err != nil || n < 1 {
		bad("SWITCHYARD_DATABASE_MAX_CONNS", "must be a whole number ≥ 1, got %q", r.databaseMaxConns)
	} else {
		c.DatabaseMaxConns = int32(n)
	}
	if r.redisURL != "" {
		for _, u := range strings.Split(r.redisURL, ",") {
			u = strings.TrimSpace(u)
			if !strings.Contains(u, "://") {
				u = "redis://" + u
			}
			if _, err := redis.ParseURL(u); err != nil {
				bad("SWITCHYARD_REDIS_URL", "is not a valid redis:// or rediss:// URL (or host:port list)")
				break
			}
		}
	}
	for _, a := range []struct{ name, v string }{
		{"SWITCHYARD_HTTP_ADDR", r.httpAddr}, {"SWITCHYARD_GRPC_ADDR", r.grpcAddr}, {"SWITCHYARD_METRICS_ADDR", r.metricsAddr},
	} {
		if err := checkAddr(a.v); err != nil {
			bad(a.name, "%v", err)
		}
	}
	if r.encryptionKeys == "" {
		if requireKeyring {
			bad("SWITCHYARD_ENCRYPTION_KEYS", "is required (generate a key with `switchyard keygen` and set \"1:<key>\")")
		}
	} else if kr, err := keyring.Parse(r.encryptionKeys, r.encryptionPrimary); err != nil {
		errs = append(errs, err) // its lines name the variable, the entry and the problem
	} else {
		c.Keyring = kr
	}
	if r.bootstrap != "" && len(r.bootstrap) < 24 {
		bad("SWITCHYARD_BOOTSTRAP_ADMIN_KEY", "is too short: use at least 24 random characters (e.g. from `switchyard keygen`)")
	}
	if d, err := time.ParseDuration(r.dbOutageGrace); err != nil || d < 0 {
		bad("SWITCHYARD_DB_OUTAGE_GRACE", "must be a duration such as 10m, got %q", r.dbOutageGrace)
	} else {
		c.DBOutageGrace = d
	}
	if r.budgetOnRedisFailure != "open" && r.budgetOnRedisFailure != "closed" {
		bad("SWITCHYARD_BUDGET_ON_REDIS_FAILURE", "must be open or closed, got %q", r.budgetOnRedisFailure)
	}
	nets, err := ParseNetworks(r.nodeNets)
	if err != nil {
		bad("SWITCHYARD_NODE_NETWORKS", "%v", err)
	}
	c.NodeNetworks = nets
	if d, err := time.ParseDuration(r.shutdownTimeout); err != nil || d <= 0 {
		bad("SWITCHYARD_SHUTDOWN_TIMEOUT", "must be a positive duration such as 30s, got %q", r.shutdownTimeout)
	} else {
		c.ShutdownTimeout = d
	}
	if d, err := time.ParseDuration(r.drainDelay); err != nil || d < 0 {
		bad("SWITCHYARD_SHUTDOWN_DRAIN_DELAY", "must be a duration such as 5s (0s: none), got %q", r.drainDelay)
	} else {
		c.ShutdownDrainDelay = d
	}
	if d, err := time.ParseDuration(r.redisTimeout); err != nil || d <= 0 || d > time.Minute {
		bad("SWITCHYARD_REDIS_TIMEOUT", "must be a positive duration up to 1m such as 100ms, got %q", r.redisTimeout)
	} else {
		c.RedisTimeout = d
	}
	if n, err := strconv.Atoi(r.meteringBuffer); err != nil || n < 1 {
		bad("SWITCHYARD_METERING_BUFFER", "must be a whole number of events ≥ 1, got %q", r.meteringBuffer)
	} else {
		c.MeteringBuffer = n
	}
	if r.logFormat != "json" && r.logFormat != "text" {
		bad("SWITCHYARD_LOG_FORMAT", "must be json or text, got %q", r.logFormat)
	}
	if err := c.LogLevel.UnmarshalText([]byte(r.logLevel)); err != nil {
		bad("SWITCHYARD_LOG_LEVEL", "must be debug, info, warn or error, got %q", r.logLevel)
	}
	if (r.tlsCert == "") != (r.tlsKey == "") {
		bad("SWITCHYARD_TLS_CERT/SWITCHYARD_TLS_KEY", "set both or neither")
	}
	if n, err := strconv.ParseInt(r.maxBodyBytes, 10, 64); err != nil || n < 1024 {
		bad("SWITCHYARD_MAX_BODY_BYTES", "must be a number of bytes ≥ 1024, got %q", r.maxBodyBytes)
	} else {
		c.MaxBodyBytes = n
	}
	for _, d := range []struct {
		name, raw string
		into      *time.Duration
	}{
		{"SWITCHYARD_SLOT_TTL", r.slotTTL, &c.SlotTTL},
		{"SWITCHYARD_HEARTBEAT_INTERVAL", r.heartbeat, &c.HeartbeatInterval},
		{"SWITCHYARD_NODE_SUSPECT_AFTER", r.suspectAfter, &c.NodeSuspectAfter},
		{"SWITCHYARD_NODE_OFFLINE_AFTER", r.offlineAfter, &c.NodeOfflineAfter},
	} {
		v, err := time.ParseDuration(d.raw)
		if err != nil || v <= 0 {
			bad(d.name, "must be a positive duration, got %q", d.raw)
			continue
		}
		*d.into = v
	}
	if c.NodeSuspectAfter > 0 && c.NodeOfflineAfter > 0 && c.NodeOfflineAfter <= c.NodeSuspectAfter {
		bad("SWITCHYARD_NODE_OFFLINE_AFTER", "must be longer than SWITCHYARD_NODE_SUSPECT_AFTER")
	}
	return c, errors.Join(errs...)
}

func checkAddr(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q is not host:port (e.g. :8080 or 127.0.0.1:8080)", a)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%q has no valid port", a)
	}
	_ = host
	return nil
}

// ParseNetworks parses a comma-separated CIDR list.
func ParseNetworks(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	var errs []error
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		p, err := netip.ParsePrefix(part)
		if err != nil {
			errs = append(errs, fmt.Errorf("%q is not a CIDR such as 10.0.0.0/8", part))
			continue
		}
		out = append(out, p.Masked())
	}
	if len(out) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("is empty; list at least one CIDR"))
	}
	return out, errors.Join(errs...)
}

// redactURL shows a URL without its password, for logs.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		return "(set)"
	}
	return u.Redacted()
}
