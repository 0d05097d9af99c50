package route

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/gateway/store"
)

// chainModels is a small registry with every case the chain rules tell
// apart: local and cloud, priced and tied, efforts, capabilities, embedding
// models, a disabled model, fallbacks with duplicates and dangling ids.
func chainModels() []store.Model {
	return []store.Model{
		{ID: "gpt-4o", Vendor: "openai", Enabled: true, InputPricePerMTok: 2.5, OutputPricePerMTok: 10,
			Efforts: []string{"low", "medium", "high"}, Capabilities: []string{"tools", "vision"},
			Fallbacks: []string{"gemma-local", "gpt-4o", "mini", "ghost", "off", "gemma-local", "secret"}},
		{ID: "mini", Vendor: "openai", UpstreamModel: "gpt-4o-mini", Enabled: true, InputPricePerMTok: 0.15, OutputPricePerMTok: 0.6,
			Efforts: []string{"low"}, Capabilities: []string{"tools"}, Fallbacks: []string{"claude"}},
		{ID: "mini-b", Vendor: "other", Enabled: true, InputPricePerMTok: 0.6, OutputPricePerMTok: 0.15}, // same total as mini
		{ID: "claude", Vendor: "anthropic", Enabled: true, InputPricePerMTok: 3, OutputPricePerMTok: 15,
			Efforts: []string{"high"}, Capabilities: []string{"tools", "vision"}},
		{ID: "secret", Vendor: "openai", Enabled: true, InputPricePerMTok: 1, OutputPricePerMTok: 1},
		{ID: "off", Vendor: "openai", Enabled: false, Efforts: []string{"high"}, Capabilities: []string{"tools", "vision"}},
		{ID: "gemma-local", Vendor: store.LocalVendor, Enabled: true, InputPricePerMTok: 0.1,
			Efforts: []string{"low", "medium"}, Capabilities: []string{"tools"}},
		{ID: "llama-local", Vendor: store.LocalVendor, Enabled: true,
			Efforts: []string{"low"}, Capabilities: []string{"vision"}},
		{ID: "zeta-local", Vendor: store.LocalVendor, Enabled: true},
		{ID: "embed-local", Vendor: store.LocalVendor, Enabled: true, Capabilities: []string{"embeddings"}},
		{ID: "embed-cloud", Vendor: "openai", Enabled: true, InputPricePerMTok: 0.02, Capabilities: []string{"embeddings"}},
	}
}

func ids(chain []Link) []string {
	out := make([]string, len(chain))
	for i, l := range chain {
		out[i] = l.Model.ID
	}
	return out
}

func TestChain(t *testing.T) {
	snap := NewSnapshot(chainModels())
	all := store.Tenant{ID: "acme"}
	noSecret := store.Tenant{ID: "small", AllowedModels: []string{"gpt-4o", "mini", "gemma-local", "claude", "llama-local"}}
	onlyMini := store.Tenant{ID: "tiny", AllowedModels: []string{"mini"}}
	named := func(id string, p Policy) Spec { return Spec{Model: id, Policy: p} }
	auto := func(p Policy, e Effort) Spec { return Spec{Model: Auto, Policy: p, Effort: e} }

	tests := []struct {
		name    string
		spec    Spec
		tenant  store.Tenant
		needs   Needs
		want    []string
		wantErr error
		wantMsg string
	}{
		// Named models and their fallbacks.
		{name: "fallbacks in order, deduplicated, dangling and disabled skipped",
			spec: named("gpt-4o", PolicyAuto), tenant: all, want: []string{"gpt-4o", "gemma-local", "mini", "secret"}},
		{name: "fallbacks the tenant may not use are skipped",
			spec: named("gpt-4o", PolicyAuto), tenant: noSecret, want: []string{"gpt-4o", "gemma-local", "mini"}},
		{name: "fallbacks are one level deep",
			spec: named("mini", PolicyAuto), tenant: all, want: []string{"mini", "claude"}},
		{name: "zero policy means auto", spec: Spec{Model: "mini"}, tenant: all, want: []string{"mini", "claude"}},
		{name: "named model ignores needs and effort",
			spec: Spec{Model: "mini-b", Policy: PolicyAuto, Effort: EffortHigh}, tenant: all, needs: Needs{Tools: true, Vision: true},
			want: []string{"mini-b"}},
		{name: "not allowed", spec: named("gpt-4o", PolicyAuto), tenant: onlyMini,
			wantErr: ErrModelNotAllowed, wantMsg: `model "gpt-4o" is not allowed for tenant "tiny"`},
		{name: "disabled", spec: named("off", PolicyAuto), tenant: all, wantErr: ErrModelNotFound, wantMsg: `model "off" is disabled`},
		{name: "not registered", spec: named("ghost", PolicyAuto), tenant: all, wantErr: ErrModelNotFound, wantMsg: `model "ghost" is not registered`},

		// auto: selection, then local first, then cloud by price, ties by id.
		{name: "auto orders local by price then cloud by price",
			spec: auto(PolicyAuto, EffortNone), tenant: all,
			want: []string{"llama-local", "zeta-local", "gemma-local", "mini", "mini-b", "secret", "gpt-4o", "claude"}},
		{name: "auto by effort", spec: auto(PolicyAuto, EffortHigh), tenant: all, want: []string{"gpt-4o", "claude"}},
		{name: "auto by effort low", spec: auto(PolicyAuto, EffortLow), tenant: all, want: []string{"llama-local", "gemma-local", "mini", "gpt-4o"}},
		{name: "auto with tools", spec: auto(PolicyAuto, EffortNone), tenant: all, needs: Needs{Tools: true},
			want: []string{"gemma-local", "mini", "gpt-4o", "claude"}},
		{name: "auto with vision", spec: auto(PolicyAuto, EffortNone), tenant: all, needs: Needs{Vision: true},
			want: []string{"llama-local", "gpt-4o", "claude"}},
		{name: "auto with tools, vision and effort", spec: auto(PolicyAuto, EffortMedium), tenant: all, needs: Needs{Tools: true, Vision: true},
			want: []string{"gpt-4o"}},
		{name: "auto for embeddings", spec: auto(PolicyAuto, EffortNone), tenant: all, needs: Needs{Kind: KindEmbeddings},
			want: []string{"embed-local", "embed-cloud"}},
		{name: "auto respects the tenant's list", spec: auto(PolicyAuto, EffortNone), tenant: noSecret,
			want: []string{"llama-local", "gemma-local", "mini", "gpt-4o", "claude"}},
		{name: "auto with nothing left says what was asked", spec: auto(PolicyAuto, EffortHigh), tenant: onlyMini, needs: Needs{Tools: true},
			wantErr: ErrNoCandidate, wantMsg: `no enabled model serves effort high with tools for tenant "tiny"`},
		{name: "auto embeddings with vision", spec: auto(PolicyAuto, EffortNone), tenant: all, needs: Needs{Kind: KindEmbeddings, Vision: true},
			wantErr: ErrNoCandidate, wantMsg: `no enabled embeddings model with vision for tenant "acme"`},

		// Policies filter and order.
		{name: "auto nodes-only", spec: auto(PolicyNodesOnly, EffortNone), tenant: all,
			want: []string{"llama-local", "zeta-local", "gemma-local"}},
		{name: "auto cloud-only", spec: auto(PolicyCloudOnly, EffortNone), tenant: all,
			want: []string{"mini", "mini-b", "secret", "gpt-4o", "claude"}},
		{name: "auto cloud-first", spec: auto(PolicyCloudFirst, EffortNone), tenant: all,
			want: []string{"mini", "mini-b", "secret", "gpt-4o", "claude", "llama-local", "zeta-local", "gemma-local"}},
		{name: "named nodes-only keeps the local fallback", spec: named("gpt-4o", PolicyNodesOnly), tenant: all,
			want: []string{"gemma-local"}},
		{name: "named cloud-only", spec: named("gpt-4o", PolicyCloudOnly), tenant: all,
			want: []string{"gpt-4o", "mini", "secret"}},
		{name: "named cloud-first", spec: named("gpt-4o", PolicyCloudFirst), tenant: all,
			want: []string{"gpt-4o", "mini", "secret", "gemma-local"}},
		{name: "local named cloud-first keeps the model when nothing else", spec: named("zeta-local", PolicyCloudFirst), tenant: all,
			want: []string{"zeta-local"}},
		{name: "nodes-only with no local model", spec: named("mini", PolicyNodesOnly), tenant: all,
			wantErr: ErrNoCandidate, wantMsg: "nodes-only"},
		{name: "auto nodes-only with no local model at that effort", spec: auto(PolicyNodesOnly, EffortHigh), tenant: all,
			wantErr: ErrNoCandidate, wantMsg: "no local model"},
		{name: "cloud-only with no cloud model", spec: named("zeta-local", PolicyCloudOnly), tenant: all,
			wantErr: ErrNoCandidate, wantMsg: "no cloud model"},

		// A Spec that did not come from Resolve.
		{name: "unknown policy", spec: named("mini", "sideways"), tenant: all, wantErr: ErrInvalid},
		{name: "unknown effort", spec: Spec{Model: Auto, Policy: PolicyAuto, Effort: "max"}, tenant: all, wantErr: ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chain, err := snap.Chain(tt.spec, tt.tenant, tt.needs)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Chain(%+v) = %v, %v; want %v", tt.spec, ids(chain), err, tt.wantErr)
				}
				if chain != nil {
					t.Errorf("Chain returned %v with its error", ids(chain))
				}
				if !strings.Contains(err.Error(), tt.wantMsg) {
					t.Errorf("error %q does not contain %q", err, tt.wantMsg)
				}
				return
			}
			if err != nil {
				t.Fatalf("Chain(%+v): %v", tt.spec, err)
			}
			if got := ids(chain); !slices.Equal(got, tt.want) {
				t.Fatalf("Chain(%+v) = %v, want %v", tt.spec, got, tt.want)
			}
		})
	}
}

func TestChainLinks(t *testing.T) {
	snap := NewSnapshot(chainModels())
	chain, err := snap.Chain(Spec{Model: "gpt-4o", Policy: PolicyAuto}, store.Tenant{}, Needs{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		local    bool
		upstream string
	}{
		"gpt-4o":      {false, "gpt-4o"},      // no upstream_model: the id
		"gemma-local": {true, "gemma-local"},  // vendor local
		"mini":        {false, "gpt-4o-mini"}, // upstream_model set
		"secret":      {false, "secret"},
	}
	for _, l := range chain {
		w, ok := want[l.Model.ID]
		if !ok {
			t.Errorf("unexpected link %q", l.Model.ID)
			continue
		}
		if l.Local != w.local || l.Upstream != w.upstream {
			t.Errorf("%s: Local=%v Upstream=%q, want %v %q", l.Model.ID, l.Local, l.Upstream, w.local, w.upstream)
		}
	}
}

func TestSnapshot(t *testing.T) {
	models := chainModels()
	models = append(models, store.Model{ID: "mini", Vendor: "openai", Enabled: true, UpstreamModel: "mini-v2"}) // a later upsert
	snap := NewSnapshot(models)

	t.Run("later duplicate wins", func(t *testing.T) {
		m, ok := snap.Model("mini")
		if !ok || m.UpstreamModel != "mini-v2" {
			t.Fatalf("Model(mini) = %+v, %v", m, ok)
		}
	})
	t.Run("input is copied", func(t *testing.T) {
		models[0].Fallbacks[0] = "changed"
		models[0].ID = "changed"
		m, ok := snap.Model("gpt-4o")
		if !ok || m.Fallbacks[0] != "gemma-local" {
			t.Fatalf("snapshot changed with its input: %+v, %v", m, ok)
		}
	})
	t.Run("registered includes disabled models", func(t *testing.T) {
		if !snap.Registered("off") || snap.Registered("ghost") {
			t.Fatal("Registered: want off registered, ghost not")
		}
	})
	t.Run("models lists enabled allowed models by id", func(t *testing.T) {
		got := snap.Models(store.Tenant{AllowedModels: []string{"off", "mini", "claude", "ghost"}})
		var names []string
		for _, m := range got {
			names = append(names, m.ID)
		}
		if !slices.Equal(names, []string{"claude", "mini"}) {
			t.Fatalf("Models = %v", names)
		}
	})
	t.Run("nil snapshot has nothing", func(t *testing.T) {
		var s *Snapshot
		if s.Registered("gpt-4o") || s.Models(store.Tenant{}) != nil {
			t.Fatal("nil snapshot reports models")
		}
		if _, ok := s.Model("gpt-4o"); ok {
			t.Fatal("nil snapshot has a model")
		}
		if _, err := s.Chain(Spec{Model: Auto}, store.Tenant{}, Needs{}); !errors.Is(err, ErrNoCandidate) {
			t.Fatalf("nil snapshot auto chain: %v", err)
		}
		if _, err := s.Chain(Spec{Model: "x"}, store.Tenant{}, Needs{}); !errors.Is(err, ErrModelNotFound) {
			t.Fatalf("nil snapshot named chain: %v", err)
		}
	})
	t.Run("resolve then chain with the snapshot's lookup", func(t *testing.T) {
		spec, err := Resolve("gpt-4o:cloud-first:high", Hints{}, Hints{}, snap.Registered)
		if err != nil {
			t.Fatal(err)
		}
		chain, err := snap.Chain(spec, store.Tenant{}, Needs{})
		if err != nil || !slices.Equal(ids(chain), []string{"gpt-4o", "mini", "secret", "gemma-local"}) {
			t.Fatalf("chain %v, %v", ids(chain), err)
		}
	})
}

// benchModels is a registry of 50 models, 10 local and 40 cloud, each with
// two fallbacks, priced so that the auto order has work to do.
func benchModels() []store.Model {
	models := make([]store.Model, 0, 50)
	for i := range 50 {
		m := store.Model{
			ID:                 fmt.Sprintf("vendor%d/model-%02d:tag", i%5, i),
			Vendor:             fmt.Sprintf("vendor%d", i%5),
			Enabled:            i%17 != 0,
			InputPricePerMTok:  float64((i * 7) % 13),
			OutputPricePerMTok: float64((i * 3) % 11),
			Efforts:            []string{"low", "medium", "high"}[:1+i%3],
			Capabilities:       []string{"tools"},
		}
		if i < 10 {
			m.Vendor = store.LocalVendor
		}
		if i%4 == 0 {
			m.Capabilities = append(m.Capabilities, "vision")
		}
		m.Fallbacks = []string{fmt.Sprintf("vendor%d/model-%02d:tag", (i+1)%5, (i+1)%50), fmt.Sprintf("vendor%d/model-%02d:tag", (i+7)%5, (i+7)%50)}
		models = append(models, m)
	}
	return models
}

func BenchmarkResolveAndChain(b *testing.B) {
	snap := NewSnapshot(benchModels())
	registered := snap.Registered
	tenant := store.Tenant{ID: "acme"}
	cases := []struct {
		name   string
		model  string
		header Hints
		needs  Needs
	}{
		{"named", "vendor3/model-23:tag", Hints{}, Needs{}},
		{"named-suffix", "vendor3/model-23:tag:cloud-first:high", Hints{}, Needs{}},
		{"auto", "auto", Hints{}, Needs{}},
		{"auto-high-tools-vision", "auto:cloud-first:high", Hints{Policy: "nodes-only"}, Needs{Tools: true, Vision: true}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				spec, err := Resolve(c.model, Hints{}, c.header, registered)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := snap.Chain(spec, tenant, c.needs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
