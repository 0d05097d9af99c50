package admin_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/switchyard-ai/switchyard/proto/switchyard/v1"

	"github.com/switchyard-ai/switchyard/gateway/store"
)

// TestEveryRPCOverGRPC walks every AdminService call through a real gRPC
// client against real Postgres, in the order an operator would make them.
func TestEveryRPCOverGRPC(t *testing.T) {
	e := newEnv(t)
	boot := withKey(bootstrapKey)

	ak, err := e.admin.CreateAdminKey(boot, &pb.CreateAdminKeyRequest{Name: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ak.GetApiKey(), "sya_") || ak.GetKey().GetId() == "" {
		t.Fatalf("CreateAdminKey = %v", ak)
	}
	ctx := withKey(ak.GetApiKey())

	// Tenants.
	tenant := &pb.Tenant{Id: "acme", Name: "Acme", AllowedModels: []string{"gpt-4o"}, RequestsPerMinute: 60,
		TokensPerMinute: 100000, DailyTokenBudget: 1000000, MonthlyCostBudgetUsd: 25.5, Priority: 2, Interactive: true}
	got, err := e.admin.UpsertTenant(ctx, &pb.UpsertTenantRequest{Tenant: tenant})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetId() != "acme" || got.GetRequestsPerMinute() != 60 || !got.GetInteractive() || got.GetCreatedAt() == nil {
		t.Fatalf("UpsertTenant = %v", got)
	}
	if g, err := e.admin.GetTenant(ctx, &pb.GetTenantRequest{Id: "acme"}); err != nil || g.GetMonthlyCostBudgetUsd() != 25.5 {
		t.Fatalf("GetTenant = %v, %v", g, err)
	}
	if l, err := e.admin.ListTenants(ctx, &pb.ListTenantsRequest{}); err != nil || len(l.GetTenants()) != 1 {
		t.Fatalf("ListTenants = %v, %v", l, err)
	}

	// Client keys: the key is shown once.
	ck, err := e.admin.CreateClientKey(ctx, &pb.CreateClientKeyRequest{TenantId: "acme", Name: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ck.GetApiKey(), "syk_") || ck.GetKey().GetTenantId() != "acme" {
		t.Fatalf("CreateClientKey = %v", ck)
	}
	lk, err := e.admin.ListClientKeys(ctx, &pb.ListClientKeysRequest{TenantId: "acme"})
	if err != nil || len(lk.GetKeys()) != 1 {
		t.Fatalf("ListClientKeys = %v, %v", lk, err)
	}
	assertNoSecret(t, "ListClientKeys", lk, ck.GetApiKey())
	rk, err := e.admin.RevokeClientKey(ctx, &pb.RevokeClientKeyRequest{KeyId: ck.GetKey().GetId()})
	if err != nil || rk.GetRevokedAt() == nil {
		t.Fatalf("RevokeClientKey = %v, %v", rk, err)
	}

	// Admin keys.
	ak2, err := e.admin.CreateAdminKey(ctx, &pb.CreateAdminKeyRequest{Name: "second"})
	if err != nil {
		t.Fatal(err)
	}
	la, err := e.admin.ListAdminKeys(ctx, &pb.ListAdminKeysRequest{})
	if err != nil || len(la.GetKeys()) != 2 {
		t.Fatalf("ListAdminKeys = %v, %v", la, err)
	}
	assertNoSecret(t, "ListAdminKeys", la, ak.GetApiKey(), ak2.GetApiKey())
	if r, err := e.admin.RevokeAdminKey(ctx, &pb.RevokeAdminKeyRequest{KeyId: ak2.GetKey().GetId()}); err != nil || r.GetRevokedAt() == nil {
		t.Fatalf("RevokeAdminKey = %v, %v", r, err)
	}
	_, err = e.admin.ListTenants(withKey(ak2.GetApiKey()), &pb.ListTenantsRequest{})
	wantCode(t, err, codes.Unauthenticated, "revoked")

	// Vendors: the key is write-only.
	const vendorKey = "sk-canary-vendor-4f1c2d9e8b7a6"
	v, err := e.admin.UpsertVendor(ctx, &pb.UpsertVendorRequest{Vendor: &pb.Vendor{Id: "openai", BaseUrl: "https://api.openai.com/v1", Enabled: true}})
	if err != nil || v.GetKeySet() {
		t.Fatalf("UpsertVendor = %v, %v", v, err)
	}
	v, err = e.admin.SetVendorKey(ctx, &pb.SetVendorKeyRequest{VendorId: "openai", ApiKey: vendorKey})
	if err != nil || !v.GetKeySet() || v.GetKeyVersion() != 1 {
		t.Fatalf("SetVendorKey = %v, %v", v, err)
	}
	lv, err := e.admin.ListVendors(ctx, &pb.ListVendorsRequest{})
	if err != nil || len(lv.GetVendors()) != 1 || !lv.GetVendors()[0].GetKeySet() {
		t.Fatalf("ListVendors = %v, %v", lv, err)
	}
	assertNoSecret(t, "ListVendors", lv, vendorKey)

	// Models, as SPEC §1 registers one, plus a cloud one.
	m, err := e.admin.UpsertModel(ctx, &pb.UpsertModelRequest{Model: &pb.Model{
		Id: "gemma4:26b-a4b-it-qat", Vendor: "local", Efforts: []pb.Effort{pb.Effort_EFFORT_LOW, pb.Effort_EFFORT_MEDIUM},
		Capabilities: []string{"no_thinking"}, QueueTimeoutMs: 2000, Enabled: true,
	}})
	if err != nil || m.GetUpstreamModel() != "gemma4:26b-a4b-it-qat" || len(m.GetEfforts()) != 2 {
		t.Fatalf("UpsertModel = %v, %v", m, err)
	}
	if _, err := e.admin.UpsertModel(ctx, &pb.UpsertModelRequest{Model: &pb.Model{
		Id: "gpt-4o", Vendor: "openai", UpstreamModel: "gpt-4o-2024-08-06", Fallbacks: []string{"gemma4:26b-a4b-it-qat"},
		InputPricePerMtok: 2.5, OutputPricePerMtok: 10, Enabled: true,
	}}); err != nil {
		t.Fatal(err)
	}
	if g, err := e.admin.GetModel(ctx, &pb.GetModelRequest{Id: "gpt-4o"}); err != nil || g.GetUpstreamModel() != "gpt-4o-2024-08-06" || g.GetQueueTimeoutMs() != 2000 {
		t.Fatalf("GetModel = %v, %v", g, err)
	}
	if l, err := e.admin.ListModels(ctx, &pb.ListModelsRequest{}); err != nil || len(l.GetModels()) != 2 {
		t.Fatalf("ListModels = %v, %v", l, err)
	}

	// Nodes.
	nk, err := e.admin.MintNodeKey(ctx, &pb.MintNodeKeyRequest{Name: "anna-mac", NodeId: "anna-mac"})
	if err != nil || !strings.HasPrefix(nk.GetApiKey(), "syn_") || nk.GetNodeId() != "anna-mac" || nk.GetKeyId() == "" {
		t.Fatalf("MintNodeKey = %v, %v", nk, err)
	}
	ln, err := e.admin.ListNodes(ctx, &pb.ListNodesRequest{})
	if err != nil || len(ln.GetNodes()) != 1 || ln.GetNodes()[0].GetNodeId() != "anna-mac" || ln.GetNodes()[0].GetWeight() != 1 {
		t.Fatalf("ListNodes = %v, %v", ln, err)
	}
	assertNoSecret(t, "ListNodes", ln, nk.GetApiKey())
	if n, err := e.admin.DrainNode(ctx, &pb.DrainNodeRequest{NodeId: "anna-mac", Drain: true}); err != nil || !n.GetDrainRequested() {
		t.Fatalf("DrainNode = %v, %v", n, err)
	}
	hb, err := e.node.Heartbeat(withKey(nk.GetApiKey()), &pb.HeartbeatRequest{NodeId: "anna-mac", Engine: "ollama"})
	if err != nil || !hb.GetDrain() || hb.GetIntervalMs() != 5000 {
		t.Fatalf("Heartbeat = %v, %v", hb, err)
	}
	if n, err := e.admin.SetNodeWeight(ctx, &pb.SetNodeWeightRequest{NodeId: "anna-mac", Weight: 2.5}); err != nil || n.GetWeight() != 2.5 {
		t.Fatalf("SetNodeWeight = %v, %v", n, err)
	}
	if _, err := e.admin.RevokeNodeKey(ctx, &pb.RevokeNodeKeyRequest{NodeId: "anna-mac"}); err != nil {
		t.Fatal(err)
	}
	_, err = e.node.Heartbeat(withKey(nk.GetApiKey()), &pb.HeartbeatRequest{NodeId: "anna-mac"})
	wantCode(t, err, codes.Unauthenticated)

	// Encryption: everything is already under the primary version (the
	// vendor key; the revoked node key was dropped with its revocation).
	rot, err := e.admin.RotateEncryption(ctx, &pb.RotateEncryptionRequest{DryRun: true})
	if err != nil || rot.GetRewritten() != 0 || rot.GetRowsPerVersion()[1] != 1 || !rot.GetDryRun() {
		t.Fatalf("RotateEncryption dry run = %v, %v", rot, err)
	}

	// Usage.
	now := time.Now().UTC()
	if err := e.store.InsertUsage(context.Background(), []store.UsageEvent{
		{Time: now, RequestID: "r1", TenantID: "acme", KeyID: ck.GetKey().GetId(), Model: "gpt-4o", Target: "vendor:openai", InputTokens: 10, OutputTokens: 5, CostUSD: 0.001, Status: 200},
		{Time: now, RequestID: "r2", TenantID: "acme", KeyID: ck.GetKey().GetId(), Model: "gpt-4o", Target: "vendor:openai", InputTokens: 20, OutputTokens: 7, CostUSD: 0.002, Status: 200},
	}); err != nil {
		t.Fatal(err)
	}
	u, err := e.admin.GetUsage(ctx, &pb.GetUsageRequest{TenantId: "acme", Since: timestamppb.New(now.Add(-time.Hour)), GroupBy: []string{"tenant", "model", "target"}})
	if err != nil || len(u.GetRows()) != 1 {
		t.Fatalf("GetUsage = %v, %v", u, err)
	}
	if r := u.GetRows()[0]; r.GetRequests() != 2 || r.GetInputTokens() != 30 || r.GetOutputTokens() != 12 || r.GetTarget() != "vendor:openai" {
		t.Fatalf("usage row = %v", r)
	}

	// Deletes.
	if _, err := e.admin.DeleteModel(ctx, &pb.DeleteModelRequest{Id: "gpt-4o"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.DeleteVendor(ctx, &pb.DeleteVendorRequest{Id: "openai"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.DeleteTenant(ctx, &pb.DeleteTenantRequest{Id: "acme"}); err != nil {
		t.Fatal(err)
	}
	_, err = e.admin.GetTenant(ctx, &pb.GetTenantRequest{Id: "acme"})
	wantCode(t, err, codes.NotFound, `"acme"`)

	// The audit log has every write, by whom, and no secret.
	al, err := e.admin.ListAuditLog(ctx, &pb.ListAuditLogRequest{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	actions := map[string]bool{}
	for _, en := range al.GetEntries() {
		actions[en.GetAction()] = true
		if en.GetActorKeyId() == "" {
			t.Errorf("audit entry %v has no actor", en)
		}
	}
	for _, a := range []string{"UpsertTenant", "CreateClientKey", "RevokeClientKey", "CreateAdminKey", "RevokeAdminKey", "UpsertVendor",
		"SetVendorKey", "UpsertModel", "MintNodeKey", "DrainNode", "SetNodeWeight", "RevokeNodeKey", "DeleteModel", "DeleteVendor", "DeleteTenant"} {
		if !actions[a] {
			t.Errorf("no audit entry for %s (have %v)", a, actions)
		}
	}
	assertNoSecret(t, "ListAuditLog", al, vendorKey, ck.GetApiKey(), ak.GetApiKey(), ak2.GetApiKey(), nk.GetApiKey(), bootstrapKey)
	assertNoSecretText(t, "logs", e.logs.String(), vendorKey, ck.GetApiKey(), ak.GetApiKey(), ak2.GetApiKey(), nk.GetApiKey(), bootstrapKey)
}

// secretForms are the ways a secret could leak: as is, its secret part
// after the lookup id, and their SHA-256 in hex.
func secretForms(secret string) []string {
	forms := []string{secret}
	if i := strings.LastIndexByte(secret, '_'); i > 0 && strings.HasPrefix(secret, "sy") {
		forms = append(forms, secret[i+1:])
	}
	for _, f := range append([]string(nil), forms...) {
		h := sha256.Sum256([]byte(f))
		forms = append(forms, hex.EncodeToString(h[:]))
	}
	return forms
}

func assertNoSecret(t *testing.T, what string, m proto.Message, secrets ...string) {
	t.Helper()
	assertNoSecretText(t, what, protojson.Format(m)+prototext.Format(m), secrets...)
}

func assertNoSecretText(t *testing.T, what, text string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		for _, f := range secretForms(s) {
			if strings.Contains(text, f) {
				t.Errorf("%s contains a secret (%.8s…)", what, f)
			}
		}
	}
}

func TestAuthentication(t *testing.T) {
	e := newEnv(t)
	boot := withKey(bootstrapKey)
	ak, err := e.admin.CreateAdminKey(boot, &pb.CreateAdminKeyRequest{Name: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := withKey(ak.GetApiKey())
	if _, err := e.admin.UpsertTenant(ctx, &pb.UpsertTenantRequest{Tenant: &pb.Tenant{Id: "t1"}}); err != nil {
		t.Fatal(err)
	}
	ck, err := e.admin.CreateClientKey(ctx, &pb.CreateClientKeyRequest{TenantId: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	nk, err := e.admin.MintNodeKey(ctx, &pb.MintNodeKeyRequest{NodeId: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	// A well-formed key whose secret is wrong.
	wrongSecret := ak.GetApiKey()[:len(ak.GetApiKey())-4] + "aaaa"
	if wrongSecret == ak.GetApiKey() {
		wrongSecret = ak.GetApiKey()[:len(ak.GetApiKey())-4] + "bbbb"
	}

	for _, tc := range []struct {
		name string
		ctx  context.Context
	}{
		{"no key", context.Background()},
		{"garbage", withKey("not-a-key")},
		{"wrong secret", withKey(wrongSecret)},
		{"unknown id", withKey("sya_aaaaaaaaaaaa_" + strings.Repeat("a", 32))},
		{"client key", withKey(ck.GetApiKey())},
		{"node key", withKey(nk.GetApiKey())},
		{"near-bootstrap", withKey(bootstrapKey + "x")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.admin.ListTenants(tc.ctx, &pb.ListTenantsRequest{})
			wantCode(t, err, codes.Unauthenticated)
		})
	}
	t.Run("revoked admin key", func(t *testing.T) {
		k, err := e.admin.CreateAdminKey(ctx, &pb.CreateAdminKeyRequest{Name: "temp"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.admin.RevokeAdminKey(ctx, &pb.RevokeAdminKeyRequest{KeyId: k.GetKey().GetId()}); err != nil {
			t.Fatal(err)
		}
		_, err = e.admin.ListTenants(withKey(k.GetApiKey()), &pb.ListTenantsRequest{})
		wantCode(t, err, codes.Unauthenticated, "revoked")
	})
	t.Run("admin key on NodeService", func(t *testing.T) {
		_, err := e.node.Heartbeat(ctx, &pb.HeartbeatRequest{NodeId: "n1"})
		wantCode(t, err, codes.Unauthenticated)
	})
	t.Run("node key for another node", func(t *testing.T) {
		_, err := e.node.Heartbeat(withKey(nk.GetApiKey()), &pb.HeartbeatRequest{NodeId: "someone-else"})
		wantCode(t, err, codes.PermissionDenied, `this key belongs to node "n1"`)
	})
	t.Run("health and reflection need no key", func(t *testing.T) {
		h, err := healthpb.NewHealthClient(e.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "switchyard.v1.AdminService"})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health = %v, %v", h, err)
		}
	})
	assertNoSecretText(t, "logs", e.logs.String(), ak.GetApiKey(), ck.GetApiKey(), nk.GetApiKey(), bootstrapKey, wrongSecret)
}

func TestNotFoundNamesTheID(t *testing.T) {
	e := newEnv(t)
	ctx := withKey(bootstrapKey)
	for _, tc := range []struct {
		name string
		call func() error
		id   string
	}{
		{"GetTenant", func() error { _, err := e.admin.GetTenant(ctx, &pb.GetTenantRequest{Id: "nobody"}); return err }, "nobody"},
		{"DeleteTenant", func() error { _, err := e.admin.DeleteTenant(ctx, &pb.DeleteTenantRequest{Id: "nobody"}); return err }, "nobody"},
		{"CreateClientKey", func() error {
			_, err := e.admin.CreateClientKey(ctx, &pb.CreateClientKeyRequest{TenantId: "nobody"})
			return err
		}, "nobody"},
		{"ListClientKeys", func() error {
			_, err := e.admin.ListClientKeys(ctx, &pb.ListClientKeysRequest{TenantId: "nobody"})
			return err
		}, "nobody"},
		{"RevokeClientKey", func() error {
			_, err := e.admin.RevokeClientKey(ctx, &pb.RevokeClientKeyRequest{KeyId: "nokey"})
			return err
		}, "nokey"},
		{"RevokeAdminKey", func() error {
			_, err := e.admin.RevokeAdminKey(ctx, &pb.RevokeAdminKeyRequest{KeyId: "nokey"})
			return err
		}, "nokey"},
		{"SetVendorKey", func() error {
			_, err := e.admin.SetVendorKey(ctx, &pb.SetVendorKeyRequest{VendorId: "novendor", ApiKey: "k"})
			return err
		}, "novendor"},
		{"DeleteVendor", func() error { _, err := e.admin.DeleteVendor(ctx, &pb.DeleteVendorRequest{Id: "novendor"}); return err }, "novendor"},
		{"UpsertModel with unknown vendor", func() error {
			_, err := e.admin.UpsertModel(ctx, &pb.UpsertModelRequest{Model: &pb.Model{Id: "m", Vendor: "novendor"}})
			return err
		}, "novendor"},
		{"GetModel", func() error { _, err := e.admin.GetModel(ctx, &pb.GetModelRequest{Id: "no/model:1"}); return err }, "no/model:1"},
		{"DeleteModel", func() error { _, err := e.admin.DeleteModel(ctx, &pb.DeleteModelRequest{Id: "nomodel"}); return err }, "nomodel"},
		{"RevokeNodeKey", func() error {
			_, err := e.admin.RevokeNodeKey(ctx, &pb.RevokeNodeKeyRequest{NodeId: "nonode"})
			return err
		}, "nonode"},
		{"DrainNode", func() error { _, err := e.admin.DrainNode(ctx, &pb.DrainNodeRequest{NodeId: "nonode"}); return err }, "nonode"},
		{"SetNodeWeight", func() error {
			_, err := e.admin.SetNodeWeight(ctx, &pb.SetNodeWeightRequest{NodeId: "nonode", Weight: 1})
			return err
		}, "nonode"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantCode(t, tc.call(), codes.NotFound, tc.id) })
	}
}

func TestInvalidArgumentNamesTheField(t *testing.T) {
	e := newEnv(t)
	ctx := withKey(bootstrapKey)
	if _, err := e.admin.UpsertVendor(ctx, &pb.UpsertVendorRequest{Vendor: &pb.Vendor{Id: "v", BaseUrl: "http://10.0.0.1/v1"}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		call  func() error
		field string
	}{
		{"negative requests_per_minute", func() error {
			_, err := e.admin.UpsertTenant(ctx, &pb.UpsertTenantRequest{Tenant: &pb.Tenant{Id: "t", RequestsPerMinute: -1}})
			return err
		}, "tenant.requests_per_minute"},
		{"negative daily budget", func() error {
			_, err := e.admin.UpsertTenant(ctx, &pb.UpsertTenantRequest{Tenant: &pb.Tenant{Id: "t", DailyTokenBudget: -5}})
			return err
		}, "tenant.daily_token_budget"},
		{"negative cost budget", func() error {
			_, err := e.admin.UpsertTenant(ctx, &pb.UpsertTenantRequest{Tenant: &pb.Tenant{Id: "t", MonthlyCostBudgetUsd: -1}})
			return err
		}, "tenant.monthly_cost_budget_usd"},
		{"tenant id with a space", func() error {
			_, err := e.admin.UpsertTenant(ctx, &pb.UpsertTenantRequest{Tenant: &pb.Tenant{Id: "a b"}})
			return err
		}, "tenant.id"},
		{"missing tenant", func() error { _, err := e.admin.UpsertTenant(ctx, &pb.UpsertTenantRequest{}); return err }, "tenant"},
		{"empty model id", func() error {
			_, err := e.admin.UpsertModel(ctx, &pb.UpsertModelRequest{Model: &pb.Model{Vendor: "local"}})
			return err
		}, "model.id"},
		{"model id auto", func() error {
			_, err := e.admin.UpsertModel(ctx, &pb.UpsertModelRequest{Model: &pb.Model{Id: "auto", Vendor: "local"}})
			return err
		}, "model.id"},
		{"unspecified effort", func() error {
			_, err := e.admin.UpsertModel(ctx, &pb.UpsertModelRequest{Model: &pb.Model{Id: "m", Vendor: "local", Efforts: []pb.Effort{pb.Effort_EFFORT_UNSPECIFIED}}})
			return err
		}, "model.efforts[0]"},
		{"unknown effort number", func() error {
			_, err := e.admin.UpsertModel(ctx, &pb.UpsertModelRequest{Model: &pb.Model{Id: "m", Vendor: "local", Efforts: []pb.Effort{pb.Effort_EFFORT_LOW, pb.Effort(42)}}})
			return err
		}, "model.efforts[1]"},
		{"negative queue timeout", func() error {
			_, err := e.admin.UpsertModel(ctx, &pb.UpsertModelRequest{Model: &pb.Model{Id: "m", Vendor: "local", QueueTimeoutMs: -1}})
			return err
		}, "model.queue_timeout_ms"},
		{"unregistered fallback", func() error {
			_, err := e.admin.UpsertModel(ctx, &pb.UpsertModelRequest{Model: &pb.Model{Id: "m", Vendor: "local", Fallbacks: []string{"ghost"}}})
			return err
		}, "model.fallbacks[0]"},
		{"vendor local", func() error {
			_, err := e.admin.UpsertVendor(ctx, &pb.UpsertVendorRequest{Vendor: &pb.Vendor{Id: "local", BaseUrl: "http://x"}})
			return err
		}, "vendor.id"},
		{"vendor URL with credentials", func() error {
			_, err := e.admin.UpsertVendor(ctx, &pb.UpsertVendorRequest{Vendor: &pb.Vendor{Id: "w", BaseUrl: "https://user:pw@example.com"}})
			return err
		}, "vendor.base_url"},
		{"vendor URL not http", func() error {
			_, err := e.admin.UpsertVendor(ctx, &pb.UpsertVendorRequest{Vendor: &pb.Vendor{Id: "w", BaseUrl: "ftp://example.com"}})
			return err
		}, "vendor.base_url"},
		{"vendor key with a newline", func() error {
			_, err := e.admin.SetVendorKey(ctx, &pb.SetVendorKeyRequest{VendorId: "v", ApiKey: "sk-1\r\nX-Evil: 1"})
			return err
		}, "api_key"},
		{"empty vendor key", func() error {
			_, err := e.admin.SetVendorKey(ctx, &pb.SetVendorKeyRequest{VendorId: "v"})
			return err
		}, "api_key"},
		{"node id", func() error {
			_, err := e.admin.MintNodeKey(ctx, &pb.MintNodeKeyRequest{NodeId: "../etc"})
			return err
		}, "node_id"},
		{"zero weight", func() error {
			_, err := e.admin.SetNodeWeight(ctx, &pb.SetNodeWeightRequest{NodeId: "n", Weight: 0})
			return err
		}, "weight"},
		{"usage group", func() error {
			_, err := e.admin.GetUsage(ctx, &pb.GetUsageRequest{GroupBy: []string{"colour"}})
			return err
		}, "group_by[0]"},
		{"audit limit", func() error { _, err := e.admin.ListAuditLog(ctx, &pb.ListAuditLogRequest{Limit: -1}); return err }, "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantCode(t, tc.call(), codes.InvalidArgument, tc.field) })
	}
	t.Run("vendor in use cannot be deleted", func(t *testing.T) {
		if _, err := e.admin.UpsertModel(ctx, &pb.UpsertModelRequest{Model: &pb.Model{Id: "uses-v", Vendor: "v"}}); err != nil {
			t.Fatal(err)
		}
		_, err := e.admin.DeleteVendor(ctx, &pb.DeleteVendorRequest{Id: "v"})
		wantCode(t, err, codes.FailedPrecondition, "uses-v")
	})
}

// TestPlaintextKeysShownOnce: after creation no call returns the key, not
// even in a changed form.
func TestPlaintextKeysShownOnce(t *testing.T) {
	e := newEnv(t)
	ctx := withKey(bootstrapKey)
	if _, err := e.admin.UpsertTenant(ctx, &pb.UpsertTenantRequest{Tenant: &pb.Tenant{Id: "t"}}); err != nil {
		t.Fatal(err)
	}
	ck, _ := e.admin.CreateClientKey(ctx, &pb.CreateClientKeyRequest{TenantId: "t"})
	ak, _ := e.admin.CreateAdminKey(ctx, &pb.CreateAdminKeyRequest{Name: "a"})
	nk, _ := e.admin.MintNodeKey(ctx, &pb.MintNodeKeyRequest{NodeId: "n"})
	if _, err := e.admin.UpsertVendor(ctx, &pb.UpsertVendorRequest{Vendor: &pb.Vendor{Id: "v", BaseUrl: "https://example.com/v1"}}); err != nil {
		t.Fatal(err)
	}
	const vendorKey = "sk-canary-once-9d8c7b6a5f4e3d2c1b"
	if _, err := e.admin.SetVendorKey(ctx, &pb.SetVendorKeyRequest{VendorId: "v", ApiKey: vendorKey}); err != nil {
		t.Fatal(err)
	}
	secrets := []string{ck.GetApiKey(), ak.GetApiKey(), nk.GetApiKey(), vendorKey}
	var all []proto.Message
	for _, call := range []func() (proto.Message, error){
		func() (proto.Message, error) { return e.admin.ListClientKeys(ctx, &pb.ListClientKeysRequest{}) },
		func() (proto.Message, error) { return e.admin.ListAdminKeys(ctx, &pb.ListAdminKeysRequest{}) },
		func() (proto.Message, error) { return e.admin.ListNodes(ctx, &pb.ListNodesRequest{}) },
		func() (proto.Message, error) { return e.admin.ListVendors(ctx, &pb.ListVendorsRequest{}) },
		func() (proto.Message, error) { return e.admin.ListAuditLog(ctx, &pb.ListAuditLogRequest{}) },
		func() (proto.Message, error) { return e.admin.ListTenants(ctx, &pb.ListTenantsRequest{}) },
	} {
		m, err := call()
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, m)
	}
	for _, m := range all {
		assertNoSecret(t, string(m.ProtoReflect().Descriptor().Name()), m, secrets...)
	}
	for _, p := range []string{"/admin/v1/tenants/t/keys", "/admin/v1/admin-keys", "/admin/v1/nodes", "/admin/v1/vendors", "/admin/v1/audit"} {
		code, _, body := e.do("GET", p, bootstrapKey, nil)
		if code != 200 {
			t.Fatalf("GET %s = %d %s", p, code, body)
		}
		assertNoSecretText(t, p, body, secrets...)
	}
	assertNoSecretText(t, "logs", e.logs.String(), secrets...)
}
