package catalog_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/gateway/catalog"
	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/gateway/store/memory"
	"github.com/switchyard-ai/switchyard/keyring"
)

// downStore fails every read while down is set.
type downStore struct {
	*memory.Memory
	down bool
}

func (d *downStore) ConfigVersion(ctx context.Context) (int64, error) {
	if d.down {
		return 0, store.ErrUnavailable
	}
	return d.Memory.ConfigVersion(ctx)
}

func TestCatalog(t *testing.T) {
	ctx := context.Background()
	a := store.Actor{KeyID: "t"}
	spec1, _ := keyring.Generate()
	spec2, _ := keyring.Generate()
	old, _ := keyring.Parse("1:"+spec1, "")
	both, _ := keyring.Parse("1:"+spec1+",2:"+spec2, "")
	st := &downStore{Memory: memory.New()}
	_, _ = st.UpsertTenant(ctx, a, store.Tenant{ID: "acme"})
	_, _ = st.UpsertVendor(ctx, a, store.Vendor{ID: "v", BaseURL: "https://v.example/v1", Enabled: true})
	sealed, _ := old.Seal([]byte("sk-one"), "vendors", "v", "api_key_sealed")
	_, _ = st.SetVendorKey(ctx, a, "v", sealed, 1)
	_, _ = st.UpsertModel(ctx, a, store.Model{ID: "m", Vendor: "v", Enabled: true})

	var decryptErrors []string
	var changed []string
	c := catalog.New(st, old, catalog.Options{
		OnDecryptError:  func(table string) { decryptErrors = append(decryptErrors, table) },
		OnVendorChanged: func(id string) { changed = append(changed, id) },
	})
	if c.Loaded() {
		t.Fatal("loaded before Load")
	}
	if err := c.Load(ctx, false); err != nil {
		t.Fatal(err)
	}
	s := c.Current()
	if s.Vendors["v"].APIKey != "sk-one" || !s.Routes.Registered("m") || s.Tenants["acme"].ID != "acme" {
		t.Fatalf("snapshot = %+v", s)
	}
	v1 := c.Version()

	// The store down: the last snapshot stays.
	st.down = true
	if err := c.Load(ctx, false); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Load while down = %v", err)
	}
	if c.Current() != s {
		t.Fatal("the snapshot changed while the store was down")
	}
	st.down = false

	// A key sealed under a version this replica does not hold yet: counted,
	// and the plaintext it had stays in use.
	sealed2, _ := both.Seal([]byte("sk-two"), "vendors", "v", "api_key_sealed")
	_, _ = st.SetVendorKey(ctx, a, "v", sealed2, 2)
	if err := c.Load(ctx, false); err != nil {
		t.Fatal(err)
	}
	if c.Version() == v1 || c.Current().Vendors["v"].APIKey != "sk-one" || len(decryptErrors) != 1 || decryptErrors[0] != "vendors" {
		t.Fatalf("after an unreadable key: key kept=%q errors=%v", c.Current().Vendors["v"].APIKey, decryptErrors)
	}
	if len(changed) != 0 {
		t.Fatalf("vendor reported changed: %v", changed)
	}

	// A replica that holds version 2 reads it; a changed key resets the breaker.
	c2 := catalog.New(st, both, catalog.Options{OnVendorChanged: func(id string) { changed = append(changed, id) }})
	if err := c2.Load(ctx, false); err != nil || c2.Current().Vendors["v"].APIKey != "sk-two" {
		t.Fatalf("c2: %v %q", err, c2.Current().Vendors["v"].APIKey)
	}
	if got := c.Current().Vendors["v"].String(); got == "" || strings.Contains(got, "sk-") {
		t.Fatalf("Vendor.String shows the key: %q", got)
	}
	sealed3, _ := both.Seal([]byte("sk-three"), "vendors", "v", "api_key_sealed")
	_, _ = st.SetVendorKey(ctx, a, "v", sealed3, 2)
	if err := c2.Load(ctx, false); err != nil {
		t.Fatal(err)
	}
	if len(changed) != 1 || changed[0] != "v" {
		t.Fatalf("changed = %v", changed)
	}
}
