// Package store is the contract for Switchyard's durable state: tenants,
// keys, vendors, models, nodes, usage events, the audit log and the config
// version. Two implementations keep it: postgres (production) and memory
// (`switchyard dev` without a database); storetest holds the one suite both
// must pass.
//
// Every write is an admin change: it records an audit entry (secrets
// redacted) and bumps the config version in the same transaction, so that
// replicas following the version see every change.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Implementations wrap them with the entity and id, so that
// the edge can map them (errors.Is) and still show a message a person can act
// on.
var (
	ErrNotFound    = errors.New("not found")
	ErrConflict    = errors.New("conflict")
	ErrInvalid     = errors.New("invalid")
	ErrUnavailable = errors.New("store unavailable")
)

// NotFoundError says which entity was missing.
type NotFoundError struct {
	Entity string // tenant, model, vendor, key, node
	ID     string
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("%s %q is not registered", e.Entity, e.ID)
}

func (e *NotFoundError) Unwrap() error { return ErrNotFound }

// NotFound returns a *NotFoundError.
func NotFound(entity, id string) error { return &NotFoundError{Entity: entity, ID: id} }

// Actor is who makes an admin change, as recorded in the audit log.
type Actor struct {
	KeyID string // the admin key id, or "bootstrap"
}

// Tenant is a customer of the gateway. Zero limits mean unlimited.
type Tenant struct {
	ID                   string    `json:"id"`
	Name                 string    `json:"name"`
	AllowedModels        []string  `json:"allowed_models"`
	RequestsPerMinute    int64     `json:"requests_per_minute"`
	TokensPerMinute      int64     `json:"tokens_per_minute"`
	DailyTokenBudget     int64     `json:"daily_token_budget"`
	MonthlyCostBudgetUSD float64   `json:"monthly_cost_budget_usd"`
	Priority             int32     `json:"priority"`
	Interactive          bool      `json:"interactive"`
	CreatedAt            time.Time `json:"created_at"`
	UpdatedAt            time.Time `json:"updated_at"`
}

// KeyKind is what a key opens.
type KeyKind string

const (
	KeyClient KeyKind = "client" // syk_: the OpenAI API, for a tenant
	KeyAdmin  KeyKind = "admin"  // sya_: AdminService
	KeyNode   KeyKind = "node"   // syn_: NodeService, and the node's engine front
)

// Key is a stored API key. Only the SHA-256 of the secret is kept; node keys
// also keep the whole key sealed, because the gateway presents it to the
// node's engine front.
type Key struct {
	ID         string     `json:"id"` // the lookup id of syk_<id>_<secret>
	Kind       KeyKind    `json:"kind"`
	Name       string     `json:"name"`
	TenantID   string     `json:"tenant_id"` // client keys
	NodeID     string     `json:"node_id"`   // node keys
	SecretHash []byte     `json:"-"`         // SHA-256 of the secret part
	Sealed     []byte     `json:"-"`         // node keys: the whole key sealed (table "api_keys", row ID, column "secret_sealed")
	CreatedAt  time.Time  `json:"created_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
}

// Revoked reports whether the key was revoked.
func (k Key) Revoked() bool { return k.RevokedAt != nil }

// Vendor is an OpenAI-compatible upstream.
type Vendor struct {
	ID         string    `json:"id"`
	BaseURL    string    `json:"base_url"`
	Enabled    bool      `json:"enabled"`
	KeySealed  []byte    `json:"-"`           // sealed (table "vendors", row ID, column "api_key_sealed"); nil when unset
	KeyVersion uint32    `json:"key_version"` // the keyring version of KeySealed; 0 when unset
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// Model is a served model. Vendor "local" means nodes serve it.
type Model struct {
	ID                 string    `json:"id"`
	Vendor             string    `json:"vendor"`
	UpstreamModel      string    `json:"upstream_model"`
	Efforts            []string  `json:"efforts"` // low, medium, high
	Capabilities       []string  `json:"capabilities"`
	ContextWindow      int32     `json:"context_window"`
	DefaultMaxTokens   int32     `json:"default_max_tokens"`
	QueueTimeoutMS     int32     `json:"queue_timeout_ms"`
	Fallbacks          []string  `json:"fallbacks"`
	InputPricePerMTok  float64   `json:"input_price_per_mtok"`
	OutputPricePerMTok float64   `json:"output_price_per_mtok"`
	Enabled            bool      `json:"enabled"`
	CreatedAt          time.Time `json:"created_at"`
	UpdatedAt          time.Time `json:"updated_at"`
}

// LocalVendor is the reserved vendor id of models that nodes serve.
const LocalVendor = "local"

// Node is a registered node: what the administrator set. Live state (what the
// heartbeats say) is kept by the node pool, not here.
type Node struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Weight    float64   `json:"weight"` // base weight, default 1
	Drain     bool      `json:"drain"`  // the administrator asked it to drain
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// UsageEvent is one call as metered (SPEC §6).
type UsageEvent struct {
	Time           time.Time         `json:"time"`
	RequestID      string            `json:"request_id"`
	TenantID       string            `json:"tenant_id"`
	KeyID          string            `json:"key_id"`
	Model          string            `json:"model"`
	Target         string            `json:"target"` // node:<id> or vendor:<id>
	InputTokens    int64             `json:"input_tokens"`
	OutputTokens   int64             `json:"output_tokens"`
	Estimated      bool              `json:"estimated"`
	CostUSD        float64           `json:"cost_usd"`
	FallbackPath   []string          `json:"fallback_path"`
	TTFTMillis     float64           `json:"ttft_millis"`
	TokensPerSec   float64           `json:"tokens_per_sec"`
	Status         int               `json:"status"`
	ErrorCode      string            `json:"error_code"`
	Attributes     map[string]string `json:"attributes"`
	DurationMillis float64           `json:"duration_millis"`
}

// UsageQuery filters and groups usage events.
type UsageQuery struct {
	TenantID string
	Model    string
	Since    time.Time // zero: no lower bound
	Until    time.Time // zero: no upper bound
	GroupBy  []string  // tenant, model, target, day, month; empty = tenant, model
}

// UsageRow is one group of usage.
type UsageRow struct {
	TenantID     string  `json:"tenant_id"`
	Model        string  `json:"model"`
	Target       string  `json:"target"`
	Period       string  `json:"period"`
	Requests     int64   `json:"requests"`
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
}

// AuditEntry records one admin change.
type AuditEntry struct {
	ID         int64     `json:"id"`
	Time       time.Time `json:"time"`
	ActorKeyID string    `json:"actor_key_id"`
	Action     string    `json:"action"`      // e.g. UpsertTenant
	Entity     string    `json:"entity"`      // kind/id
	BeforeJSON string    `json:"before_json"` // "" when there was nothing before
	AfterJSON  string    `json:"after_json"`  // "" when the entity was deleted
}

// SealedRef names one sealed value: the keyring binds it to these three.
type SealedRef struct {
	Table  string
	Row    string
	Column string
}

func (r SealedRef) String() string { return r.Table + "/" + r.Row + "/" + r.Column }

// Resealer re-seals sealed values; the keyring stands behind it.
type Resealer interface {
	// Reseal returns the value sealed under the primary version, or nil when
	// it already is.
	Reseal(ref SealedRef, sealed []byte) ([]byte, error)
	// Version reads the keyring version a sealed value records.
	Version(sealed []byte) (uint32, error)
}

// ResealFailure is a value the Resealer could not handle.
type ResealFailure struct {
	Ref SealedRef
	Err error
}

// ResealReport says what ResealAll did (or, in a dry run, would do).
type ResealReport struct {
	Rewritten int64
	Failed    []ResealFailure
	// Sealed values per keyring version once the call is done (before it, in a
	// dry run or when anything failed).
	RowsPerVersion map[uint32]int64
}

// Store is Switchyard's durable state. Methods that take an Actor are admin
// writes: each one is audited and bumps the config version.
type Store interface {
	UpsertTenant(ctx context.Context, a Actor, t Tenant) (Tenant, error)
	GetTenant(ctx context.Context, id string) (Tenant, error)
	ListTenants(ctx context.Context) ([]Tenant, error)
	// DeleteTenant removes the tenant and revokes its client keys.
	DeleteTenant(ctx context.Context, a Actor, id string) error

	// CreateKey stores a new key; the tenant (client keys) must exist. Creating
	// a node key revokes the node's previous key and registers the node when
	// it is new (name from the key).
	CreateKey(ctx context.Context, a Actor, k Key) (Key, error)
	// GetKey returns a key by id, revoked or not (callers check Revoked).
	GetKey(ctx context.Context, id string) (Key, error)
	// ListKeys returns the keys of a kind; tenantID narrows client keys.
	ListKeys(ctx context.Context, kind KeyKind, tenantID string) ([]Key, error)
	// RevokeKey revokes a key of the given kind; revoking twice is not an
	// error (and, changing nothing, is neither audited nor a new config
	// version). Revoking a node key also drops its sealed copy: nothing
	// presents a revoked key, and a sealed value kept for nothing would pin
	// an old keyring version.
	RevokeKey(ctx context.Context, a Actor, kind KeyKind, id string) (Key, error)
	// NodeKey returns the node's active key, or NotFound.
	NodeKey(ctx context.Context, nodeID string) (Key, error)
	// AnyAdminKey reports whether an unrevoked admin key exists.
	AnyAdminKey(ctx context.Context) (bool, error)

	UpsertVendor(ctx context.Context, a Actor, v Vendor) (Vendor, error)
	// SetVendorKey stores the sealed key and its keyring version.
	SetVendorKey(ctx context.Context, a Actor, id string, sealed []byte, version uint32) (Vendor, error)
	GetVendor(ctx context.Context, id string) (Vendor, error)
	ListVendors(ctx context.Context) ([]Vendor, error)
	// DeleteVendor fails with ErrConflict while models use the vendor.
	DeleteVendor(ctx context.Context, a Actor, id string) error

	// UpsertModel fails with NotFound when the vendor (other than "local") is
	// not registered.
	UpsertModel(ctx context.Context, a Actor, m Model) (Model, error)
	GetModel(ctx context.Context, id string) (Model, error)
	ListModels(ctx context.Context) ([]Model, error)
	DeleteModel(ctx context.Context, a Actor, id string) error

	GetNode(ctx context.Context, id string) (Node, error)
	ListNodes(ctx context.Context) ([]Node, error)
	SetNodeDrain(ctx context.Context, a Actor, id string, drain bool) (Node, error)
	SetNodeWeight(ctx context.Context, a Actor, id string, weight float64) (Node, error)

	// ResealAll walks every sealed value in every table inside one
	// transaction that locks the rows it reads. When any value fails, or in a
	// dry run, nothing is written. It is audited when it writes.
	ResealAll(ctx context.Context, a Actor, fn Resealer, dryRun bool) (ResealReport, error)

	// InsertUsage writes a batch of usage events.
	InsertUsage(ctx context.Context, events []UsageEvent) error
	QueryUsage(ctx context.Context, q UsageQuery) ([]UsageRow, error)

	// ListAudit returns entries at or after since, newest first.
	ListAudit(ctx context.Context, since time.Time, limit int) ([]AuditEntry, error)

	// ConfigVersion is bumped by every admin write.
	ConfigVersion(ctx context.Context) (int64, error)
	// Ping checks the store can be reached.
	Ping(ctx context.Context) error
	Close()
}
