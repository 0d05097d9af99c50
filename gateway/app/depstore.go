package app

import (
	"context"
	"errors"
	"time"

	"github.com/switchyard-ai/switchyard/gateway/store"
)

// countedStore counts every failed store call in
// switchyard_dependency_errors_total{dependency="postgres",operation=<method>}
// (SPEC §8). Counting here, at the one door every user of the store goes
// through (catalog reloads, key lookups, admin calls, heartbeats, pings),
// counts each failure once, where it happened, whoever asked.
//
// A failure is what the database did wrong: unreachable, timed out, or an
// error it was not expected to give. Answers are not failures (not found,
// conflict, invalid input), and neither is a caller that gave up (its
// context cancelled). InsertUsage passes through uncounted: the metering
// writer counts its own failed batches as operation "insert_usage".
type countedStore struct {
	store.Store
	count func(operation string)
}

var _ store.Store = countedStore{}

func (s countedStore) check(op string, err error) error {
	if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) &&
		!errors.Is(err, store.ErrInvalid) && !errors.Is(err, context.Canceled) {
		s.count(op)
	}
	return err
}

func (s countedStore) UpsertTenant(ctx context.Context, a store.Actor, t store.Tenant) (store.Tenant, error) {
	out, err := s.Store.UpsertTenant(ctx, a, t)
	return out, s.check("upsert_tenant", err)
}

func (s countedStore) GetTenant(ctx context.Context, id string) (store.Tenant, error) {
	out, err := s.Store.GetTenant(ctx, id)
	return out, s.check("get_tenant", err)
}

func (s countedStore) ListTenants(ctx context.Context) ([]store.Tenant, error) {
	out, err := s.Store.ListTenants(ctx)
	return out, s.check("list_tenants", err)
}

func (s countedStore) DeleteTenant(ctx context.Context, a store.Actor, id string) error {
	return s.check("delete_tenant", s.Store.DeleteTenant(ctx, a, id))
}

func (s countedStore) CreateKey(ctx context.Context, a store.Actor, k store.Key) (store.Key, error) {
	out, err := s.Store.CreateKey(ctx, a, k)
	return out, s.check("create_key", err)
}

func (s countedStore) GetKey(ctx context.Context, id string) (store.Key, error) {
	out, err := s.Store.GetKey(ctx, id)
	return out, s.check("get_key", err)
}

func (s countedStore) ListKeys(ctx context.Context, kind store.KeyKind, tenantID string) ([]store.Key, error) {
	out, err := s.Store.ListKeys(ctx, kind, tenantID)
	return out, s.check("list_keys", err)
}

func (s countedStore) RevokeKey(ctx context.Context, a store.Actor, kind store.KeyKind, id string) (store.Key, error) {
	out, err := s.Store.RevokeKey(ctx, a, kind, id)
	return out, s.check("revoke_key", err)
}

func (s countedStore) NodeKey(ctx context.Context, nodeID string) (store.Key, error) {
	out, err := s.Store.NodeKey(ctx, nodeID)
	return out, s.check("node_key", err)
}

func (s countedStore) AnyAdminKey(ctx context.Context) (bool, error) {
	out, err := s.Store.AnyAdminKey(ctx)
	return out, s.check("any_admin_key", err)
}

func (s countedStore) UpsertVendor(ctx context.Context, a store.Actor, v store.Vendor) (store.Vendor, error) {
	out, err := s.Store.UpsertVendor(ctx, a, v)
	return out, s.check("upsert_vendor", err)
}

func (s countedStore) SetVendorKey(ctx context.Context, a store.Actor, id string, sealed []byte, version uint32) (store.Vendor, error) {
	out, err := s.Store.SetVendorKey(ctx, a, id, sealed, version)
	return out, s.check("set_vendor_key", err)
}

func (s countedStore) GetVendor(ctx context.Context, id string) (store.Vendor, error) {
	out, err := s.Store.GetVendor(ctx, id)
	return out, s.check("get_vendor", err)
}

func (s countedStore) ListVendors(ctx context.Context) ([]store.Vendor, error) {
	out, err := s.Store.ListVendors(ctx)
	return out, s.check("list_vendors", err)
}

func (s countedStore) DeleteVendor(ctx context.Context, a store.Actor, id string) error {
	return s.check("delete_vendor", s.Store.DeleteVendor(ctx, a, id))
}

func (s countedStore) UpsertModel(ctx context.Context, a store.Actor, m store.Model) (store.Model, error) {
	out, err := s.Store.UpsertModel(ctx, a, m)
	return out, s.check("upsert_model", err)
}

func (s countedStore) GetModel(ctx context.Context, id string) (store.Model, error) {
	out, err := s.Store.GetModel(ctx, id)
	return out, s.check("get_model", err)
}

func (s countedStore) ListModels(ctx context.Context) ([]store.Model, error) {
	out, err := s.Store.ListModels(ctx)
	return out, s.check("list_models", err)
}

func (s countedStore) DeleteModel(ctx context.Context, a store.Actor, id string) error {
	return s.check("delete_model", s.Store.DeleteModel(ctx, a, id))
}

func (s countedStore) GetNode(ctx context.Context, id string) (store.Node, error) {
	out, err := s.Store.GetNode(ctx, id)
	return out, s.check("get_node", err)
}

func (s countedStore) ListNodes(ctx context.Context) ([]store.Node, error) {
	out, err := s.Store.ListNodes(ctx)
	return out, s.check("list_nodes", err)
}

func (s countedStore) SetNodeDrain(ctx context.Context, a store.Actor, id string, drain bool) (store.Node, error) {
	out, err := s.Store.SetNodeDrain(ctx, a, id, drain)
	return out, s.check("set_node_drain", err)
}

func (s countedStore) SetNodeWeight(ctx context.Context, a store.Actor, id string, weight float64) (store.Node, error) {
	out, err := s.Store.SetNodeWeight(ctx, a, id, weight)
	return out, s.check("set_node_weight", err)
}

func (s countedStore) ResealAll(ctx context.Context, a store.Actor, fn store.Resealer, dryRun bool) (store.ResealReport, error) {
	out, err := s.Store.ResealAll(ctx, a, fn, dryRun)
	return out, s.check("reseal_all", err)
}

func (s countedStore) QueryUsage(ctx context.Context, q store.UsageQuery) ([]store.UsageRow, error) {
	out, err := s.Store.QueryUsage(ctx, q)
	return out, s.check("query_usage", err)
}

func (s countedStore) ListAudit(ctx context.Context, since time.Time, limit int) ([]store.AuditEntry, error) {
	out, err := s.Store.ListAudit(ctx, since, limit)
	return out, s.check("list_audit", err)
}

func (s countedStore) ConfigVersion(ctx context.Context) (int64, error) {
	out, err := s.Store.ConfigVersion(ctx)
	return out, s.check("config_version", err)
}

func (s countedStore) Ping(ctx context.Context) error {
	return s.check("ping", s.Store.Ping(ctx))
}
