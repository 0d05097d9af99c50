// Package catalog keeps each replica's in-memory copy of the configuration
// the request path reads — tenants, models (as a route.Snapshot), vendors
// with their keys opened, registered nodes — and reloads it when the config
// version moves. When the store is down it keeps serving the last copy: the
// request path never waits on Postgres for configuration.
package catalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-ai/switchyard/gateway/route"
	"github.com/switchyard-ai/switchyard/gateway/store"
)

// Store is what the catalog reads.
type Store interface {
	ConfigVersion(ctx context.Context) (int64, error)
	ListTenants(ctx context.Context) ([]store.Tenant, error)
	ListModels(ctx context.Context) ([]store.Model, error)
	ListVendors(ctx context.Context) ([]store.Vendor, error)
	ListNodes(ctx context.Context) ([]store.Node, error)
}

// Opener opens sealed values; the keyring implements it.
type Opener interface {
	Open(sealed []byte, table, row, column string) ([]byte, error)
}

// Vendor is a vendor ready to be called: its key opened.
type Vendor struct {
	ID      string
	BaseURL string
	Enabled bool
	APIKey  string // empty when no key is set or it could not be opened
	KeySet  bool
}

// String never shows the key.
func (v Vendor) String() string { return fmt.Sprintf("vendor{%s %s}", v.ID, v.BaseURL) }

// LogValue never shows the key.
func (v Vendor) LogValue() slog.Value { return slog.StringValue(v.String()) }

// Snapshot is one consistent copy of the configuration. It is never
// changed once published.
type Snapshot struct {
	Version  int64
	LoadedAt time.Time
	Routes   *route.Snapshot
	Tenants  map[string]store.Tenant
	Vendors  map[string]Vendor
	Nodes    map[string]store.Node
}

// Options tune a Catalog.
type Options struct {
	Logger *slog.Logger
	// OnDecryptError is called (with the table) when a sealed value cannot
	// be opened; the app counts switchyard_keyring_decrypt_errors_total.
	OnDecryptError func(table string)
	// OnError is called when a reload fails, not when it was cancelled.
	OnError func(err error)
	// OnVendorChanged is called after a reload for every vendor whose key or
	// URL changed, or that is gone: its breaker should start afresh.
	OnVendorChanged func(vendorID string)
	// LoadTimeout bounds each reload Run makes (default DefaultLoadTimeout),
	// so that a hung database is a failed reload that is tried again, not a
	// follower stuck for good holding the reload lock.
	LoadTimeout time.Duration
	Now         func() time.Time
}

// DefaultLoadTimeout is Options.LoadTimeout's default.
const DefaultLoadTimeout = 10 * time.Second

// Catalog holds the current Snapshot.
type Catalog struct {
	store  Store
	opener Opener
	o      Options

	cur    atomic.Pointer[Snapshot]
	reload sync.Mutex // one reload at a time
}

// New returns a Catalog with an empty snapshot; call Load before serving.
func New(st Store, op Opener, o Options) *Catalog {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LoadTimeout <= 0 {
		o.LoadTimeout = DefaultLoadTimeout
	}
	c := &Catalog{store: st, opener: op, o: o}
	c.cur.Store(&Snapshot{Version: -1, Routes: route.NewSnapshot(nil), Tenants: map[string]store.Tenant{}, Vendors: map[string]Vendor{}, Nodes: map[string]store.Node{}})
	return c
}

// Current returns the snapshot in use.
func (c *Catalog) Current() *Snapshot { return c.cur.Load() }

// Version is the config version of the current snapshot (-1 before the first load).
func (c *Catalog) Version() int64 { return c.cur.Load().Version }

// Loaded reports whether a snapshot has been loaded at least once.
func (c *Catalog) Loaded() bool { return c.cur.Load().Version >= 0 }

// Load reloads the configuration when the store's version differs from the
// current one (or always, with force). On error the current snapshot stays.
func (c *Catalog) Load(ctx context.Context, force bool) error {
	c.reload.Lock()
	defer c.reload.Unlock()
	prev := c.cur.Load()
	v, err := c.store.ConfigVersion(ctx)
	if err != nil {
		return c.failed(err)
	}
	if v == prev.Version && !force {
		return nil
	}
	next, err := c.read(ctx, v, prev)
	if err != nil {
		return c.failed(err)
	}
	// A write may have landed while reading: the version read first is the
	// one published, so the next poll or notification reloads again.
	c.cur.Store(next)
	if c.o.OnVendorChanged != nil {
		for id, old := range prev.Vendors {
			if nv, ok := next.Vendors[id]; !ok || nv.APIKey != old.APIKey || nv.BaseURL != old.BaseURL {
				c.o.OnVendorChanged(id)
			}
		}
	}
	if prev.Version >= 0 {
		c.o.Logger.Debug("configuration reloaded", slog.Int64("version", v))
	}
	return nil
}

func (c *Catalog) failed(err error) error {
	if c.o.OnError != nil && !errors.Is(err, context.Canceled) {
		c.o.OnError(err)
	}
	return fmt.Errorf("load configuration: %w", err)
}

func (c *Catalog) read(ctx context.Context, version int64, prev *Snapshot) (*Snapshot, error) {
	tenants, err := c.store.ListTenants(ctx)
	if err != nil {
		return nil, err
	}
	models, err := c.store.ListModels(ctx)
	if err != nil {
		return nil, err
	}
	vendors, err := c.store.ListVendors(ctx)
	if err != nil {
		return nil, err
	}
	nodes, err := c.store.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	s := &Snapshot{
		Version:  version,
		LoadedAt: c.o.Now(),
		Routes:   route.NewSnapshot(models),
		Tenants:  make(map[string]store.Tenant, len(tenants)),
		Vendors:  make(map[string]Vendor, len(vendors)),
		Nodes:    make(map[string]store.Node, len(nodes)),
	}
	for _, t := range tenants {
		s.Tenants[t.ID] = t
	}
	for _, n := range nodes {
		s.Nodes[n.ID] = n
	}
	for _, v := range vendors {
		s.Vendors[v.ID] = c.openVendor(v, prev)
	}
	return s, nil
}

// openVendor opens a vendor's key. A key this replica cannot open (a
// keyring version it does not hold yet) is logged without the secret and
// counted, and the plaintext it already had stays in use.
func (c *Catalog) openVendor(v store.Vendor, prev *Snapshot) Vendor {
	out := Vendor{ID: v.ID, BaseURL: v.BaseURL, Enabled: v.Enabled, KeySet: len(v.KeySealed) > 0}
	if !out.KeySet {
		return out
	}
	p, err := c.opener.Open(v.KeySealed, "vendors", v.ID, "api_key_sealed")
	if err == nil {
		out.APIKey = string(p)
		return out
	}
	if c.o.OnDecryptError != nil {
		c.o.OnDecryptError("vendors")
	}
	old, had := prev.Vendors[v.ID]
	c.o.Logger.Error("cannot open a vendor key; keeping the one already in use",
		slog.String("vendor", v.ID), slog.Uint64("key_version", uint64(v.KeyVersion)),
		slog.Bool("kept_previous", had && old.APIKey != ""), slog.String("error", err.Error()))
	if had {
		out.APIKey = old.APIKey
	}
	return out
}

// Run keeps the catalog current: it reloads on every version notified (from
// LISTEN/NOTIFY) and, as the fallback, polls the version every poll
// interval, each reload bounded by LoadTimeout. It returns when ctx ends.
func (c *Catalog) Run(ctx context.Context, notified <-chan int64, poll time.Duration) {
	if poll <= 0 {
		poll = time.Second
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case v := <-notified:
			if v == c.Version() {
				continue
			}
		case <-t.C:
		}
		lctx, cancel := context.WithTimeout(ctx, c.o.LoadTimeout)
		err := c.Load(lctx, false)
		cancel()
		if err != nil && ctx.Err() == nil {
			c.o.Logger.Debug("configuration reload failed; keeping the last one", slog.String("error", err.Error()))
		}
	}
}
