package app

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/keyring"
)

func envOf(m map[string]string) Env { return func(k string) string { return m[k] } }

// TestBadConfigurationStopsStartup: every problem is named at once, the exit
// code is 1, nothing panics, and no secret is repeated.
func TestBadConfigurationStopsStartup(t *testing.T) {
	good, err := keyring.Generate()
	if err != nil {
		t.Fatal(err)
	}
	short := good[:20] // not 32 bytes
	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		want    []string
		secrets []string
	}{
		{"serve needs a database and a keyring", map[string]string{}, nil,
			[]string{"SWITCHYARD_DATABASE_URL: is required", "SWITCHYARD_ENCRYPTION_KEYS: is required"}, nil},
		{"keyring bad base64", map[string]string{"SWITCHYARD_DATABASE_URL": "postgres://u:hunter2pass@db/x", "SWITCHYARD_ENCRYPTION_KEYS": "1:@@notbase64@@"}, nil,
			[]string{"SWITCHYARD_ENCRYPTION_KEYS"}, []string{"@@notbase64@@", "hunter2pass"}},
		{"keyring wrong length", map[string]string{"SWITCHYARD_DATABASE_URL": "postgres://db/x", "SWITCHYARD_ENCRYPTION_KEYS": "1:" + short}, nil,
			[]string{"SWITCHYARD_ENCRYPTION_KEYS"}, []string{short, short[:8]}},
		{"keyring duplicate version", map[string]string{"SWITCHYARD_DATABASE_URL": "postgres://db/x", "SWITCHYARD_ENCRYPTION_KEYS": "1:" + good + ",1:" + good}, nil,
			[]string{"SWITCHYARD_ENCRYPTION_KEYS", "is already listed"}, []string{good, good[:8]}},
		{"keyring empty entries", map[string]string{"SWITCHYARD_DATABASE_URL": "postgres://db/x", "SWITCHYARD_ENCRYPTION_KEYS": ","}, nil,
			[]string{"SWITCHYARD_ENCRYPTION_KEYS"}, nil},
		{"primary not in keyring", map[string]string{"SWITCHYARD_DATABASE_URL": "postgres://db/x", "SWITCHYARD_ENCRYPTION_KEYS": "1:" + good, "SWITCHYARD_ENCRYPTION_PRIMARY": "2"}, nil,
			[]string{"SWITCHYARD_ENCRYPTION_KEYS"}, []string{good}},
		{"everything else wrong at once", map[string]string{
			"SWITCHYARD_DATABASE_URL": "postgres://db/x", "SWITCHYARD_ENCRYPTION_KEYS": "1:" + good,
			"SWITCHYARD_HTTP_ADDR": "8080", "SWITCHYARD_DB_OUTAGE_GRACE": "ten minutes",
			"SWITCHYARD_BUDGET_ON_REDIS_FAILURE": "maybe", "SWITCHYARD_NODE_NETWORKS": "10.0.0.0/33",
			"SWITCHYARD_SHUTDOWN_TIMEOUT": "-1s", "SWITCHYARD_LOG_FORMAT": "xml", "SWITCHYARD_LOG_LEVEL": "loud",
			"SWITCHYARD_TLS_CERT": "cert.pem", "SWITCHYARD_BOOTSTRAP_ADMIN_KEY": "short-secret",
		}, nil, []string{
			"SWITCHYARD_HTTP_ADDR", "SWITCHYARD_DB_OUTAGE_GRACE", "SWITCHYARD_BUDGET_ON_REDIS_FAILURE",
			"SWITCHYARD_NODE_NETWORKS", "SWITCHYARD_SHUTDOWN_TIMEOUT", "SWITCHYARD_LOG_FORMAT", "SWITCHYARD_LOG_LEVEL",
			"SWITCHYARD_TLS_CERT/SWITCHYARD_TLS_KEY", "SWITCHYARD_BOOTSTRAP_ADMIN_KEY",
		}, []string{good, "short-secret"}},
		{"failure-handling knobs", map[string]string{
			"SWITCHYARD_DATABASE_URL": "postgres://db/x", "SWITCHYARD_ENCRYPTION_KEYS": "1:" + good,
			"SWITCHYARD_REDIS_TIMEOUT": "0s", "SWITCHYARD_METERING_BUFFER": "none", "SWITCHYARD_SHUTDOWN_DRAIN_DELAY": "-5s",
		}, nil, []string{"SWITCHYARD_REDIS_TIMEOUT", "SWITCHYARD_METERING_BUFFER", "SWITCHYARD_SHUTDOWN_DRAIN_DELAY"}, nil},
		{"flags win over the environment", map[string]string{"SWITCHYARD_DATABASE_URL": "postgres://db/x", "SWITCHYARD_ENCRYPTION_KEYS": "1:" + good, "SWITCHYARD_LOG_LEVEL": "debug"},
			[]string{"--log-level", "shouting"}, []string{`SWITCHYARD_LOG_LEVEL: must be debug, info, warn or error, got "shouting"`}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := MainEnv(context.Background(), append([]string{"serve"}, tc.args...), &out, &errb, envOf(tc.env))
			if code != 1 {
				t.Fatalf("exit %d, want 1; stderr:\n%s", code, errb.String())
			}
			msg := errb.String()
			if strings.Contains(msg, "panic") || strings.Contains(msg, "goroutine ") {
				t.Fatalf("panicked:\n%s", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message does not name %q:\n%s", w, msg)
				}
			}
			for _, s := range tc.secrets {
				if strings.Contains(msg, s) {
					t.Errorf("message repeats a secret (%.6s…):\n%s", s, msg)
				}
			}
		})
	}
}

func TestKeygen(t *testing.T) {
	var out, errb bytes.Buffer
	if code := MainEnv(context.Background(), []string{"keygen"}, &out, &errb, envOf(nil)); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	key := strings.TrimSpace(out.String())
	if _, err := keyring.Parse("1:"+key, ""); err != nil {
		t.Fatalf("keygen printed an unusable key: %v", err)
	}
	out.Reset()
	if code := MainEnv(context.Background(), []string{"keygen", "--version", "7"}, &out, &errb, envOf(nil)); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	kr, err := keyring.Parse(strings.TrimSpace(out.String()), "")
	if err != nil || kr.Primary() != 7 {
		t.Fatalf("keygen --version 7 printed %q (%v)", out.String(), err)
	}
	if code := MainEnv(context.Background(), []string{"keygen", "--version", "x"}, &out, &errb, envOf(nil)); code != 2 {
		t.Fatalf("bad --version: exit %d, want 2", code)
	}
}

func TestVersionAndUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := MainEnv(context.Background(), []string{"version"}, &out, &errb, envOf(nil)); code != 0 || !strings.HasPrefix(out.String(), "switchyard ") {
		t.Fatalf("version: exit %d, %q", code, out.String())
	}
	if code := MainEnv(context.Background(), []string{"frobnicate"}, &out, &errb, envOf(nil)); code != 2 || !strings.Contains(errb.String(), `unknown command "frobnicate"`) {
		t.Fatalf("unknown command: exit %d, %q", code, errb.String())
	}
	if code := MainEnv(context.Background(), nil, &out, &errb, envOf(nil)); code != 2 {
		t.Fatalf("no command: exit %d", code)
	}
}
