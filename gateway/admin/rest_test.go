package admin_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// TestEveryRPCOverREST drives every AdminService call through grpc-gateway
// with the SPEC's JSON field names.
func TestEveryRPCOverREST(t *testing.T) {
	e := newEnv(t)
	must := func(method, path, key string, body any, want int) map[string]any {
		t.Helper()
		code, m, raw := e.do(method, path, key, body)
		if code != want {
			t.Fatalf("%s %s = %d, want %d: %s", method, path, code, want, raw)
		}
		return m
	}
	ak := must("POST", "/admin/v1/admin-keys", bootstrapKey, map[string]any{"name": "ops"}, 200)
	key := ak["api_key"].(string)
	akID := ak["key"].(map[string]any)["id"].(string)

	tn := must("POST", "/admin/v1/tenants", key, map[string]any{"tenant": map[string]any{
		"id": "acme", "name": "Acme", "allowed_models": []string{"gpt-4o"}, "requests_per_minute": 60,
		"tokens_per_minute": 1000, "daily_token_budget": 100000, "monthly_cost_budget_usd": 12.5, "priority": 1, "interactive": true}}, 200)
	if tn["id"] != "acme" || tn["monthly_cost_budget_usd"] != 12.5 || tn["interactive"] != true {
		t.Fatalf("tenant = %v", tn)
	}
	must("GET", "/admin/v1/tenants/acme", key, nil, 200)
	if l := must("GET", "/admin/v1/tenants", key, nil, 200); len(l["tenants"].([]any)) != 1 {
		t.Fatalf("tenants = %v", l)
	}
	ck := must("POST", "/admin/v1/tenants/acme/keys", key, map[string]any{"name": "app"}, 200)
	ckID := ck["key"].(map[string]any)["id"].(string)
	if !strings.HasPrefix(ck["api_key"].(string), "syk_") || ck["key"].(map[string]any)["tenant_id"] != "acme" {
		t.Fatalf("client key = %v", ck)
	}
	if l := must("GET", "/admin/v1/tenants/acme/keys", key, nil, 200); len(l["keys"].([]any)) != 1 {
		t.Fatalf("keys = %v", l)
	}
	must("POST", "/admin/v1/client-keys/"+ckID+":revoke", key, map[string]any{}, 200)
	ak2 := must("POST", "/admin/v1/admin-keys", key, map[string]any{"name": "temp"}, 200)
	must("GET", "/admin/v1/admin-keys", key, nil, 200)
	must("POST", "/admin/v1/admin-keys/"+ak2["key"].(map[string]any)["id"].(string)+":revoke", key, map[string]any{}, 200)

	v := must("POST", "/admin/v1/vendors", key, map[string]any{"vendor": map[string]any{"id": "openai", "base_url": "https://api.openai.com/v1", "enabled": true}}, 200)
	if v["key_set"] != false {
		t.Fatalf("vendor = %v", v)
	}
	v = must("POST", "/admin/v1/vendors/openai:setKey", key, map[string]any{"api_key": "sk-rest-canary-123456"}, 200)
	if v["key_set"] != true || v["key_version"] != float64(1) {
		t.Fatalf("vendor = %v", v)
	}
	if l := must("GET", "/admin/v1/vendors", key, nil, 200); len(l["vendors"].([]any)) != 1 {
		t.Fatalf("vendors = %v", l)
	}

	m := must("POST", "/admin/v1/models", key, map[string]any{"model": map[string]any{
		"id": "gemma4:26b-a4b-it-qat", "vendor": "local", "efforts": []string{"EFFORT_LOW", "EFFORT_MEDIUM"},
		"capabilities": []string{"no_thinking"}, "queue_timeout_ms": 2000, "enabled": true}}, 200)
	if m["id"] != "gemma4:26b-a4b-it-qat" || len(m["efforts"].([]any)) != 2 {
		t.Fatalf("model = %v", m)
	}
	must("POST", "/admin/v1/models", key, map[string]any{"model": map[string]any{"id": "openai/gpt-4o", "vendor": "openai", "enabled": true}}, 200)
	for _, id := range []string{"gemma4:26b-a4b-it-qat", "openai/gpt-4o"} {
		g := must("GET", "/admin/v1/model?id="+url.QueryEscape(id), key, nil, 200)
		if g["id"] != id {
			t.Fatalf("GET model %s = %v", id, g)
		}
	}
	if l := must("GET", "/admin/v1/models", key, nil, 200); len(l["models"].([]any)) != 2 {
		t.Fatalf("models = %v", l)
	}

	nk := must("POST", "/admin/v1/node-keys", key, map[string]any{"name": "anna-mac", "node_id": "anna-mac"}, 200)
	if nk["node_id"] != "anna-mac" || !strings.HasPrefix(nk["api_key"].(string), "syn_") || nk["key_id"] == "" {
		t.Fatalf("node key = %v", nk)
	}
	if l := must("GET", "/admin/v1/nodes", key, nil, 200); len(l["nodes"].([]any)) != 1 {
		t.Fatalf("nodes = %v", l)
	}
	if n := must("POST", "/admin/v1/nodes/anna-mac:drain", key, map[string]any{"drain": true}, 200); n["drain_requested"] != true {
		t.Fatalf("drain = %v", n)
	}
	if n := must("POST", "/admin/v1/nodes/anna-mac:setWeight", key, map[string]any{"weight": 3}, 200); n["weight"] != float64(3) {
		t.Fatalf("weight = %v", n)
	}
	must("POST", "/admin/v1/node-keys/anna-mac:revoke", key, map[string]any{}, 200)

	rot := must("POST", "/admin/v1/encryption:rotate", key, map[string]any{"dry_run": true}, 200)
	if rot["dry_run"] != true || fmt.Sprint(rot["rewritten"]) != "0" {
		t.Fatalf("rotate = %v", rot)
	}
	if u := must("GET", "/admin/v1/usage?tenant_id=acme&group_by=tenant&group_by=day", key, nil, 200); u["rows"] == nil {
		t.Fatalf("usage = %v", u)
	}
	must("GET", "/admin/v1/usage?group_by=colour", key, nil, 400)
	al := must("GET", "/admin/v1/audit?limit=5", key, nil, 200)
	if n := len(al["entries"].([]any)); n != 5 {
		t.Fatalf("audit entries = %d, want 5", n)
	}
	entry := al["entries"].([]any)[0].(map[string]any)
	for _, f := range []string{"time", "actor_key_id", "action", "entity", "before_json", "after_json"} {
		if _, ok := entry[f]; !ok {
			t.Errorf("audit entry lacks %q: %v", f, entry)
		}
	}
	if entry["actor_key_id"] != akID {
		t.Errorf("actor = %v, want %s", entry["actor_key_id"], akID)
	}

	must("DELETE", "/admin/v1/model?id="+url.QueryEscape("openai/gpt-4o"), key, nil, 200)
	must("DELETE", "/admin/v1/vendors/openai", key, nil, 200)
	must("DELETE", "/admin/v1/tenants/acme", key, nil, 200)
	_, _, raw := e.do("GET", "/admin/v1/tenants/acme", key, nil)
	if !strings.Contains(raw, `\"acme\"`) && !strings.Contains(raw, `"acme"`) {
		t.Fatalf("404 body does not name the tenant: %s", raw)
	}
	must("GET", "/admin/v1/tenants/acme", key, nil, 404)
	must("POST", "/admin/v1/tenants", key, map[string]any{"tenant": map[string]any{"id": "x", "requests_per_minute": -1}}, 400)
	code, _, body := e.do("GET", "/admin/v1/openapi.json", "", nil)
	if code != 200 || !strings.Contains(body, "/admin/v1/tenants") {
		t.Fatalf("openapi = %d", code)
	}
}

// TestRESTNeedsAKey: every admin route answers 401 without a valid key,
// whatever form the request takes.
func TestRESTNeedsAKey(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ method, path string }{
		{"GET", "/admin/v1/tenants"},
		{"POST", "/admin/v1/tenants"},
		{"GET", "/admin/v1/vendors"},
		{"POST", "/admin/v1/node-keys"},
		{"POST", "/admin/v1/encryption:rotate"},
		{"GET", "/admin/v1/audit"},
		{"GET", "/admin/v1/model?id=x"},
	} {
		for _, key := range []string{"", "sya_aaaaaaaaaaaa_" + strings.Repeat("b", 32), "Bearer"} {
			code, _, _ := e.do(tc.method, tc.path, key, map[string]any{})
			if code != 401 {
				t.Errorf("%s %s with key %q = %d, want 401", tc.method, tc.path, key, code)
			}
		}
	}
}
