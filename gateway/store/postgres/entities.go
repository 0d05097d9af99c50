package postgres

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/switchyard-ai/switchyard/gateway/store"
)

// Lists are ordered by byte value (COLLATE "C"), whatever the database's
// collation, so that both stores list in the same order.

// --- tenants ---

const tenantCols = `id, name, allowed_models, requests_per_minute, tokens_per_minute, daily_token_budget,
	monthly_cost_budget_usd, priority, interactive, created_at, updated_at`

func scanTenant(r scanner) (store.Tenant, error) {
	var t store.Tenant
	err := r.Scan(&t.ID, &t.Name, &t.AllowedModels, &t.RequestsPerMinute, &t.TokensPerMinute, &t.DailyTokenBudget,
		&t.MonthlyCostBudgetUSD, &t.Priority, &t.Interactive, &t.CreatedAt, &t.UpdatedAt)
	t.AllowedModels = orEmpty(t.AllowedModels)
	t.CreatedAt, t.UpdatedAt = t.CreatedAt.UTC(), t.UpdatedAt.UTC()
	return t, err
}

func (p *Postgres) UpsertTenant(ctx context.Context, a store.Actor, t store.Tenant) (store.Tenant, error) {
	if t.ID == "" {
		return store.Tenant{}, invalid("a tenant needs an id")
	}
	var out store.Tenant
	err := p.write(ctx, a, "upsert tenant", func(tx pgx.Tx) ([]change, error) {
		if err := lockEntity(ctx, tx, "tenant/"+t.ID); err != nil {
			return nil, err
		}
		var before any
		old, err := scanTenant(tx.QueryRow(ctx, "SELECT "+tenantCols+" FROM tenants WHERE id = $1 FOR UPDATE", t.ID))
		switch {
		case err == nil:
			before = old
		case !errors.Is(err, pgx.ErrNoRows):
			return nil, err
		}
		out, err = scanTenant(tx.QueryRow(ctx, `INSERT INTO tenants (id, name, allowed_models, requests_per_minute,
				tokens_per_minute, daily_token_budget, monthly_cost_budget_usd, priority, interactive)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, allowed_models = EXCLUDED.allowed_models,
				requests_per_minute = EXCLUDED.requests_per_minute, tokens_per_minute = EXCLUDED.tokens_per_minute,
				daily_token_budget = EXCLUDED.daily_token_budget, monthly_cost_budget_usd = EXCLUDED.monthly_cost_budget_usd,
				priority = EXCLUDED.priority, interactive = EXCLUDED.interactive, updated_at = now()
			RETURNING `+tenantCols,
			t.ID, t.Name, orEmpty(t.AllowedModels), t.RequestsPerMinute, t.TokensPerMinute, t.DailyTokenBudget,
			t.MonthlyCostBudgetUSD, t.Priority, t.Interactive))
		if err != nil {
			return nil, err
		}
		return []change{{"UpsertTenant", "tenant/" + t.ID, before, out}}, nil
	})
	return out, err
}

func (p *Postgres) GetTenant(ctx context.Context, id string) (store.Tenant, error) {
	t, err := scanTenant(p.pool.QueryRow(ctx, "SELECT "+tenantCols+" FROM tenants WHERE id = $1", id))
	if err != nil {
		return store.Tenant{}, fail("get tenant", notFound(err, "tenant", id))
	}
	return t, nil
}

func (p *Postgres) ListTenants(ctx context.Context) ([]store.Tenant, error) {
	rows, err := p.pool.Query(ctx, "SELECT "+tenantCols+` FROM tenants ORDER BY id COLLATE "C"`)
	if err != nil {
		return nil, fail("list tenants", err)
	}
	ts, err := collect(rows, scanTenant)
	return ts, fail("list tenants", err)
}

func (p *Postgres) DeleteTenant(ctx context.Context, a store.Actor, id string) error {
	return p.write(ctx, a, "delete tenant", func(tx pgx.Tx) ([]change, error) {
		old, err := scanTenant(tx.QueryRow(ctx, "SELECT "+tenantCols+" FROM tenants WHERE id = $1 FOR UPDATE", id))
		if err != nil {
			return nil, notFound(err, "tenant", id)
		}
		rows, err := tx.Query(ctx, `UPDATE api_keys SET revoked_at = now()
			WHERE kind = 'client' AND tenant_id = $1 AND revoked_at IS NULL
			RETURNING `+keyCols, id)
		if err != nil {
			return nil, err
		}
		revoked, err := collect(rows, scanKey)
		if err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, "DELETE FROM tenants WHERE id = $1", id); err != nil {
			return nil, err
		}
		changes := []change{{"DeleteTenant", "tenant/" + id, old, nil}}
		for _, k := range sortKeys(revoked) {
			changes = append(changes, change{"DeleteTenant", "key/" + k.ID, unrevoked(k), k})
		}
		return changes, nil
	})
}

// --- keys ---

const keyCols = `id, kind, name, coalesce(tenant_id, ''), coalesce(node_id, ''), secret_hash, secret_sealed, created_at, revoked_at`

func scanKey(r scanner) (store.Key, error) {
	var k store.Key
	var kind string
	err := r.Scan(&k.ID, &kind, &k.Name, &k.TenantID, &k.NodeID, &k.SecretHash, &k.Sealed, &k.CreatedAt, &k.RevokedAt)
	k.Kind = store.KeyKind(kind)
	k.CreatedAt = k.CreatedAt.UTC()
	if k.RevokedAt != nil {
		t := k.RevokedAt.UTC()
		k.RevokedAt = &t
	}
	return k, err
}

// unrevoked is k as it was before a revocation, for the audit log.
func unrevoked(k store.Key) store.Key {
	k.RevokedAt = nil
	return k
}

// sortKeys orders keys by id: RETURNING has no ORDER BY, and audit entries
// are written in id order, as the memory store writes them.
func sortKeys(ks []store.Key) []store.Key {
	slices.SortFunc(ks, func(x, y store.Key) int { return strings.Compare(x.ID, y.ID) })
	return ks
}

func (p *Postgres) CreateKey(ctx context.Context, a store.Actor, k store.Key) (store.Key, error) {
	if err := store.ValidateKey(k); err != nil {
		return store.Key{}, err
	}
	action := store.CreateKeyAction(k.Kind)
	var out store.Key
	err := p.write(ctx, a, "create key", func(tx pgx.Tx) ([]change, error) {
		var changes []change
		switch k.Kind {
		case store.KeyClient:
			// FOR SHARE: a DeleteTenant running now either finishes first
			// (and the tenant is gone) or waits and then revokes this key.
			var one int
			if err := tx.QueryRow(ctx, "SELECT 1 FROM tenants WHERE id = $1 FOR SHARE", k.TenantID).Scan(&one); err != nil {
				return nil, notFound(err, "tenant", k.TenantID)
			}
		case store.KeyNode:
			if err := lockEntity(ctx, tx, "node/"+k.NodeID); err != nil {
				return nil, err
			}
			name := k.Name
			if name == "" {
				name = k.NodeID
			}
			n, err := scanNode(tx.QueryRow(ctx, `INSERT INTO nodes (id, name) VALUES ($1, $2)
				ON CONFLICT (id) DO NOTHING RETURNING `+nodeCols, k.NodeID, name))
			switch {
			case err == nil:
				changes = append(changes, change{action, "node/" + n.ID, nil, n})
			case !errors.Is(err, pgx.ErrNoRows):
				return nil, err
			}
			// The sealed copy goes with the revocation: nothing presents
			// a revoked key.
			rows, err := tx.Query(ctx, `UPDATE api_keys SET revoked_at = now(), secret_sealed = NULL
				WHERE kind = 'node' AND node_id = $1 AND revoked_at IS NULL
				RETURNING `+keyCols, k.NodeID)
			if err != nil {
				return nil, err
			}
			revoked, err := collect(rows, scanKey)
			if err != nil {
				return nil, err
			}
			for _, old := range sortKeys(revoked) {
				changes = append(changes, change{action, "key/" + old.ID, unrevoked(old), old})
			}
		}
		var err error
		out, err = scanKey(tx.QueryRow(ctx, `INSERT INTO api_keys (id, kind, name, tenant_id, node_id, secret_hash, secret_sealed)
			VALUES ($1, $2, $3, NULLIF($4, ''), NULLIF($5, ''), $6, $7)
			RETURNING `+keyCols,
			k.ID, string(k.Kind), k.Name, k.TenantID, k.NodeID, k.SecretHash, k.Sealed))
		if err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "api_keys_pkey" {
				return nil, conflict("key %q already exists", k.ID)
			}
			return nil, err
		}
		return append([]change{{action, "key/" + k.ID, nil, out}}, changes...), nil
	})
	return out, err
}

func (p *Postgres) GetKey(ctx context.Context, id string) (store.Key, error) {
	k, err := scanKey(p.pool.QueryRow(ctx, "SELECT "+keyCols+" FROM api_keys WHERE id = $1", id))
	if err != nil {
		return store.Key{}, fail("get key", notFound(err, "key", id))
	}
	return k, nil
}

func (p *Postgres) ListKeys(ctx context.Context, kind store.KeyKind, tenantID string) ([]store.Key, error) {
	rows, err := p.pool.Query(ctx, "SELECT "+keyCols+` FROM api_keys
		WHERE ($1 = '' OR kind = $1) AND ($2 = '' OR tenant_id = $2)
		ORDER BY created_at, id COLLATE "C"`, string(kind), tenantID)
	if err != nil {
		return nil, fail("list keys", err)
	}
	ks, err := collect(rows, scanKey)
	return ks, fail("list keys", err)
}

func (p *Postgres) RevokeKey(ctx context.Context, a store.Actor, kind store.KeyKind, id string) (store.Key, error) {
	var out store.Key
	err := p.write(ctx, a, "revoke key", func(tx pgx.Tx) ([]change, error) {
		k, err := scanKey(tx.QueryRow(ctx, "SELECT "+keyCols+" FROM api_keys WHERE id = $1 AND kind = $2 FOR UPDATE", id, string(kind)))
		if err != nil {
			return nil, notFound(err, string(kind)+" key", id)
		}
		if k.Revoked() {
			out = k
			return nil, nil
		}
		out, err = scanKey(tx.QueryRow(ctx, `UPDATE api_keys SET revoked_at = now(), secret_sealed = NULL
			WHERE id = $1 RETURNING `+keyCols, id))
		if err != nil {
			return nil, err
		}
		return []change{{store.RevokeKeyAction(kind), "key/" + id, k, out}}, nil
	})
	return out, err
}

func (p *Postgres) NodeKey(ctx context.Context, nodeID string) (store.Key, error) {
	k, err := scanKey(p.pool.QueryRow(ctx, "SELECT "+keyCols+` FROM api_keys
		WHERE kind = 'node' AND node_id = $1 AND revoked_at IS NULL`, nodeID))
	if err != nil {
		return store.Key{}, fail("get node key", notFound(err, "node key", nodeID))
	}
	return k, nil
}

func (p *Postgres) AnyAdminKey(ctx context.Context) (bool, error) {
	var exists bool
	err := p.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM api_keys WHERE kind = 'admin' AND revoked_at IS NULL)").Scan(&exists)
	return exists, fail("look for an admin key", err)
}

// --- vendors ---

const vendorCols = `id, base_url, enabled, api_key_sealed, key_version, created_at, updated_at`

func scanVendor(r scanner) (store.Vendor, error) {
	var v store.Vendor
	var version int64
	err := r.Scan(&v.ID, &v.BaseURL, &v.Enabled, &v.KeySealed, &version, &v.CreatedAt, &v.UpdatedAt)
	v.KeyVersion = uint32(version)
	v.CreatedAt, v.UpdatedAt = v.CreatedAt.UTC(), v.UpdatedAt.UTC()
	return v, err
}

func (p *Postgres) UpsertVendor(ctx context.Context, a store.Actor, v store.Vendor) (store.Vendor, error) {
	switch {
	case v.ID == "":
		return store.Vendor{}, invalid("a vendor needs an id")
	case v.ID == store.LocalVendor:
		return store.Vendor{}, invalid("vendor id %q is reserved for models that nodes serve", store.LocalVendor)
	}
	var out store.Vendor
	err := p.write(ctx, a, "upsert vendor", func(tx pgx.Tx) ([]change, error) {
		if err := lockEntity(ctx, tx, "vendor/"+v.ID); err != nil {
			return nil, err
		}
		var before any
		old, err := scanVendor(tx.QueryRow(ctx, "SELECT "+vendorCols+" FROM vendors WHERE id = $1 FOR UPDATE", v.ID))
		switch {
		case err == nil:
			before = old
		case !errors.Is(err, pgx.ErrNoRows):
			return nil, err
		}
		// The key is set only by SetVendorKey.
		out, err = scanVendor(tx.QueryRow(ctx, `INSERT INTO vendors (id, base_url, enabled) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET base_url = EXCLUDED.base_url, enabled = EXCLUDED.enabled, updated_at = now()
			RETURNING `+vendorCols, v.ID, v.BaseURL, v.Enabled))
		if err != nil {
			return nil, err
		}
		return []change{{"UpsertVendor", "vendor/" + v.ID, before, out}}, nil
	})
	return out, err
}

func (p *Postgres) SetVendorKey(ctx context.Context, a store.Actor, id string, sealed []byte, version uint32) (store.Vendor, error) {
	if len(sealed) == 0 {
		sealed, version = nil, 0
	}
	var out store.Vendor
	err := p.write(ctx, a, "set vendor key", func(tx pgx.Tx) ([]change, error) {
		// The row lock is what ResealAll holds while it rewrites: a key set
		// meanwhile waits here, then replaces whatever ResealAll wrote.
		old, err := scanVendor(tx.QueryRow(ctx, "SELECT "+vendorCols+" FROM vendors WHERE id = $1 FOR UPDATE", id))
		if err != nil {
			return nil, notFound(err, "vendor", id)
		}
		out, err = scanVendor(tx.QueryRow(ctx, `UPDATE vendors SET api_key_sealed = $2, key_version = $3, updated_at = now()
			WHERE id = $1 RETURNING `+vendorCols, id, sealed, int64(version)))
		if err != nil {
			return nil, err
		}
		return []change{{"SetVendorKey", "vendor/" + id, old, out}}, nil
	})
	return out, err
}

func (p *Postgres) GetVendor(ctx context.Context, id string) (store.Vendor, error) {
	v, err := scanVendor(p.pool.QueryRow(ctx, "SELECT "+vendorCols+" FROM vendors WHERE id = $1", id))
	if err != nil {
		return store.Vendor{}, fail("get vendor", notFound(err, "vendor", id))
	}
	return v, nil
}

func (p *Postgres) ListVendors(ctx context.Context) ([]store.Vendor, error) {
	rows, err := p.pool.Query(ctx, "SELECT "+vendorCols+` FROM vendors ORDER BY id COLLATE "C"`)
	if err != nil {
		return nil, fail("list vendors", err)
	}
	vs, err := collect(rows, scanVendor)
	return vs, fail("list vendors", err)
}

func (p *Postgres) DeleteVendor(ctx context.Context, a store.Actor, id string) error {
	return p.write(ctx, a, "delete vendor", func(tx pgx.Tx) ([]change, error) {
		// FOR UPDATE waits for an UpsertModel holding the row FOR SHARE, so
		// the models read next include the one it added.
		old, err := scanVendor(tx.QueryRow(ctx, "SELECT "+vendorCols+" FROM vendors WHERE id = $1 FOR UPDATE", id))
		if err != nil {
			return nil, notFound(err, "vendor", id)
		}
		rows, err := tx.Query(ctx, `SELECT id FROM models WHERE vendor = $1 ORDER BY id COLLATE "C"`, id)
		if err != nil {
			return nil, err
		}
		users, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, err
		}
		if len(users) > 0 {
			return nil, conflict("vendor %q is used by models %s; delete them or move them to another vendor first", id, strings.Join(users, ", "))
		}
		if _, err := tx.Exec(ctx, "DELETE FROM vendors WHERE id = $1", id); err != nil {
			return nil, err
		}
		return []change{{"DeleteVendor", "vendor/" + id, old, nil}}, nil
	})
}

// --- models ---

const modelCols = `id, vendor, upstream_model, efforts, capabilities, context_window, default_max_tokens,
	queue_timeout_ms, fallbacks, input_price_per_mtok, output_price_per_mtok, enabled, created_at, updated_at`

func scanModel(r scanner) (store.Model, error) {
	var m store.Model
	err := r.Scan(&m.ID, &m.Vendor, &m.UpstreamModel, &m.Efforts, &m.Capabilities, &m.ContextWindow, &m.DefaultMaxTokens,
		&m.QueueTimeoutMS, &m.Fallbacks, &m.InputPricePerMTok, &m.OutputPricePerMTok, &m.Enabled, &m.CreatedAt, &m.UpdatedAt)
	m.Efforts, m.Capabilities, m.Fallbacks = orEmpty(m.Efforts), orEmpty(m.Capabilities), orEmpty(m.Fallbacks)
	m.CreatedAt, m.UpdatedAt = m.CreatedAt.UTC(), m.UpdatedAt.UTC()
	return m, err
}

func (p *Postgres) UpsertModel(ctx context.Context, a store.Actor, m store.Model) (store.Model, error) {
	switch {
	case m.ID == "":
		return store.Model{}, invalid("a model needs an id")
	case m.Vendor == "":
		return store.Model{}, invalid("model %q needs a vendor (%q for models that nodes serve)", m.ID, store.LocalVendor)
	}
	var out store.Model
	err := p.write(ctx, a, "upsert model", func(tx pgx.Tx) ([]change, error) {
		if err := lockEntity(ctx, tx, "model/"+m.ID); err != nil {
			return nil, err
		}
		if m.Vendor != store.LocalVendor {
			// FOR SHARE keeps the vendor from being deleted under the model.
			var one int
			if err := tx.QueryRow(ctx, "SELECT 1 FROM vendors WHERE id = $1 FOR SHARE", m.Vendor).Scan(&one); err != nil {
				return nil, notFound(err, "vendor", m.Vendor)
			}
		}
		var before any
		old, err := scanModel(tx.QueryRow(ctx, "SELECT "+modelCols+" FROM models WHERE id = $1 FOR UPDATE", m.ID))
		switch {
		case err == nil:
			before = old
		case !errors.Is(err, pgx.ErrNoRows):
			return nil, err
		}
		out, err = scanModel(tx.QueryRow(ctx, `INSERT INTO models (id, vendor, upstream_model, efforts, capabilities,
				context_window, default_max_tokens, queue_timeout_ms, fallbacks, input_price_per_mtok,
				output_price_per_mtok, enabled)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
			ON CONFLICT (id) DO UPDATE SET vendor = EXCLUDED.vendor, upstream_model = EXCLUDED.upstream_model,
				efforts = EXCLUDED.efforts, capabilities = EXCLUDED.capabilities, context_window = EXCLUDED.context_window,
				default_max_tokens = EXCLUDED.default_max_tokens, queue_timeout_ms = EXCLUDED.queue_timeout_ms,
				fallbacks = EXCLUDED.fallbacks, input_price_per_mtok = EXCLUDED.input_price_per_mtok,
				output_price_per_mtok = EXCLUDED.output_price_per_mtok, enabled = EXCLUDED.enabled, updated_at = now()
			RETURNING `+modelCols,
			m.ID, m.Vendor, m.UpstreamModel, orEmpty(m.Efforts), orEmpty(m.Capabilities), m.ContextWindow,
			m.DefaultMaxTokens, m.QueueTimeoutMS, orEmpty(m.Fallbacks), m.InputPricePerMTok, m.OutputPricePerMTok, m.Enabled))
		if err != nil {
			return nil, err
		}
		return []change{{"UpsertModel", "model/" + m.ID, before, out}}, nil
	})
	return out, err
}

func (p *Postgres) GetModel(ctx context.Context, id string) (store.Model, error) {
	m, err := scanModel(p.pool.QueryRow(ctx, "SELECT "+modelCols+" FROM models WHERE id = $1", id))
	if err != nil {
		return store.Model{}, fail("get model", notFound(err, "model", id))
	}
	return m, nil
}

func (p *Postgres) ListModels(ctx context.Context) ([]store.Model, error) {
	rows, err := p.pool.Query(ctx, "SELECT "+modelCols+` FROM models ORDER BY id COLLATE "C"`)
	if err != nil {
		return nil, fail("list models", err)
	}
	ms, err := collect(rows, scanModel)
	return ms, fail("list models", err)
}

func (p *Postgres) DeleteModel(ctx context.Context, a store.Actor, id string) error {
	return p.write(ctx, a, "delete model", func(tx pgx.Tx) ([]change, error) {
		old, err := scanModel(tx.QueryRow(ctx, "SELECT "+modelCols+" FROM models WHERE id = $1 FOR UPDATE", id))
		if err != nil {
			return nil, notFound(err, "model", id)
		}
		if _, err := tx.Exec(ctx, "DELETE FROM models WHERE id = $1", id); err != nil {
			return nil, err
		}
		return []change{{"DeleteModel", "model/" + id, old, nil}}, nil
	})
}

// --- nodes ---

const nodeCols = `id, name, weight, drain, created_at, updated_at`

func scanNode(r scanner) (store.Node, error) {
	var n store.Node
	err := r.Scan(&n.ID, &n.Name, &n.Weight, &n.Drain, &n.CreatedAt, &n.UpdatedAt)
	n.CreatedAt, n.UpdatedAt = n.CreatedAt.UTC(), n.UpdatedAt.UTC()
	return n, err
}

func (p *Postgres) GetNode(ctx context.Context, id string) (store.Node, error) {
	n, err := scanNode(p.pool.QueryRow(ctx, "SELECT "+nodeCols+" FROM nodes WHERE id = $1", id))
	if err != nil {
		return store.Node{}, fail("get node", notFound(err, "node", id))
	}
	return n, nil
}

func (p *Postgres) ListNodes(ctx context.Context) ([]store.Node, error) {
	rows, err := p.pool.Query(ctx, "SELECT "+nodeCols+` FROM nodes ORDER BY id COLLATE "C"`)
	if err != nil {
		return nil, fail("list nodes", err)
	}
	ns, err := collect(rows, scanNode)
	return ns, fail("list nodes", err)
}

// updateNode changes one column of a registered node; column is one of
// ours, never input.
func (p *Postgres) updateNode(ctx context.Context, a store.Actor, action, id, column string, value any) (store.Node, error) {
	var out store.Node
	err := p.write(ctx, a, strings.ToLower(action), func(tx pgx.Tx) ([]change, error) {
		old, err := scanNode(tx.QueryRow(ctx, "SELECT "+nodeCols+" FROM nodes WHERE id = $1 FOR UPDATE", id))
		if err != nil {
			return nil, notFound(err, "node", id)
		}
		out, err = scanNode(tx.QueryRow(ctx, "UPDATE nodes SET "+column+" = $2, updated_at = now() WHERE id = $1 RETURNING "+nodeCols, id, value))
		if err != nil {
			return nil, err
		}
		return []change{{action, "node/" + id, old, out}}, nil
	})
	return out, err
}

func (p *Postgres) SetNodeDrain(ctx context.Context, a store.Actor, id string, drain bool) (store.Node, error) {
	return p.updateNode(ctx, a, "DrainNode", id, "drain", drain)
}

func (p *Postgres) SetNodeWeight(ctx context.Context, a store.Actor, id string, weight float64) (store.Node, error) {
	if math.IsNaN(weight) || math.IsInf(weight, 0) || weight < 0 {
		return store.Node{}, invalid("node weight %v is not a finite number ≥ 0", weight)
	}
	return p.updateNode(ctx, a, "SetNodeWeight", id, "weight", weight)
}

// --- audit ---

// DefaultAuditLimit is how many entries ListAudit returns when limit ≤ 0.
const DefaultAuditLimit = 100

func (p *Postgres) ListAudit(ctx context.Context, since time.Time, limit int) ([]store.AuditEntry, error) {
	if limit <= 0 {
		limit = DefaultAuditLimit
	}
	var from *time.Time
	if !since.IsZero() {
		from = &since
	}
	rows, err := p.pool.Query(ctx, `SELECT id, time, actor_key_id, action, entity,
			coalesce(before_json::text, ''), coalesce(after_json::text, '')
		FROM audit_log WHERE $1::timestamptz IS NULL OR time >= $1
		ORDER BY time DESC, id DESC LIMIT $2`, from, limit)
	if err != nil {
		return nil, fail("list the audit log", err)
	}
	es, err := collect(rows, func(r scanner) (store.AuditEntry, error) {
		var e store.AuditEntry
		err := r.Scan(&e.ID, &e.Time, &e.ActorKeyID, &e.Action, &e.Entity, &e.BeforeJSON, &e.AfterJSON)
		e.Time = e.Time.UTC()
		return e, err
	})
	return es, fail("list the audit log", err)
}
