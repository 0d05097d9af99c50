package memory

import (
	"sync"
	"testing"

	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/gateway/store/storetest"
)

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return New() })
}

func TestSubscribe(t *testing.T) {
	m := New()
	ctx := t.Context()
	var mu sync.Mutex
	var got []int64
	cancel := m.Subscribe(func(v int64) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, v)
	})
	if _, err := m.UpsertTenant(ctx, store.Actor{KeyID: "a"}, store.Tenant{ID: "t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.UpsertTenant(ctx, store.Actor{KeyID: "a"}, store.Tenant{ID: "u"}); err != nil {
		t.Fatal(err)
	}
	// A failed write announces nothing.
	if err := m.DeleteTenant(ctx, store.Actor{KeyID: "a"}, "ghost"); err == nil {
		t.Fatal("deleted a tenant that does not exist")
	}
	cancel()
	if _, err := m.UpsertTenant(ctx, store.Actor{KeyID: "a"}, store.Tenant{ID: "v"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Errorf("notified %v, want [1 2]", got)
	}
}

func TestSubscribeVersionsOnlyGrow(t *testing.T) {
	m := New()
	ctx := t.Context()
	var mu sync.Mutex
	last := int64(0)
	calls := 0
	defer m.Subscribe(func(v int64) {
		mu.Lock()
		defer mu.Unlock()
		if v <= last {
			t.Errorf("version %d after %d", v, last)
		}
		last = v
		calls++
	})()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			if _, err := m.UpsertTenant(ctx, store.Actor{KeyID: "a"}, store.Tenant{ID: string(rune('a' + i))}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if last != 20 || calls == 0 {
		t.Errorf("last version seen %d after %d calls, want 20", last, calls)
	}
}
