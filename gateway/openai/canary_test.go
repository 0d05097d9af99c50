package openai_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/internal/simengine"
)

// TestSecretsNeverLeak sends canary secrets through every door — the
// vendor key, the client key, Authorization values, an upstream that
// echoes its key in an error — and looks for them (and their SHA-256) in
// the logs, the error bodies, the metrics and the audit log.
func TestSecretsNeverLeak(t *testing.T) {
	e := newEnv(t, envOptions{})
	v := e.addVendor("openai", simengine.Config{Models: []string{"gpt-4o"}})
	e.addModel(store.Model{ID: "gpt-4o", Vendor: "openai"})

	const echoKey = "sk-canary-echo-2b8f4e6a1c9d3f7e"
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		status := http.StatusBadRequest
		if strings.Contains(r.URL.Path, "completions") && r.Header.Get("X-Fail") == "" {
			status = http.StatusUnauthorized
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"error":{"message":"Incorrect API key provided: ` + echoKey + ` (also ` + echoKey[:12] + `...` + echoKey[len(echoKey)-8:] + `)"}}`))
	}))
	defer echo.Close()
	e.registerVendor("echo", echo.URL+"/v1", echoKey)
	e.addModel(store.Model{ID: "echoed", Vendor: "echo"})
	e.addModel(store.Model{ID: "echoed-bad", Vendor: "echo", UpstreamModel: "x"})
	e.reload()

	const authCanary = "canary-authorization-value-5d1e"
	var bodies []string
	add := func(r response) {
		bodies = append(bodies, r.body, strings.Join(r.header.Values("X-Switchyard-Fallback-Reason"), ""))
	}
	add(e.post("/v1/chat/completions", e.key, chat("gpt-4o")))
	add(e.post("/v1/chat/completions", e.key, chat("echoed")))
	add(e.post("/v1/chat/completions", e.key, chat("echoed-bad"), "X-Fail", "1"))
	add(e.post("/v1/chat/completions", "", chat("gpt-4o"), "Authorization", "Bearer "+authCanary))
	add(e.post("/v1/chat/completions", "", chat("gpt-4o"), "Authorization", authCanary))
	add(e.post("/v1/chat/completions", "", chat("gpt-4o"), "Api-Key", authCanary))
	wrong := e.key[:len(e.key)-6] + "zzzzzz"
	add(e.post("/v1/chat/completions", wrong, chat("gpt-4o")))
	add(e.post("/v1/chat/completions?key="+authCanary, e.key, chat("nope")))
	time.Sleep(50 * time.Millisecond)

	audit, err := e.store.ListAudit(context.Background(), time.Time{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var auditText strings.Builder
	for _, a := range audit {
		auditText.WriteString(a.BeforeJSON + a.AfterJSON + a.Entity + a.Action)
	}
	places := map[string]string{
		"logs":         e.logs.String(),
		"error bodies": strings.Join(bodies, "\n"),
		"metrics":      e.metricsText(),
		"audit log":    auditText.String(),
	}
	secrets := []string{v.key, echoKey, e.key, wrong, authCanary, echoKey[len(echoKey)-8:]}
	for _, s := range secrets {
		forms := []string{s}
		if i := strings.LastIndexByte(s, '_'); i > 0 {
			forms = append(forms, s[i+1:])
		}
		for _, f := range append([]string(nil), forms...) {
			h := sha256.Sum256([]byte(f))
			forms = append(forms, hex.EncodeToString(h[:]))
		}
		for where, text := range places {
			for _, f := range forms {
				if strings.Contains(text, f) {
					t.Errorf("%s contain a secret (%.10s…)", where, f)
				}
			}
		}
	}
	if !strings.Contains(places["error bodies"], "[redacted]") {
		t.Errorf("the echoing upstream's message was not passed on redacted: %s", places["error bodies"])
	}
}
