// Package memory keeps Switchyard's store in memory, for `switchyard dev`
// without a database. It behaves as the Postgres store does — the same
// validation, the same NotFound/Conflict/Invalid errors, an audit entry for
// every change and a config version every admin write bumps — so the one
// contract suite (storetest) holds for both; nothing it holds survives the
// process.
package memory

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-ai/switchyard/gateway/store"
)

var _ store.Store = (*Memory)(nil)

// Memory is an in-memory store.Store. Its zero value is not ready; use New.
type Memory struct {
	mu          sync.Mutex
	tenants     map[string]store.Tenant
	keys        map[string]store.Key
	vendors     map[string]store.Vendor
	models      map[string]store.Model
	nodes       map[string]store.Node
	usage       []store.UsageEvent
	audit       []store.AuditEntry
	version     int64
	nextAuditID int64

	subMu   sync.Mutex
	subs    map[int]*subscriber
	nextSub int
}

// New returns an empty store at config version 0.
func New() *Memory {
	return &Memory{
		tenants: map[string]store.Tenant{},
		keys:    map[string]store.Key{},
		vendors: map[string]store.Vendor{},
		models:  map[string]store.Model{},
		nodes:   map[string]store.Node{},
		subs:    map[int]*subscriber{},
	}
}

// subscriber delivers versions in increasing order: two writers may finish
// in either order, and a follower must never step back to an older version.
type subscriber struct {
	mu   sync.Mutex
	last int64
	fn   func(version int64)
}

// Subscribe calls fn with the new config version after every admin write,
// as Postgres's LISTEN/NOTIFY does for replicas. Versions only grow; one
// that arrives after a newer one is skipped. fn runs on the writer's
// goroutine after the write is visible, so it may read the store, but it
// must not write to it. cancel stops the calls.
func (m *Memory) Subscribe(fn func(version int64)) (cancel func()) {
	m.subMu.Lock()
	defer m.subMu.Unlock()
	id := m.nextSub
	m.nextSub++
	m.subs[id] = &subscriber{fn: fn}
	return func() {
		m.subMu.Lock()
		defer m.subMu.Unlock()
		delete(m.subs, id)
	}
}

func (m *Memory) notify(version int64) {
	m.subMu.Lock()
	subs := slices.Collect(maps.Values(m.subs))
	m.subMu.Unlock()
	for _, s := range subs {
		s.mu.Lock()
		if version > s.last {
			s.last = version
			s.fn(version)
		}
		s.mu.Unlock()
	}
}

// change is one audited change; before and after are nil when the entity
// did not exist before, or no longer does.
type change struct {
	action, entity string
	before, after  any
}

// write runs fn under the lock and, when it returns changes, records them
// and bumps the config version, then tells subscribers.
func (m *Memory) write(a store.Actor, fn func(now time.Time) ([]change, error)) error {
	m.mu.Lock()
	now := timestamp()
	changes, err := fn(now)
	if err != nil || len(changes) == 0 {
		m.mu.Unlock()
		return err
	}
	for _, c := range changes {
		m.nextAuditID++
		m.audit = append(m.audit, store.AuditEntry{
			ID:         m.nextAuditID,
			Time:       now,
			ActorKeyID: a.KeyID,
			Action:     c.action,
			Entity:     c.entity,
			BeforeJSON: store.AuditJSON(c.before),
			AfterJSON:  store.AuditJSON(c.after),
		})
	}
	m.version++
	v := m.version
	m.mu.Unlock()
	m.notify(v)
	return nil
}

// timestamp is now at the precision Postgres keeps, so both stores return
// the same times.
func timestamp() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// storeError carries a message a person can act on and the sentinel the
// edge maps.
type storeError struct {
	msg  string
	kind error
}

func (e *storeError) Error() string { return e.msg }
func (e *storeError) Unwrap() error { return e.kind }

func invalid(format string, args ...any) error {
	return &storeError{msg: fmt.Sprintf(format, args...), kind: store.ErrInvalid}
}

func conflict(format string, args ...any) error {
	return &storeError{msg: fmt.Sprintf(format, args...), kind: store.ErrConflict}
}

// --- tenants ---

func (m *Memory) UpsertTenant(ctx context.Context, a store.Actor, t store.Tenant) (store.Tenant, error) {
	if t.ID == "" {
		return store.Tenant{}, invalid("a tenant needs an id")
	}
	var out store.Tenant
	err := m.write(a, func(now time.Time) ([]change, error) {
		t = cloneTenant(t)
		t.UpdatedAt = now
		t.CreatedAt = now
		var before any
		if old, ok := m.tenants[t.ID]; ok {
			t.CreatedAt = old.CreatedAt
			before = old
		}
		m.tenants[t.ID] = t
		out = cloneTenant(t)
		return []change{{"UpsertTenant", "tenant/" + t.ID, before, out}}, nil
	})
	return out, err
}

func (m *Memory) GetTenant(ctx context.Context, id string) (store.Tenant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tenants[id]
	if !ok {
		return store.Tenant{}, store.NotFound("tenant", id)
	}
	return cloneTenant(t), nil
}

func (m *Memory) ListTenants(ctx context.Context) ([]store.Tenant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]store.Tenant, 0, len(m.tenants))
	for _, id := range slices.Sorted(maps.Keys(m.tenants)) {
		out = append(out, cloneTenant(m.tenants[id]))
	}
	return out, nil
}

func (m *Memory) DeleteTenant(ctx context.Context, a store.Actor, id string) error {
	return m.write(a, func(now time.Time) ([]change, error) {
		t, ok := m.tenants[id]
		if !ok {
			return nil, store.NotFound("tenant", id)
		}
		delete(m.tenants, id)
		changes := []change{{"DeleteTenant", "tenant/" + id, t, nil}}
		for _, kid := range slices.Sorted(maps.Keys(m.keys)) {
			k := m.keys[kid]
			if k.Kind != store.KeyClient || k.TenantID != id || k.Revoked() {
				continue
			}
			before := cloneKey(k)
			k.RevokedAt = &now
			m.keys[kid] = k
			changes = append(changes, change{"DeleteTenant", "key/" + kid, before, cloneKey(k)})
		}
		return changes, nil
	})
}

// --- keys ---

func (m *Memory) CreateKey(ctx context.Context, a store.Actor, k store.Key) (store.Key, error) {
	if err := store.ValidateKey(k); err != nil {
		return store.Key{}, err
	}
	var out store.Key
	err := m.write(a, func(now time.Time) ([]change, error) {
		if _, ok := m.keys[k.ID]; ok {
			return nil, conflict("key %q already exists", k.ID)
		}
		action := store.CreateKeyAction(k.Kind)
		var changes []change
		switch k.Kind {
		case store.KeyClient:
			if _, ok := m.tenants[k.TenantID]; !ok {
				return nil, store.NotFound("tenant", k.TenantID)
			}
		case store.KeyNode:
			if _, ok := m.nodes[k.NodeID]; !ok {
				n := store.Node{ID: k.NodeID, Name: k.Name, Weight: 1, CreatedAt: now, UpdatedAt: now}
				if n.Name == "" {
					n.Name = k.NodeID
				}
				m.nodes[n.ID] = n
				changes = append(changes, change{action, "node/" + n.ID, nil, n})
			}
			for _, kid := range slices.Sorted(maps.Keys(m.keys)) {
				old := m.keys[kid]
				if old.Kind == store.KeyNode && old.NodeID == k.NodeID && !old.Revoked() {
					before := cloneKey(old)
					old.RevokedAt = &now
					old.Sealed = nil
					m.keys[kid] = old
					changes = append(changes, change{action, "key/" + kid, before, cloneKey(old)})
				}
			}
		}
		k = cloneKey(k)
		k.CreatedAt = now
		k.RevokedAt = nil
		m.keys[k.ID] = k
		out = cloneKey(k)
		return append([]change{{action, "key/" + k.ID, nil, out}}, changes...), nil
	})
	return out, err
}

func (m *Memory) GetKey(ctx context.Context, id string) (store.Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.keys[id]
	if !ok {
		return store.Key{}, store.NotFound("key", id)
	}
	return cloneKey(k), nil
}

func (m *Memory) ListKeys(ctx context.Context, kind store.KeyKind, tenantID string) ([]store.Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []store.Key{}
	for _, k := range m.keys {
		if (kind == "" || k.Kind == kind) && (tenantID == "" || k.TenantID == tenantID) {
			out = append(out, cloneKey(k))
		}
	}
	slices.SortFunc(out, func(x, y store.Key) int {
		if c := x.CreatedAt.Compare(y.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
	return out, nil
}

func (m *Memory) RevokeKey(ctx context.Context, a store.Actor, kind store.KeyKind, id string) (store.Key, error) {
	var out store.Key
	err := m.write(a, func(now time.Time) ([]change, error) {
		k, ok := m.keys[id]
		if !ok || k.Kind != kind {
			return nil, store.NotFound(string(kind)+" key", id)
		}
		if k.Revoked() {
			out = cloneKey(k)
			return nil, nil
		}
		before := cloneKey(k)
		k.RevokedAt = &now
		k.Sealed = nil
		m.keys[id] = k
		out = cloneKey(k)
		return []change{{store.RevokeKeyAction(kind), "key/" + id, before, out}}, nil
	})
	return out, err
}

func (m *Memory) NodeKey(ctx context.Context, nodeID string) (store.Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range m.keys {
		if k.Kind == store.KeyNode && k.NodeID == nodeID && !k.Revoked() {
			return cloneKey(k), nil
		}
	}
	return store.Key{}, store.NotFound("node key", nodeID)
}

func (m *Memory) AnyAdminKey(ctx context.Context) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range m.keys {
		if k.Kind == store.KeyAdmin && !k.Revoked() {
			return true, nil
		}
	}
	return false, nil
}

// --- vendors ---

func (m *Memory) UpsertVendor(ctx context.Context, a store.Actor, v store.Vendor) (store.Vendor, error) {
	switch {
	case v.ID == "":
		return store.Vendor{}, invalid("a vendor needs an id")
	case v.ID == store.LocalVendor:
		return store.Vendor{}, invalid("vendor id %q is reserved for models that nodes serve", store.LocalVendor)
	}
	var out store.Vendor
	err := m.write(a, func(now time.Time) ([]change, error) {
		n := store.Vendor{ID: v.ID, BaseURL: v.BaseURL, Enabled: v.Enabled, CreatedAt: now, UpdatedAt: now}
		var before any
		if old, ok := m.vendors[v.ID]; ok {
			// The key is set only by SetVendorKey.
			n.KeySealed, n.KeyVersion, n.CreatedAt = old.KeySealed, old.KeyVersion, old.CreatedAt
			before = old
		}
		m.vendors[v.ID] = n
		out = cloneVendor(n)
		return []change{{"UpsertVendor", "vendor/" + v.ID, before, out}}, nil
	})
	return out, err
}

func (m *Memory) SetVendorKey(ctx context.Context, a store.Actor, id string, sealed []byte, version uint32) (store.Vendor, error) {
	var out store.Vendor
	err := m.write(a, func(now time.Time) ([]change, error) {
		v, ok := m.vendors[id]
		if !ok {
			return nil, store.NotFound("vendor", id)
		}
		before := cloneVendor(v)
		v.KeySealed, v.KeyVersion, v.UpdatedAt = slices.Clone(sealed), version, now
		if len(sealed) == 0 {
			v.KeySealed, v.KeyVersion = nil, 0
		}
		m.vendors[id] = v
		out = cloneVendor(v)
		return []change{{"SetVendorKey", "vendor/" + id, before, out}}, nil
	})
	return out, err
}

func (m *Memory) GetVendor(ctx context.Context, id string) (store.Vendor, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.vendors[id]
	if !ok {
		return store.Vendor{}, store.NotFound("vendor", id)
	}
	return cloneVendor(v), nil
}

func (m *Memory) ListVendors(ctx context.Context) ([]store.Vendor, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]store.Vendor, 0, len(m.vendors))
	for _, id := range slices.Sorted(maps.Keys(m.vendors)) {
		out = append(out, cloneVendor(m.vendors[id]))
	}
	return out, nil
}

func (m *Memory) DeleteVendor(ctx context.Context, a store.Actor, id string) error {
	return m.write(a, func(now time.Time) ([]change, error) {
		v, ok := m.vendors[id]
		if !ok {
			return nil, store.NotFound("vendor", id)
		}
		var users []string
		for _, mod := range m.models {
			if mod.Vendor == id {
				users = append(users, mod.ID)
			}
		}
		if len(users) > 0 {
			slices.Sort(users)
			return nil, conflict("vendor %q is used by models %s; delete them or move them to another vendor first", id, strings.Join(users, ", "))
		}
		delete(m.vendors, id)
		return []change{{"DeleteVendor", "vendor/" + id, v, nil}}, nil
	})
}

// --- models ---

func (m *Memory) UpsertModel(ctx context.Context, a store.Actor, md store.Model) (store.Model, error) {
	switch {
	case md.ID == "":
		return store.Model{}, invalid("a model needs an id")
	case md.Vendor == "":
		return store.Model{}, invalid("model %q needs a vendor (%q for models that nodes serve)", md.ID, store.LocalVendor)
	}
	var out store.Model
	err := m.write(a, func(now time.Time) ([]change, error) {
		if md.Vendor != store.LocalVendor {
			if _, ok := m.vendors[md.Vendor]; !ok {
				return nil, store.NotFound("vendor", md.Vendor)
			}
		}
		n := cloneModel(md)
		n.CreatedAt, n.UpdatedAt = now, now
		var before any
		if old, ok := m.models[md.ID]; ok {
			n.CreatedAt = old.CreatedAt
			before = old
		}
		m.models[n.ID] = n
		out = cloneModel(n)
		return []change{{"UpsertModel", "model/" + n.ID, before, out}}, nil
	})
	return out, err
}

func (m *Memory) GetModel(ctx context.Context, id string) (store.Model, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	md, ok := m.models[id]
	if !ok {
		return store.Model{}, store.NotFound("model", id)
	}
	return cloneModel(md), nil
}

func (m *Memory) ListModels(ctx context.Context) ([]store.Model, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]store.Model, 0, len(m.models))
	for _, id := range slices.Sorted(maps.Keys(m.models)) {
		out = append(out, cloneModel(m.models[id]))
	}
	return out, nil
}

func (m *Memory) DeleteModel(ctx context.Context, a store.Actor, id string) error {
	return m.write(a, func(now time.Time) ([]change, error) {
		md, ok := m.models[id]
		if !ok {
			return nil, store.NotFound("model", id)
		}
		delete(m.models, id)
		return []change{{"DeleteModel", "model/" + id, md, nil}}, nil
	})
}

// --- nodes ---

func (m *Memory) GetNode(ctx context.Context, id string) (store.Node, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.nodes[id]
	if !ok {
		return store.Node{}, store.NotFound("node", id)
	}
	return n, nil
}

func (m *Memory) ListNodes(ctx context.Context) ([]store.Node, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]store.Node, 0, len(m.nodes))
	for _, id := range slices.Sorted(maps.Keys(m.nodes)) {
		out = append(out, m.nodes[id])
	}
	return out, nil
}

func (m *Memory) updateNode(a store.Actor, action, id string, set func(*store.Node)) (store.Node, error) {
	var out store.Node
	err := m.write(a, func(now time.Time) ([]change, error) {
		n, ok := m.nodes[id]
		if !ok {
			return nil, store.NotFound("node", id)
		}
		before := n
		set(&n)
		n.UpdatedAt = now
		m.nodes[id] = n
		out = n
		return []change{{action, "node/" + id, before, n}}, nil
	})
	return out, err
}

func (m *Memory) SetNodeDrain(ctx context.Context, a store.Actor, id string, drain bool) (store.Node, error) {
	return m.updateNode(a, "DrainNode", id, func(n *store.Node) { n.Drain = drain })
}

func (m *Memory) SetNodeWeight(ctx context.Context, a store.Actor, id string, weight float64) (store.Node, error) {
	if math.IsNaN(weight) || math.IsInf(weight, 0) || weight < 0 {
		return store.Node{}, invalid("node weight %v is not a finite number ≥ 0", weight)
	}
	return m.updateNode(a, "SetNodeWeight", id, func(n *store.Node) { n.Weight = weight })
}

// --- keyring rotation ---

// sealedValue is one value ResealAll visits, with where to write it back.
type sealedValue struct {
	ref    store.SealedRef
	sealed []byte
	put    func(sealed []byte, version uint32)
}

// ResealAll holds the store's lock for the whole walk, which is what the
// row locks of the Postgres store give: a key set meanwhile waits, then
// lands on top. The Resealer runs under that lock and must not call the
// store.
func (m *Memory) ResealAll(ctx context.Context, a store.Actor, fn store.Resealer, dryRun bool) (store.ResealReport, error) {
	var rep store.ResealReport
	err := m.write(a, func(now time.Time) ([]change, error) {
		var values []sealedValue
		for _, id := range slices.Sorted(maps.Keys(m.vendors)) {
			v := m.vendors[id]
			if v.KeySealed == nil {
				continue
			}
			values = append(values, sealedValue{
				ref:    store.SealedRef{Table: "vendors", Row: id, Column: "api_key_sealed"},
				sealed: v.KeySealed,
				put: func(sealed []byte, version uint32) {
					v.KeySealed, v.KeyVersion, v.UpdatedAt = sealed, version, now
					m.vendors[id] = v
				},
			})
		}
		for _, id := range slices.Sorted(maps.Keys(m.keys)) {
			k := m.keys[id]
			if k.Sealed == nil {
				continue
			}
			values = append(values, sealedValue{
				ref:    store.SealedRef{Table: "api_keys", Row: id, Column: "secret_sealed"},
				sealed: k.Sealed,
				put: func(sealed []byte, _ uint32) {
					k.Sealed = sealed
					m.keys[id] = k
				},
			})
		}

		planned := make([]store.SealedValue, len(values))
		for i, v := range values {
			planned[i] = store.SealedValue{Ref: v.ref, Sealed: slices.Clone(v.sealed)}
		}
		rewrites, plan, before := store.PlanReseal(fn, planned)
		rep = plan
		if !store.FinishReseal(rewrites, &rep, before, dryRun) {
			return nil, nil
		}
		for _, r := range rewrites {
			values[r.Index].put(slices.Clone(r.Sealed), r.Version)
		}
		if rep.Rewritten == 0 {
			return nil, nil
		}
		return []change{{"RotateEncryption", "keyring",
			store.ResealSummary{RowsPerVersion: before},
			store.ResealSummary{Rewritten: rep.Rewritten, RowsPerVersion: rep.RowsPerVersion}}}, nil
	})
	return rep, err
}

// --- usage ---

func (m *Memory) InsertUsage(ctx context.Context, events []store.UsageEvent) error {
	now := timestamp()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range events {
		e.FallbackPath = slices.Clone(e.FallbackPath)
		e.Attributes = maps.Clone(e.Attributes)
		if e.Time.IsZero() {
			e.Time = now
		}
		e.Time = e.Time.UTC().Truncate(time.Microsecond)
		m.usage = append(m.usage, e)
	}
	return nil
}

func (m *Memory) QueryUsage(ctx context.Context, q store.UsageQuery) ([]store.UsageRow, error) {
	g, err := store.UsageGroups(q.GroupBy)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rows := map[store.UsageRow]*store.UsageRow{}
	for _, e := range m.usage {
		if (q.TenantID != "" && e.TenantID != q.TenantID) || (q.Model != "" && e.Model != q.Model) ||
			(!q.Since.IsZero() && e.Time.Before(q.Since)) || (!q.Until.IsZero() && !e.Time.Before(q.Until)) {
			continue
		}
		var k store.UsageRow
		if g["tenant"] {
			k.TenantID = e.TenantID
		}
		if g["model"] {
			k.Model = e.Model
		}
		if g["target"] {
			k.Target = e.Target
		}
		switch {
		case g["day"]:
			k.Period = e.Time.UTC().Format("2006-01-02")
		case g["month"]:
			k.Period = e.Time.UTC().Format("2006-01")
		}
		r, ok := rows[k]
		if !ok {
			r = &store.UsageRow{TenantID: k.TenantID, Model: k.Model, Target: k.Target, Period: k.Period}
			rows[k] = r
		}
		r.Requests++
		r.InputTokens += e.InputTokens
		r.OutputTokens += e.OutputTokens
		r.CostUSD += e.CostUSD
	}
	out := make([]store.UsageRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	slices.SortFunc(out, compareUsageRows)
	return out, nil
}

func compareUsageRows(x, y store.UsageRow) int {
	for _, c := range [][2]string{{x.Period, y.Period}, {x.TenantID, y.TenantID}, {x.Model, y.Model}, {x.Target, y.Target}} {
		if r := strings.Compare(c[0], c[1]); r != 0 {
			return r
		}
	}
	return 0
}

// --- audit, version, lifecycle ---

// DefaultAuditLimit is how many entries ListAudit returns when limit ≤ 0.
const DefaultAuditLimit = 100

func (m *Memory) ListAudit(ctx context.Context, since time.Time, limit int) ([]store.AuditEntry, error) {
	if limit <= 0 {
		limit = DefaultAuditLimit
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []store.AuditEntry{}
	for i := len(m.audit) - 1; i >= 0 && len(out) < limit; i-- {
		if e := m.audit[i]; !e.Time.Before(since) {
			out = append(out, e)
		}
	}
	return out, nil
}

func (m *Memory) ConfigVersion(ctx context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.version, nil
}

// Ping always succeeds: memory is always there.
func (m *Memory) Ping(ctx context.Context) error { return nil }

// Close does nothing; the store lives as long as the process.
func (m *Memory) Close() {}

// --- copies: callers never share the store's slices ---

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return slices.Clone(s)
}

func cloneTenant(t store.Tenant) store.Tenant {
	t.AllowedModels = orEmpty(t.AllowedModels)
	return t
}

func cloneKey(k store.Key) store.Key {
	k.SecretHash = slices.Clone(k.SecretHash)
	k.Sealed = slices.Clone(k.Sealed)
	if k.RevokedAt != nil {
		t := *k.RevokedAt
		k.RevokedAt = &t
	}
	return k
}

func cloneVendor(v store.Vendor) store.Vendor {
	v.KeySealed = slices.Clone(v.KeySealed)
	return v
}

func cloneModel(md store.Model) store.Model {
	md.Efforts = orEmpty(md.Efforts)
	md.Capabilities = orEmpty(md.Capabilities)
	md.Fallbacks = orEmpty(md.Fallbacks)
	return md
}
