// Package storetest is the contract suite that every store.Store
// implementation passes (Run), with the fake Resealer it uses. Both the
// Postgres and the memory store run it, so `switchyard dev` behaves as
// production does.
package storetest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/gateway/store"
)

// admin is the actor of every write in the suite.
var admin = store.Actor{KeyID: "sya-test-admin"}

// Run runs the contract suite. open returns a new, empty store for each
// subtest and arranges its cleanup.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(*testing.T, store.Store)
	}{
		{"Tenants", testTenants},
		{"DeleteTenantRevokesClientKeys", testDeleteTenantRevokesKeys},
		{"ClientKeyNeedsTenant", testClientKeyNeedsTenant},
		{"Keys", testKeys},
		{"InvalidKeys", testInvalidKeys},
		{"RevokeKeyAndAnyAdminKey", testRevokeKey},
		{"NodeKeys", testNodeKeys},
		{"Vendors", testVendors},
		{"Models", testModels},
		{"Nodes", testNodes},
		{"ConfigVersion", testConfigVersion},
		{"ConcurrentWrites", testConcurrentWrites},
		{"Audit", testAudit},
		{"AuditNeverHoldsSecrets", testAuditCanary},
		{"ResealAll", testResealAll},
		{"Usage", testUsage},
		{"ListAudit", testListAudit},
		{"Ping", func(t *testing.T, s store.Store) {
			if err := s.Ping(t.Context()); err != nil {
				t.Fatalf("Ping: %v", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open(t)) })
	}
}

// --- helpers ---

// must returns v, failing the test when err is set:
// `k := must(s.GetKey(ctx, id))(t)`.
func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return v
	}
}

func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

// wantErr checks err is target and its message contains every part.
func wantErr(t *testing.T, err, target error, parts ...string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want %v", err, target)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

// wantNotFound checks a NotFound error for entity and id, with the message
// a person reads.
func wantNotFound(t *testing.T, err error, entity, id string) {
	t.Helper()
	wantErr(t, err, store.ErrNotFound, fmt.Sprintf("%q", id), "is not registered")
	var nf *store.NotFoundError
	if !errors.As(err, &nf) {
		t.Fatalf("error %v is not a *store.NotFoundError", err)
	}
	if nf.Entity != entity || nf.ID != id {
		t.Errorf("NotFound(%q, %q), want NotFound(%q, %q)", nf.Entity, nf.ID, entity, id)
	}
}

// sameJSON compares values by their JSON, which is also what the audit log
// and the API show; times compare as instants in UTC.
func sameJSON(t *testing.T, got, want any) {
	t.Helper()
	g, err := json.Marshal(got)
	ok(t, err)
	w, err := json.Marshal(want)
	ok(t, err)
	if string(g) != string(w) {
		t.Errorf("got  %s\nwant %s", g, w)
	}
}

func version(t *testing.T, s store.Store) int64 {
	t.Helper()
	return must(s.ConfigVersion(t.Context()))(t)
}

func hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

func keyIDs(ks []store.Key) []string {
	var ids []string
	for _, k := range ks {
		ids = append(ids, k.ID)
	}
	slices.Sort(ids)
	return ids
}

func tenant(t *testing.T, s store.Store, id string) store.Tenant {
	t.Helper()
	return must(s.UpsertTenant(t.Context(), admin, store.Tenant{ID: id, Name: "Tenant " + id}))(t)
}

func clientKey(t *testing.T, s store.Store, id, tenantID string) store.Key {
	t.Helper()
	return must(s.CreateKey(t.Context(), admin, store.Key{
		ID: id, Kind: store.KeyClient, Name: "key " + id, TenantID: tenantID, SecretHash: hash("secret-" + id),
	}))(t)
}

func nodeKey(t *testing.T, s store.Store, id, nodeID, name string) store.Key {
	t.Helper()
	return must(s.CreateKey(t.Context(), admin, store.Key{
		ID: id, Kind: store.KeyNode, Name: name, NodeID: nodeID, SecretHash: hash("secret-" + id),
		Sealed: Seal(1, "syn_"+id),
	}))(t)
}

func vendor(t *testing.T, s store.Store, id string) store.Vendor {
	t.Helper()
	return must(s.UpsertVendor(t.Context(), admin, store.Vendor{ID: id, BaseURL: "https://" + id + ".example/v1", Enabled: true}))(t)
}

func model(t *testing.T, s store.Store, id, vendorID string) store.Model {
	t.Helper()
	return must(s.UpsertModel(t.Context(), admin, store.Model{ID: id, Vendor: vendorID, Enabled: true}))(t)
}

// --- tenants ---

func testTenants(t *testing.T, s store.Store) {
	ctx := t.Context()
	if ts := must(s.ListTenants(ctx))(t); len(ts) != 0 {
		t.Fatalf("a new store lists tenants %v", ts)
	}
	in := store.Tenant{
		ID: "acme", Name: "Acme", AllowedModels: []string{"gemma4:26b-a4b-it-qat", "openai/gpt-4o"},
		RequestsPerMinute: 60, TokensPerMinute: 100000, DailyTokenBudget: 5000000, MonthlyCostBudgetUSD: 125.5,
		Priority: 2, Interactive: true,
	}
	created := must(s.UpsertTenant(ctx, admin, in))(t)
	if created.CreatedAt.IsZero() || created.UpdatedAt.IsZero() {
		t.Errorf("created tenant has no timestamps: %+v", created)
	}
	want := in
	want.CreatedAt, want.UpdatedAt = created.CreatedAt, created.UpdatedAt
	sameJSON(t, created, want)
	sameJSON(t, must(s.GetTenant(ctx, "acme"))(t), want)

	// An update replaces the settings and keeps the creation time; a nil
	// list comes back empty, not null.
	updated := must(s.UpsertTenant(ctx, admin, store.Tenant{ID: "acme", Name: "Acme Corp", Priority: 1}))(t)
	if updated.Name != "Acme Corp" || updated.Priority != 1 || updated.RequestsPerMinute != 0 || updated.Interactive {
		t.Errorf("update = %+v", updated)
	}
	if updated.AllowedModels == nil || len(updated.AllowedModels) != 0 {
		t.Errorf("AllowedModels = %#v, want an empty list", updated.AllowedModels)
	}
	if !updated.CreatedAt.Equal(created.CreatedAt) || updated.UpdatedAt.Before(created.UpdatedAt) {
		t.Errorf("times after update: created %v → %v, updated %v → %v",
			created.CreatedAt, updated.CreatedAt, created.UpdatedAt, updated.UpdatedAt)
	}
	sameJSON(t, must(s.GetTenant(ctx, "acme"))(t), updated)

	tenant(t, s, "beta")
	tenant(t, s, "Zeta") // byte order: upper case first
	var ids []string
	for _, tn := range must(s.ListTenants(ctx))(t) {
		ids = append(ids, tn.ID)
	}
	if want := []string{"Zeta", "acme", "beta"}; !slices.Equal(ids, want) {
		t.Errorf("ListTenants = %v, want %v", ids, want)
	}

	_, err := s.GetTenant(ctx, "nope")
	wantNotFound(t, err, "tenant", "nope")
	ok(t, s.DeleteTenant(ctx, admin, "beta"))
	_, err = s.GetTenant(ctx, "beta")
	wantNotFound(t, err, "tenant", "beta")
	wantNotFound(t, s.DeleteTenant(ctx, admin, "beta"), "tenant", "beta")

	_, err = s.UpsertTenant(ctx, admin, store.Tenant{Name: "no id"})
	wantErr(t, err, store.ErrInvalid)
}

func testDeleteTenantRevokesKeys(t *testing.T, s store.Store) {
	ctx := t.Context()
	tenant(t, s, "acme")
	tenant(t, s, "other")
	clientKey(t, s, "k1", "acme")
	clientKey(t, s, "k2", "acme")
	clientKey(t, s, "k3", "other")
	ok(t, s.DeleteTenant(ctx, admin, "acme"))
	for _, id := range []string{"k1", "k2"} {
		k := must(s.GetKey(ctx, id))(t)
		if !k.Revoked() {
			t.Errorf("key %s of the deleted tenant is not revoked", id)
		}
	}
	if k := must(s.GetKey(ctx, "k3"))(t); k.Revoked() {
		t.Errorf("another tenant's key was revoked")
	}
	_, err := s.CreateKey(ctx, admin, store.Key{ID: "k4", Kind: store.KeyClient, TenantID: "acme", SecretHash: hash("x")})
	wantNotFound(t, err, "tenant", "acme")
}

// --- keys ---

func testClientKeyNeedsTenant(t *testing.T, s store.Store) {
	ctx := t.Context()
	v0 := version(t, s)
	_, err := s.CreateKey(ctx, admin, store.Key{ID: "k1", Kind: store.KeyClient, TenantID: "ghost", SecretHash: hash("s")})
	wantNotFound(t, err, "tenant", "ghost")
	_, err = s.GetKey(ctx, "k1")
	wantNotFound(t, err, "key", "k1")
	if v := version(t, s); v != v0 {
		t.Errorf("a failed write moved the config version %d → %d", v0, v)
	}
}

func testKeys(t *testing.T, s store.Store) {
	ctx := t.Context()
	tenant(t, s, "a")
	tenant(t, s, "b")
	created := clientKey(t, s, "ka1", "a")
	clientKey(t, s, "ka2", "a")
	clientKey(t, s, "kb1", "b")
	must(s.CreateKey(ctx, admin, store.Key{ID: "adm1", Kind: store.KeyAdmin, Name: "ops", SecretHash: hash("adm")}))(t)
	nodeKey(t, s, "nk1", "gpu-1", "gpu one")

	if created.CreatedAt.IsZero() || created.Revoked() {
		t.Errorf("created key = %+v", created)
	}
	got := must(s.GetKey(ctx, "ka1"))(t)
	if got.Kind != store.KeyClient || got.TenantID != "a" || got.Name != "key ka1" || got.NodeID != "" ||
		string(got.SecretHash) != string(hash("secret-ka1")) || got.Sealed != nil || got.Revoked() ||
		!got.CreatedAt.Equal(created.CreatedAt) {
		t.Errorf("GetKey = %+v", got)
	}

	for _, c := range []struct {
		kind   store.KeyKind
		tenant string
		want   []string
	}{
		{store.KeyClient, "a", []string{"ka1", "ka2"}},
		{store.KeyClient, "b", []string{"kb1"}},
		{store.KeyClient, "", []string{"ka1", "ka2", "kb1"}},
		{store.KeyClient, "nobody", nil},
		{store.KeyAdmin, "", []string{"adm1"}},
		{store.KeyNode, "", []string{"nk1"}},
	} {
		if got := keyIDs(must(s.ListKeys(ctx, c.kind, c.tenant))(t)); !slices.Equal(got, c.want) {
			t.Errorf("ListKeys(%s, %q) = %v, want %v", c.kind, c.tenant, got, c.want)
		}
	}

	_, err := s.CreateKey(ctx, admin, store.Key{ID: "ka1", Kind: store.KeyClient, TenantID: "b", SecretHash: hash("again")})
	wantErr(t, err, store.ErrConflict, `"ka1"`)
	if k := must(s.GetKey(ctx, "ka1"))(t); k.TenantID != "a" {
		t.Errorf("a refused duplicate changed the key: %+v", k)
	}
	_, err = s.GetKey(ctx, "missing")
	wantNotFound(t, err, "key", "missing")
}

func testInvalidKeys(t *testing.T, s store.Store) {
	ctx := t.Context()
	tenant(t, s, "a")
	for name, k := range map[string]store.Key{
		"no id":             {Kind: store.KeyAdmin, SecretHash: hash("x")},
		"no hash":           {ID: "k", Kind: store.KeyAdmin},
		"unknown kind":      {ID: "k", Kind: "root", SecretHash: hash("x")},
		"client, no tenant": {ID: "k", Kind: store.KeyClient, SecretHash: hash("x")},
		"node, no node id":  {ID: "k", Kind: store.KeyNode, SecretHash: hash("x")},
	} {
		_, err := s.CreateKey(ctx, admin, k)
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: CreateKey = %v, want ErrInvalid", name, err)
		}
	}
}

func testRevokeKey(t *testing.T, s store.Store) {
	ctx := t.Context()
	if must(s.AnyAdminKey(ctx))(t) {
		t.Fatal("a new store has an admin key")
	}
	must(s.CreateKey(ctx, admin, store.Key{ID: "adm1", Kind: store.KeyAdmin, Name: "ops", SecretHash: hash("adm")}))(t)
	if !must(s.AnyAdminKey(ctx))(t) {
		t.Fatal("AnyAdminKey = false after creating one")
	}

	_, err := s.RevokeKey(ctx, admin, store.KeyClient, "adm1")
	wantErr(t, err, store.ErrNotFound, `"adm1"`)
	_, err = s.RevokeKey(ctx, admin, store.KeyAdmin, "missing")
	wantErr(t, err, store.ErrNotFound, `"missing"`)

	k := must(s.RevokeKey(ctx, admin, store.KeyAdmin, "adm1"))(t)
	if !k.Revoked() {
		t.Fatalf("RevokeKey returned %+v", k)
	}
	if must(s.AnyAdminKey(ctx))(t) {
		t.Error("AnyAdminKey = true with the only admin key revoked")
	}
	if got := must(s.GetKey(ctx, "adm1"))(t); !got.Revoked() || !got.RevokedAt.Equal(*k.RevokedAt) {
		t.Errorf("GetKey after revoke = %+v", got)
	}

	// Revoking twice is not an error and changes nothing.
	v := version(t, s)
	again := must(s.RevokeKey(ctx, admin, store.KeyAdmin, "adm1"))(t)
	if !again.Revoked() || !again.RevokedAt.Equal(*k.RevokedAt) {
		t.Errorf("second revoke = %+v, want the first revocation kept", again)
	}
	if got := version(t, s); got != v {
		t.Errorf("a second revoke moved the config version %d → %d", v, got)
	}
}

func testNodeKeys(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.NodeKey(ctx, "gpu-1")
	wantErr(t, err, store.ErrNotFound, `"gpu-1"`)
	_, err = s.GetNode(ctx, "gpu-1")
	wantNotFound(t, err, "node", "gpu-1")

	first := nodeKey(t, s, "nk1", "gpu-1", "anna's mac")
	n := must(s.GetNode(ctx, "gpu-1"))(t)
	if n.Name != "anna's mac" || n.Weight != 1 || n.Drain || n.CreatedAt.IsZero() {
		t.Errorf("registered node = %+v", n)
	}
	active := must(s.NodeKey(ctx, "gpu-1"))(t)
	if active.ID != "nk1" || active.NodeID != "gpu-1" || string(active.Sealed) != string(first.Sealed) ||
		string(active.Sealed) != string(Seal(1, "syn_nk1")) {
		t.Errorf("NodeKey = %+v", active)
	}

	// A new key for the same node replaces the old one; the node keeps its
	// name.
	nodeKey(t, s, "nk2", "gpu-1", "renamed")
	old := must(s.GetKey(ctx, "nk1"))(t)
	if !old.Revoked() || old.Sealed != nil {
		t.Errorf("previous node key after a new mint = %+v, want revoked without its sealed copy", old)
	}
	if k := must(s.NodeKey(ctx, "gpu-1"))(t); k.ID != "nk2" {
		t.Errorf("NodeKey = %s, want nk2", k.ID)
	}
	if n := must(s.GetNode(ctx, "gpu-1"))(t); n.Name != "anna's mac" {
		t.Errorf("node renamed by a new key: %+v", n)
	}
	if got := keyIDs(must(s.ListKeys(ctx, store.KeyNode, ""))(t)); !slices.Equal(got, []string{"nk1", "nk2"}) {
		t.Errorf("node keys = %v", got)
	}

	// A key without a name names the node after its id.
	nodeKey(t, s, "nk3", "gpu-2", "")
	if n := must(s.GetNode(ctx, "gpu-2"))(t); n.Name != "gpu-2" {
		t.Errorf("node without a name = %+v", n)
	}
	var nodes []string
	for _, n := range must(s.ListNodes(ctx))(t) {
		nodes = append(nodes, n.ID)
	}
	if !slices.Equal(nodes, []string{"gpu-1", "gpu-2"}) {
		t.Errorf("ListNodes = %v", nodes)
	}

	revoked := must(s.RevokeKey(ctx, admin, store.KeyNode, "nk2"))(t)
	if !revoked.Revoked() || revoked.Sealed != nil {
		t.Errorf("revoked node key = %+v, want revoked without its sealed copy", revoked)
	}
	_, err = s.NodeKey(ctx, "gpu-1")
	wantErr(t, err, store.ErrNotFound, `"gpu-1"`)
	must(s.GetNode(ctx, "gpu-1"))(t) // the node stays registered
}

// --- vendors and models ---

func testVendors(t *testing.T, s store.Store) {
	ctx := t.Context()
	v := vendor(t, s, "openai")
	if v.KeySealed != nil || v.KeyVersion != 0 || !v.Enabled || v.BaseURL != "https://openai.example/v1" || v.CreatedAt.IsZero() {
		t.Errorf("new vendor = %+v", v)
	}
	withKey := must(s.SetVendorKey(ctx, admin, "openai", Seal(3, "sk-1"), 3))(t)
	if string(withKey.KeySealed) != string(Seal(3, "sk-1")) || withKey.KeyVersion != 3 {
		t.Errorf("after SetVendorKey = %+v", withKey)
	}
	sameJSON(t, must(s.GetVendor(ctx, "openai"))(t), withKey)

	// Upsert changes what it is given and keeps the key.
	up := must(s.UpsertVendor(ctx, admin, store.Vendor{ID: "openai", BaseURL: "https://api.example/v2", Enabled: false}))(t)
	if up.BaseURL != "https://api.example/v2" || up.Enabled || string(up.KeySealed) != string(Seal(3, "sk-1")) ||
		up.KeyVersion != 3 || !up.CreatedAt.Equal(v.CreatedAt) {
		t.Errorf("after a second upsert = %+v", up)
	}

	_, err := s.SetVendorKey(ctx, admin, "ghost", Seal(1, "x"), 1)
	wantNotFound(t, err, "vendor", "ghost")
	_, err = s.GetVendor(ctx, "ghost")
	wantNotFound(t, err, "vendor", "ghost")
	_, err = s.UpsertVendor(ctx, admin, store.Vendor{ID: store.LocalVendor, BaseURL: "http://x"})
	wantErr(t, err, store.ErrInvalid, `"local"`)
	_, err = s.UpsertVendor(ctx, admin, store.Vendor{BaseURL: "http://x"})
	wantErr(t, err, store.ErrInvalid)

	vendor(t, s, "anthropic")
	var ids []string
	for _, v := range must(s.ListVendors(ctx))(t) {
		ids = append(ids, v.ID)
	}
	if !slices.Equal(ids, []string{"anthropic", "openai"}) {
		t.Errorf("ListVendors = %v", ids)
	}

	// A vendor in use cannot go; the error names its models.
	model(t, s, "openai/gpt-4o", "openai")
	model(t, s, "openai/gpt-4o-mini", "openai")
	err = s.DeleteVendor(ctx, admin, "openai")
	wantErr(t, err, store.ErrConflict, `"openai"`, "openai/gpt-4o", "openai/gpt-4o-mini")
	must(s.GetVendor(ctx, "openai"))(t)
	ok(t, s.DeleteModel(ctx, admin, "openai/gpt-4o"))
	ok(t, s.DeleteModel(ctx, admin, "openai/gpt-4o-mini"))
	ok(t, s.DeleteVendor(ctx, admin, "openai"))
	_, err = s.GetVendor(ctx, "openai")
	wantNotFound(t, err, "vendor", "openai")
	wantNotFound(t, s.DeleteVendor(ctx, admin, "openai"), "vendor", "openai")

	// Clearing the key.
	cleared := must(s.SetVendorKey(ctx, admin, "anthropic", nil, 0))(t)
	if cleared.KeySealed != nil || cleared.KeyVersion != 0 {
		t.Errorf("cleared key = %+v", cleared)
	}
}

func testModels(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.UpsertModel(ctx, admin, store.Model{ID: "ghost/model", Vendor: "ghost", Enabled: true})
	wantNotFound(t, err, "vendor", "ghost")
	_, err = s.GetModel(ctx, "ghost/model")
	wantNotFound(t, err, "model", "ghost/model")
	_, err = s.UpsertModel(ctx, admin, store.Model{ID: "no-vendor"})
	wantErr(t, err, store.ErrInvalid)
	_, err = s.UpsertModel(ctx, admin, store.Model{Vendor: store.LocalVendor})
	wantErr(t, err, store.ErrInvalid)

	in := store.Model{
		ID: "gemma4:26b-a4b-it-qat", Vendor: store.LocalVendor, UpstreamModel: "gemma4:26b-a4b-it-qat",
		Efforts: []string{"low", "medium"}, Capabilities: []string{"no_thinking", "tools"},
		ContextWindow: 131072, DefaultMaxTokens: 1024, QueueTimeoutMS: 2000,
		Fallbacks:         []string{"openai/gpt-4o-mini"},
		InputPricePerMTok: 0, OutputPricePerMTok: 0, Enabled: true,
	}
	local := must(s.UpsertModel(ctx, admin, in))(t)
	want := in
	want.CreatedAt, want.UpdatedAt = local.CreatedAt, local.UpdatedAt
	sameJSON(t, local, want)
	sameJSON(t, must(s.GetModel(ctx, in.ID))(t), want)

	vendor(t, s, "openai")
	cloud := must(s.UpsertModel(ctx, admin, store.Model{
		ID: "openai/gpt-4o-mini", Vendor: "openai", InputPricePerMTok: 0.15, OutputPricePerMTok: 0.6, Enabled: true,
	}))(t)
	if cloud.Efforts == nil || cloud.Capabilities == nil || cloud.Fallbacks == nil {
		t.Errorf("nil lists come back null: %+v", cloud)
	}
	if cloud.InputPricePerMTok != 0.15 || cloud.OutputPricePerMTok != 0.6 {
		t.Errorf("prices = %v, %v", cloud.InputPricePerMTok, cloud.OutputPricePerMTok)
	}

	in.Enabled = false
	in.Efforts = []string{"high"}
	upd := must(s.UpsertModel(ctx, admin, in))(t)
	if upd.Enabled || !slices.Equal(upd.Efforts, []string{"high"}) || !upd.CreatedAt.Equal(local.CreatedAt) {
		t.Errorf("after update = %+v", upd)
	}

	var ids []string
	for _, m := range must(s.ListModels(ctx))(t) {
		ids = append(ids, m.ID)
	}
	if !slices.Equal(ids, []string{"gemma4:26b-a4b-it-qat", "openai/gpt-4o-mini"}) {
		t.Errorf("ListModels = %v", ids)
	}
	ok(t, s.DeleteModel(ctx, admin, in.ID))
	_, err = s.GetModel(ctx, in.ID)
	wantNotFound(t, err, "model", in.ID)
	wantNotFound(t, s.DeleteModel(ctx, admin, in.ID), "model", in.ID)
}

func testNodes(t *testing.T, s store.Store) {
	ctx := t.Context()
	nodeKey(t, s, "nk1", "gpu-1", "gpu one")
	n := must(s.SetNodeDrain(ctx, admin, "gpu-1", true))(t)
	if !n.Drain {
		t.Errorf("SetNodeDrain = %+v", n)
	}
	n = must(s.SetNodeWeight(ctx, admin, "gpu-1", 2.5))(t)
	if n.Weight != 2.5 || !n.Drain {
		t.Errorf("SetNodeWeight = %+v", n)
	}
	got := must(s.GetNode(ctx, "gpu-1"))(t)
	if got.Weight != 2.5 || !got.Drain || got.Name != "gpu one" {
		t.Errorf("GetNode = %+v", got)
	}
	n = must(s.SetNodeDrain(ctx, admin, "gpu-1", false))(t)
	if n.Drain {
		t.Errorf("SetNodeDrain(false) = %+v", n)
	}
	_, err := s.SetNodeDrain(ctx, admin, "ghost", true)
	wantNotFound(t, err, "node", "ghost")
	_, err = s.SetNodeWeight(ctx, admin, "ghost", 1)
	wantNotFound(t, err, "node", "ghost")
	for _, w := range []float64{-1, math.NaN(), math.Inf(1)} {
		_, err = s.SetNodeWeight(ctx, admin, "gpu-1", w)
		wantErr(t, err, store.ErrInvalid)
	}
}

// --- config version and audit ---

func testConfigVersion(t *testing.T, s store.Store) {
	ctx := t.Context()
	last := version(t, s)
	// Reads, and the usage writes that are not admin changes, leave the
	// version alone. GetTenant may miss: the tenant comes and goes.
	reads := func() {
		t.Helper()
		must(s.ListTenants(ctx))(t)
		if _, err := s.GetTenant(ctx, "acme"); err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		must(s.ListKeys(ctx, store.KeyClient, ""))(t)
		must(s.ListVendors(ctx))(t)
		must(s.ListModels(ctx))(t)
		must(s.ListNodes(ctx))(t)
		must(s.AnyAdminKey(ctx))(t)
		must(s.ListAudit(ctx, time.Time{}, 10))(t)
		must(s.QueryUsage(ctx, store.UsageQuery{}))(t)
		ok(t, s.InsertUsage(ctx, []store.UsageEvent{{TenantID: "acme", Model: "m"}}))
	}
	writes := []struct {
		name string
		fn   func() error
	}{
		{"UpsertTenant", func() error { _, err := s.UpsertTenant(ctx, admin, store.Tenant{ID: "acme"}); return err }},
		{"UpsertTenant again", func() error { _, err := s.UpsertTenant(ctx, admin, store.Tenant{ID: "acme", Name: "x"}); return err }},
		{"CreateKey client", func() error {
			_, err := s.CreateKey(ctx, admin, store.Key{ID: "k1", Kind: store.KeyClient, TenantID: "acme", SecretHash: hash("1")})
			return err
		}},
		{"CreateKey admin", func() error {
			_, err := s.CreateKey(ctx, admin, store.Key{ID: "a1", Kind: store.KeyAdmin, SecretHash: hash("2")})
			return err
		}},
		{"CreateKey node", func() error {
			_, err := s.CreateKey(ctx, admin, store.Key{ID: "n1", Kind: store.KeyNode, NodeID: "gpu", SecretHash: hash("3"), Sealed: Seal(1, "n")})
			return err
		}},
		{"RevokeKey", func() error { _, err := s.RevokeKey(ctx, admin, store.KeyClient, "k1"); return err }},
		{"UpsertVendor", func() error {
			_, err := s.UpsertVendor(ctx, admin, store.Vendor{ID: "v", BaseURL: "http://v"})
			return err
		}},
		{"SetVendorKey", func() error { _, err := s.SetVendorKey(ctx, admin, "v", Seal(1, "k"), 1); return err }},
		{"UpsertModel", func() error { _, err := s.UpsertModel(ctx, admin, store.Model{ID: "m", Vendor: "v"}); return err }},
		{"SetNodeDrain", func() error { _, err := s.SetNodeDrain(ctx, admin, "gpu", true); return err }},
		{"SetNodeWeight", func() error { _, err := s.SetNodeWeight(ctx, admin, "gpu", 3); return err }},
		{"ResealAll", func() error { _, err := s.ResealAll(ctx, admin, Resealer{Primary: 2}, false); return err }},
		{"DeleteModel", func() error { return s.DeleteModel(ctx, admin, "m") }},
		{"DeleteVendor", func() error { return s.DeleteVendor(ctx, admin, "v") }},
		{"DeleteTenant", func() error { return s.DeleteTenant(ctx, admin, "acme") }},
	}
	for _, w := range writes {
		if err := w.fn(); err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		v := version(t, s)
		if v <= last {
			t.Errorf("%s: config version %d → %d, want it to grow", w.name, last, v)
		}
		last = v
		reads()
		if v := version(t, s); v != last {
			t.Errorf("reads after %s moved the config version %d → %d", w.name, last, v)
		}
	}
	// Writes that fail change nothing.
	wantErr(t, s.DeleteTenant(ctx, admin, "acme"), store.ErrNotFound)
	_, err := s.UpsertModel(ctx, admin, store.Model{ID: "m", Vendor: "ghost"})
	wantErr(t, err, store.ErrNotFound)
	_, err = s.SetNodeDrain(ctx, admin, "ghost", true)
	wantErr(t, err, store.ErrNotFound)
	_, err = s.CreateKey(ctx, admin, store.Key{ID: "a1", Kind: store.KeyAdmin, SecretHash: hash("dup")})
	wantErr(t, err, store.ErrConflict)
	if v := version(t, s); v != last {
		t.Errorf("failed writes moved the config version %d → %d", last, v)
	}
}

func testConcurrentWrites(t *testing.T, s store.Store) {
	ctx := t.Context()
	v0 := version(t, s)
	const writers = 8
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		wg.Go(func() {
			// Half the writers race on one tenant, half on their own.
			id := "shared"
			if i%2 == 1 {
				id = fmt.Sprintf("t%d", i)
			}
			_, errs[i] = s.UpsertTenant(ctx, admin, store.Tenant{ID: id, Name: fmt.Sprint(i)})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d: %v", i, err)
		}
	}
	if v := version(t, s); v != v0+writers {
		t.Errorf("config version after %d writes = %d, want %d", writers, v, v0+writers)
	}
	// Exactly one writer created "shared"; the others replaced it.
	creations := 0
	for _, e := range must(s.ListAudit(ctx, time.Time{}, 100))(t) {
		if e.Entity == "tenant/shared" && e.BeforeJSON == "" {
			creations++
		}
	}
	if creations != 1 {
		t.Errorf("%d audit entries create tenant/shared, want 1", creations)
	}
}

type auditKey struct{ action, entity string }

func testAudit(t *testing.T, s store.Store) {
	ctx := t.Context()
	actor := store.Actor{KeyID: "sya-audit"}
	must(s.UpsertTenant(ctx, actor, store.Tenant{ID: "acme", Name: "Old"}))(t)
	must(s.UpsertTenant(ctx, actor, store.Tenant{ID: "acme", Name: "New"}))(t)
	must(s.CreateKey(ctx, actor, store.Key{ID: "k1", Kind: store.KeyClient, TenantID: "acme", SecretHash: hash("a")}))(t)
	must(s.CreateKey(ctx, actor, store.Key{ID: "a1", Kind: store.KeyAdmin, SecretHash: hash("b")}))(t)
	must(s.CreateKey(ctx, actor, store.Key{ID: "n1", Kind: store.KeyNode, NodeID: "gpu", SecretHash: hash("c"), Sealed: Seal(1, "x")}))(t)
	must(s.CreateKey(ctx, actor, store.Key{ID: "n2", Kind: store.KeyNode, NodeID: "gpu", SecretHash: hash("d"), Sealed: Seal(1, "y")}))(t)
	must(s.RevokeKey(ctx, actor, store.KeyAdmin, "a1"))(t)
	must(s.UpsertVendor(ctx, actor, store.Vendor{ID: "v", BaseURL: "http://v"}))(t)
	must(s.SetVendorKey(ctx, actor, "v", Seal(1, "k"), 1))(t)
	must(s.UpsertModel(ctx, actor, store.Model{ID: "m", Vendor: "v"}))(t)
	must(s.SetNodeDrain(ctx, actor, "gpu", true))(t)
	must(s.SetNodeWeight(ctx, actor, "gpu", 2))(t)
	must(s.ResealAll(ctx, actor, Resealer{Primary: 2}, false))(t)
	ok(t, s.DeleteModel(ctx, actor, "m"))
	ok(t, s.DeleteVendor(ctx, actor, "v"))
	ok(t, s.DeleteTenant(ctx, actor, "acme"))

	entries := must(s.ListAudit(ctx, time.Time{}, 1000))(t)
	byKey := map[auditKey][]store.AuditEntry{}
	for i, e := range entries {
		if e.ActorKeyID != "sya-audit" {
			t.Errorf("entry %d actor = %q", e.ID, e.ActorKeyID)
		}
		if e.Time.IsZero() {
			t.Errorf("entry %d has no time", e.ID)
		}
		for _, j := range []string{e.BeforeJSON, e.AfterJSON} {
			if j != "" && !json.Valid([]byte(j)) {
				t.Errorf("entry %d holds invalid JSON %q", e.ID, j)
			}
		}
		if e.BeforeJSON == "" && e.AfterJSON == "" {
			t.Errorf("entry %d has neither before nor after", e.ID)
		}
		if i > 0 && (e.Time.After(entries[i-1].Time) || e.ID > entries[i-1].ID) {
			t.Errorf("entries not newest first at %d", i)
		}
		k := auditKey{e.Action, e.Entity}
		byKey[k] = append(byKey[k], e)
	}
	want := []struct {
		key                 auditKey
		count               int
		noBefore, noAfter   bool
		beforeHas, afterHas string
	}{
		{auditKey{"UpsertTenant", "tenant/acme"}, 2, false, false, "", ""},
		{auditKey{"CreateClientKey", "key/k1"}, 1, true, false, "", `"tenant_id":"acme"`},
		{auditKey{"CreateAdminKey", "key/a1"}, 1, true, false, "", ""},
		{auditKey{"MintNodeKey", "key/n1"}, 2, false, false, "", ""}, // created, then revoked by n2
		{auditKey{"MintNodeKey", "key/n2"}, 1, true, false, "", ""},
		{auditKey{"MintNodeKey", "node/gpu"}, 1, true, false, "", `"gpu"`},
		{auditKey{"RevokeAdminKey", "key/a1"}, 1, false, false, `"revoked_at":null`, ""},
		{auditKey{"UpsertVendor", "vendor/v"}, 1, true, false, "", `"base_url":"http://v"`},
		{auditKey{"SetVendorKey", "vendor/v"}, 1, false, false, `"key_version":0`, `"key_version":1`},
		{auditKey{"UpsertModel", "model/m"}, 1, true, false, "", ""},
		{auditKey{"DrainNode", "node/gpu"}, 1, false, false, `"drain":false`, `"drain":true`},
		{auditKey{"SetNodeWeight", "node/gpu"}, 1, false, false, `"weight":1`, `"weight":2`},
		{auditKey{"RotateEncryption", "keyring"}, 1, false, false, "", `"rewritten":2`},
		{auditKey{"DeleteModel", "model/m"}, 1, false, true, "", ""},
		{auditKey{"DeleteVendor", "vendor/v"}, 1, false, true, "", ""},
		{auditKey{"DeleteTenant", "tenant/acme"}, 1, false, true, `"New"`, ""},
		{auditKey{"DeleteTenant", "key/k1"}, 1, false, false, "", `"revoked_at":"`},
	}
	total := 0
	for _, w := range want {
		got := byKey[w.key]
		total += len(got)
		if len(got) != w.count {
			t.Errorf("%v: %d entries, want %d", w.key, len(got), w.count)
			continue
		}
		e := got[0] // the newest
		if w.noBefore != (e.BeforeJSON == "") {
			t.Errorf("%v: before = %q", w.key, e.BeforeJSON)
		}
		if w.noAfter != (e.AfterJSON == "") {
			t.Errorf("%v: after = %q", w.key, e.AfterJSON)
		}
		if !strings.Contains(compact(e.BeforeJSON), w.beforeHas) || !strings.Contains(compact(e.AfterJSON), w.afterHas) {
			t.Errorf("%v: before %s / after %s, want them to hold %s / %s", w.key, e.BeforeJSON, e.AfterJSON, w.beforeHas, w.afterHas)
		}
	}
	if total != len(entries) {
		t.Errorf("%d audit entries, %d expected; all: %+v", len(entries), total, entries)
	}
	// The update's before is the first version.
	upserts := byKey[auditKey{"UpsertTenant", "tenant/acme"}]
	if len(upserts) == 2 && (!strings.Contains(upserts[0].BeforeJSON, "Old") || !strings.Contains(upserts[0].AfterJSON, "New")) {
		t.Errorf("tenant update recorded before %s after %s", upserts[0].BeforeJSON, upserts[0].AfterJSON)
	}
}

// compact removes the spaces a JSON column may add, so that tests can look
// for `"key":value`.
func compact(s string) string {
	if s == "" {
		return ""
	}
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// testAuditCanary writes every kind of secret the store holds and checks
// that no audit entry, and no error, carries any of them in any encoding.
func testAuditCanary(t *testing.T, s store.Store) {
	ctx := t.Context()
	type secret struct {
		name  string
		bytes []byte
	}
	var secrets []secret
	add := func(name string, b []byte) []byte {
		secrets = append(secrets, secret{name, b})
		return b
	}
	tenant(t, s, "acme")
	must(s.CreateKey(ctx, admin, store.Key{ID: "kc", Kind: store.KeyClient, TenantID: "acme", Name: "client",
		SecretHash: add("client hash", hash("canary-client-secret"))}))(t)
	must(s.CreateKey(ctx, admin, store.Key{ID: "ka", Kind: store.KeyAdmin, Name: "admin",
		SecretHash: add("admin hash", hash("canary-admin-secret"))}))(t)
	must(s.CreateKey(ctx, admin, store.Key{ID: "kn", Kind: store.KeyNode, NodeID: "gpu", Name: "node",
		SecretHash: add("node hash", hash("canary-node-secret")), Sealed: add("node sealed", Seal(1, "syn_kn_CANARYNODEKEY"))}))(t)
	must(s.CreateKey(ctx, admin, store.Key{ID: "kn2", Kind: store.KeyNode, NodeID: "gpu", Name: "node",
		SecretHash: add("node hash 2", hash("canary-node-secret-2")), Sealed: add("node sealed 2", Seal(1, "syn_kn2_CANARYNODEKEY2"))}))(t)
	vendor(t, s, "openai")
	must(s.SetVendorKey(ctx, admin, "openai", add("vendor sealed", Seal(1, "sk-CANARYVENDORKEY")), 1))(t)
	rep := must(s.ResealAll(ctx, admin, Resealer{Primary: 2}, false))(t)
	if rep.Rewritten == 0 {
		t.Fatal("the rotation rewrote nothing")
	}
	add("vendor resealed", must(s.GetVendor(ctx, "openai"))(t).KeySealed)
	add("node resealed", must(s.NodeKey(ctx, "gpu"))(t).Sealed)
	add("vendor payload", []byte("CANARYVENDORKEY"))
	add("node payload", []byte("CANARYNODEKEY"))
	must(s.RevokeKey(ctx, admin, store.KeyNode, "kn2"))(t)
	ok(t, s.DeleteTenant(ctx, admin, "acme"))

	// A refused write with a secret in it: its error must not repeat it.
	_, err := s.CreateKey(ctx, admin, store.Key{ID: "ka", Kind: store.KeyAdmin,
		SecretHash: add("duplicate hash", hash("canary-duplicate")), Sealed: add("duplicate sealed", []byte("CANARYDUPLICATE"))})
	wantErr(t, err, store.ErrConflict)

	var texts []string
	texts = append(texts, err.Error())
	for _, e := range must(s.ListAudit(ctx, time.Time{}, 1000))(t) {
		texts = append(texts, e.Action, e.Entity, e.BeforeJSON, e.AfterJSON, compact(e.BeforeJSON), compact(e.AfterJSON))
	}
	all := strings.Join(texts, "\n")
	for _, sec := range secrets {
		b := sec.bytes
		for _, enc := range []struct{ name, text string }{
			{"raw", string(b)},
			{"hex", hex.EncodeToString(b)},
			{"HEX", strings.ToUpper(hex.EncodeToString(b))},
			{"base64", base64.StdEncoding.EncodeToString(b)},
			{"base64 raw url", base64.RawURLEncoding.EncodeToString(b)},
			{"json", string(must(json.Marshal(b))(t))},
		} {
			if len(enc.text) >= 8 && strings.Contains(all, enc.text) {
				t.Errorf("the audit log or an error holds the %s (%s)", sec.name, enc.name)
			}
		}
	}
}

// --- rotation ---

func testResealAll(t *testing.T, s store.Store) {
	ctx := t.Context()
	vendor(t, s, "a")
	vendor(t, s, "b")
	vendor(t, s, "c") // no key
	must(s.SetVendorKey(ctx, admin, "a", Seal(1, "key-a"), 1))(t)
	must(s.SetVendorKey(ctx, admin, "b", Seal(2, "key-b"), 2))(t)
	nk := nodeKey(t, s, "nk1", "gpu-1", "gpu")
	tenant(t, s, "acme")
	clientKey(t, s, "kc", "acme") // hashed only: nothing to reseal

	var mu sync.Mutex
	var seen []string
	r := Resealer{Primary: 2, Hook: func(ref store.SealedRef) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, ref.String())
	}}

	// A dry run reports and writes nothing.
	v0 := version(t, s)
	rep := must(s.ResealAll(ctx, admin, r, true))(t)
	if rep.Rewritten != 2 || len(rep.Failed) != 0 {
		t.Errorf("dry run = %+v, want 2 to rewrite", rep)
	}
	wantVersions(t, rep.RowsPerVersion, map[uint32]int64{1: 2, 2: 1})
	slices.Sort(seen)
	if want := []string{"api_keys/nk1/secret_sealed", "vendors/a/api_key_sealed", "vendors/b/api_key_sealed"}; !slices.Equal(seen, want) {
		t.Errorf("resealed refs = %v, want %v", seen, want)
	}
	if v := must(s.GetVendor(ctx, "a"))(t); string(v.KeySealed) != string(Seal(1, "key-a")) || v.KeyVersion != 1 {
		t.Errorf("a dry run changed vendor a: %+v", v)
	}
	if k := must(s.NodeKey(ctx, "gpu-1"))(t); string(k.Sealed) != string(nk.Sealed) {
		t.Errorf("a dry run changed the node key")
	}
	if v := version(t, s); v != v0 {
		t.Errorf("a dry run moved the config version %d → %d", v0, v)
	}

	// One value that cannot be read: nothing is written, the value is named.
	vendor(t, s, "d")
	must(s.SetVendorKey(ctx, admin, "d", Seal(1, Undecryptable), 1))(t)
	v1 := version(t, s)
	audits := len(must(s.ListAudit(ctx, time.Time{}, 1000))(t))
	rep = must(s.ResealAll(ctx, admin, r, false))(t)
	if rep.Rewritten != 0 || len(rep.Failed) != 1 {
		t.Fatalf("with a bad value = %+v, want nothing rewritten and one failure", rep)
	}
	if f := rep.Failed[0]; f.Ref != (store.SealedRef{Table: "vendors", Row: "d", Column: "api_key_sealed"}) || f.Err == nil {
		t.Errorf("failure = %+v, want vendors/d/api_key_sealed with its error", f)
	}
	wantVersions(t, rep.RowsPerVersion, map[uint32]int64{1: 3, 2: 1})
	if v := must(s.GetVendor(ctx, "a"))(t); string(v.KeySealed) != string(Seal(1, "key-a")) || v.KeyVersion != 1 {
		t.Errorf("a failed rotation changed vendor a: %+v", v)
	}
	if k := must(s.NodeKey(ctx, "gpu-1"))(t); string(k.Sealed) != string(nk.Sealed) {
		t.Errorf("a failed rotation changed the node key")
	}
	if v := version(t, s); v != v1 {
		t.Errorf("a failed rotation moved the config version %d → %d", v1, v)
	}
	if n := len(must(s.ListAudit(ctx, time.Time{}, 1000))(t)); n != audits {
		t.Errorf("a failed rotation wrote %d audit entries", n-audits)
	}

	// Fixed, it goes through.
	must(s.SetVendorKey(ctx, admin, "d", Seal(2, "key-d"), 2))(t)
	v2 := version(t, s)
	rep = must(s.ResealAll(ctx, admin, r, false))(t)
	if rep.Rewritten != 2 || len(rep.Failed) != 0 {
		t.Fatalf("rotation = %+v, want 2 rewritten", rep)
	}
	wantVersions(t, rep.RowsPerVersion, map[uint32]int64{2: 4})
	if v := must(s.GetVendor(ctx, "a"))(t); string(v.KeySealed) != string(Seal(2, "key-a")) || v.KeyVersion != 2 {
		t.Errorf("vendor a after rotation = %+v", v)
	}
	if v := must(s.GetVendor(ctx, "b"))(t); string(v.KeySealed) != string(Seal(2, "key-b")) || v.KeyVersion != 2 {
		t.Errorf("vendor b after rotation = %+v", v)
	}
	if v := must(s.GetVendor(ctx, "c"))(t); v.KeySealed != nil || v.KeyVersion != 0 {
		t.Errorf("vendor c (no key) after rotation = %+v", v)
	}
	if k := must(s.NodeKey(ctx, "gpu-1"))(t); string(k.Sealed) != string(Seal(2, "syn_nk1")) {
		t.Errorf("node key after rotation = %q", k.Sealed)
	}
	if v := version(t, s); v <= v2 {
		t.Errorf("a rotation did not move the config version (%d → %d)", v2, v)
	}
	if es := must(s.ListAudit(ctx, time.Time{}, 1))(t); len(es) != 1 || es[0].Action != "RotateEncryption" {
		t.Errorf("newest audit entry = %+v, want RotateEncryption", es)
	}

	// A second call has nothing left to do.
	v3 := version(t, s)
	rep = must(s.ResealAll(ctx, admin, r, false))(t)
	if rep.Rewritten != 0 || len(rep.Failed) != 0 {
		t.Errorf("second rotation = %+v, want nothing rewritten", rep)
	}
	wantVersions(t, rep.RowsPerVersion, map[uint32]int64{2: 4})
	if v := version(t, s); v != v3 {
		t.Errorf("a rotation that changed nothing moved the config version %d → %d", v3, v)
	}
}

func wantVersions(t *testing.T, got, want map[uint32]int64) {
	t.Helper()
	for v, n := range got {
		if n == 0 {
			delete(got, v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("RowsPerVersion = %v, want %v", got, want)
		return
	}
	for v, n := range want {
		if got[v] != n {
			t.Errorf("RowsPerVersion = %v, want %v", got, want)
			return
		}
	}
}

// --- usage ---

func testUsage(t *testing.T, s store.Store) {
	ctx := t.Context()
	ok(t, s.InsertUsage(ctx, nil))
	day := func(d string) time.Time {
		tm, err := time.Parse(time.RFC3339, d)
		ok(t, err)
		return tm
	}
	events := []store.UsageEvent{
		{Time: day("2026-01-15T10:00:00Z"), RequestID: "r1", TenantID: "t1", KeyID: "k1", Model: "m1", Target: "vendor:openai",
			InputTokens: 10, OutputTokens: 20, CostUSD: 0.5, FallbackPath: []string{"m0"}, TTFTMillis: 120, TokensPerSec: 40,
			Status: 200, Attributes: map[string]string{"team": "search"}, DurationMillis: 900},
		{Time: day("2026-01-15T23:59:59Z"), RequestID: "r2", TenantID: "t1", KeyID: "k1", Model: "m1", Target: "node:gpu-1",
			InputTokens: 1, OutputTokens: 2, Estimated: true, Status: 200},
		{Time: day("2026-01-16T00:00:00Z"), RequestID: "r3", TenantID: "t1", KeyID: "k2", Model: "m2", Target: "vendor:openai",
			InputTokens: 100, OutputTokens: 200, CostUSD: 1.25, Status: 200},
		{Time: day("2026-02-01T08:00:00+02:00"), RequestID: "r4", TenantID: "t2", KeyID: "k3", Model: "m1", Target: "vendor:openai",
			InputTokens: 5, OutputTokens: 5, CostUSD: 0.25, Status: 502, ErrorCode: "upstream_error"},
	}
	ok(t, s.InsertUsage(ctx, events))

	row := func(tenant, model, target, period string, req, in, out int64, cost float64) store.UsageRow {
		return store.UsageRow{TenantID: tenant, Model: model, Target: target, Period: period,
			Requests: req, InputTokens: in, OutputTokens: out, CostUSD: cost}
	}
	tests := []struct {
		name string
		q    store.UsageQuery
		want []store.UsageRow
	}{
		{"default: tenant and model", store.UsageQuery{}, []store.UsageRow{
			row("t1", "m1", "", "", 2, 11, 22, 0.5),
			row("t1", "m2", "", "", 1, 100, 200, 1.25),
			row("t2", "m1", "", "", 1, 5, 5, 0.25),
		}},
		{"target", store.UsageQuery{GroupBy: []string{"target"}}, []store.UsageRow{
			row("", "", "node:gpu-1", "", 1, 1, 2, 0),
			row("", "", "vendor:openai", "", 3, 115, 225, 2),
		}},
		{"day (UTC)", store.UsageQuery{GroupBy: []string{"day"}}, []store.UsageRow{
			row("", "", "", "2026-01-15", 2, 11, 22, 0.5),
			row("", "", "", "2026-01-16", 1, 100, 200, 1.25),
			row("", "", "", "2026-02-01", 1, 5, 5, 0.25),
		}},
		{"month", store.UsageQuery{GroupBy: []string{"month"}}, []store.UsageRow{
			row("", "", "", "2026-01", 3, 111, 222, 1.75),
			row("", "", "", "2026-02", 1, 5, 5, 0.25),
		}},
		{"tenant and month", store.UsageQuery{GroupBy: []string{"month", "tenant"}}, []store.UsageRow{
			row("t1", "", "", "2026-01", 3, 111, 222, 1.75),
			row("t2", "", "", "2026-02", 1, 5, 5, 0.25),
		}},
		{"model", store.UsageQuery{GroupBy: []string{"model"}}, []store.UsageRow{
			row("", "m1", "", "", 3, 16, 27, 0.75),
			row("", "m2", "", "", 1, 100, 200, 1.25),
		}},
		{"filter tenant", store.UsageQuery{TenantID: "t2"}, []store.UsageRow{
			row("t2", "m1", "", "", 1, 5, 5, 0.25),
		}},
		{"filter model", store.UsageQuery{Model: "m1", GroupBy: []string{"tenant"}}, []store.UsageRow{
			row("t1", "", "", "", 2, 11, 22, 0.5),
			row("t2", "", "", "", 1, 5, 5, 0.25),
		}},
		{"since is inclusive", store.UsageQuery{Since: day("2026-01-16T00:00:00Z"), GroupBy: []string{"tenant"}}, []store.UsageRow{
			row("t1", "", "", "", 1, 100, 200, 1.25),
			row("t2", "", "", "", 1, 5, 5, 0.25),
		}},
		{"until is exclusive", store.UsageQuery{Until: day("2026-01-16T00:00:00Z"), GroupBy: []string{"tenant"}}, []store.UsageRow{
			row("t1", "", "", "", 2, 11, 22, 0.5),
		}},
		{"window and tenant", store.UsageQuery{TenantID: "t1", Since: day("2026-01-15T12:00:00Z"), Until: day("2026-02-01T00:00:00Z"),
			GroupBy: []string{"target"}}, []store.UsageRow{
			row("", "", "node:gpu-1", "", 1, 1, 2, 0),
			row("", "", "vendor:openai", "", 1, 100, 200, 1.25),
		}},
		{"nothing matches", store.UsageQuery{TenantID: "nobody"}, []store.UsageRow{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := must(s.QueryUsage(ctx, tt.q))(t)
			for i := range got {
				got[i].CostUSD = math.Round(got[i].CostUSD*1e9) / 1e9
			}
			if got == nil {
				got = []store.UsageRow{}
			}
			sameJSON(t, got, tt.want)
		})
	}
	for _, g := range [][]string{{"week"}, {"day", "month"}, {"tenant", ""}} {
		_, err := s.QueryUsage(ctx, store.UsageQuery{GroupBy: g})
		wantErr(t, err, store.ErrInvalid)
	}
}

// --- audit listing ---

func testListAudit(t *testing.T, s store.Store) {
	ctx := t.Context()
	if es := must(s.ListAudit(ctx, time.Time{}, 10))(t); len(es) != 0 {
		t.Fatalf("a new store has audit entries: %v", es)
	}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		tenant(t, s, id)
		time.Sleep(2 * time.Millisecond) // distinct times, even on a coarse clock
	}
	all := must(s.ListAudit(ctx, time.Time{}, 0))(t)
	var entities []string
	for _, e := range all {
		entities = append(entities, e.Entity)
	}
	if want := []string{"tenant/e", "tenant/d", "tenant/c", "tenant/b", "tenant/a"}; !slices.Equal(entities, want) {
		t.Fatalf("ListAudit = %v, want %v (newest first)", entities, want)
	}
	if top := must(s.ListAudit(ctx, time.Time{}, 2))(t); len(top) != 2 || top[0].Entity != "tenant/e" || top[1].Entity != "tenant/d" {
		t.Errorf("ListAudit limit 2 = %+v", top)
	}
	since := all[2].Time // tenant/c
	got := must(s.ListAudit(ctx, since, 10))(t)
	entities = entities[:0]
	for _, e := range got {
		entities = append(entities, e.Entity)
		if e.Time.Before(since) {
			t.Errorf("entry %s at %v is before %v", e.Entity, e.Time, since)
		}
	}
	if want := []string{"tenant/e", "tenant/d", "tenant/c"}; !slices.Equal(entities, want) {
		t.Errorf("ListAudit since c = %v, want %v", entities, want)
	}
	if late := must(s.ListAudit(ctx, time.Now().Add(time.Hour), 10))(t); len(late) != 0 {
		t.Errorf("ListAudit in the future = %v", late)
	}
}
