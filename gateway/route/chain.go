package route

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/switchyard-ai/switchyard/gateway/store"
)

// Capabilities that select models for "auto".
const (
	CapTools      = "tools"
	CapVision     = "vision"
	CapEmbeddings = "embeddings"
)

// Kind is the kind of call a request makes, which decides whether chat
// models or embedding models can serve it.
type Kind int

const (
	KindChat       Kind = iota // /v1/chat/completions and /v1/completions
	KindEmbeddings             // /v1/embeddings
)

func (k Kind) String() string {
	switch k {
	case KindChat:
		return "chat"
	case KindEmbeddings:
		return "embeddings"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Needs is what the request's content asks of a model chosen by "auto".
type Needs struct {
	Tools  bool // the request declares tools
	Vision bool // a message carries an image part
	Kind   Kind
}

// Link is one model of a chain, with what the pipeline needs to call it.
type Link struct {
	Model    store.Model // read-only: it shares its slices with the snapshot
	Local    bool        // served by nodes (vendor "local"), not a cloud vendor
	Upstream string      // the name sent upstream: upstream_model, or the id
}

// Snapshot is an immutable view of the registered models, built once per
// config version and shared by every request that routes on it. A nil
// *Snapshot has no models.
type Snapshot struct {
	models []store.Model  // sorted by id
	index  map[string]int // id → position in models
	auto   []int          // positions in the order "auto" tries them
}

// NewSnapshot copies models (so that later changes to the caller's slices do
// not reach requests in flight) and indexes them. If an id appears twice the
// last one wins, as a later upsert would.
func NewSnapshot(models []store.Model) *Snapshot {
	s := &Snapshot{index: make(map[string]int, len(models))}
	for _, m := range models {
		m.Efforts = slices.Clone(m.Efforts)
		m.Capabilities = slices.Clone(m.Capabilities)
		m.Fallbacks = slices.Clone(m.Fallbacks)
		if i, ok := s.index[m.ID]; ok {
			s.models[i] = m
			continue
		}
		s.index[m.ID] = len(s.models)
		s.models = append(s.models, m)
	}
	slices.SortFunc(s.models, func(a, b store.Model) int { return strings.Compare(a.ID, b.ID) })
	for i, m := range s.models {
		s.index[m.ID] = i
	}

	// Local models first: the organisation's GPUs cost nothing extra while
	// they have room. Within each group the cheaper model first (a price on
	// a local model lets an operator rank the local ones too). Ties go by id
	// so that the order never depends on the order the store listed them in.
	s.auto = make([]int, len(s.models))
	for i := range s.auto {
		s.auto[i] = i
	}
	slices.SortStableFunc(s.auto, func(a, b int) int {
		ma, mb := &s.models[a], &s.models[b]
		if la, lb := ma.Vendor == store.LocalVendor, mb.Vendor == store.LocalVendor; la != lb {
			if la {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(price(ma), price(mb)), strings.Compare(ma.ID, mb.ID))
	})
	return s
}

func price(m *store.Model) float64 { return m.InputPricePerMTok + m.OutputPricePerMTok }

// Registered reports whether a model of that id is registered, enabled or
// not; it is the lookup Resolve takes.
func (s *Snapshot) Registered(id string) bool {
	if s == nil {
		return false
	}
	_, ok := s.index[id]
	return ok
}

// Model returns the registered model of that id. Its slices are shared with
// the snapshot and must not be modified.
func (s *Snapshot) Model(id string) (store.Model, bool) {
	if s == nil {
		return store.Model{}, false
	}
	i, ok := s.index[id]
	if !ok {
		return store.Model{}, false
	}
	return s.models[i], true
}

// Models returns the models the tenant may use and that are enabled, by id:
// what GET /v1/models lists.
func (s *Snapshot) Models(tenant store.Tenant) []store.Model {
	if s == nil {
		return nil
	}
	var out []store.Model
	for _, m := range s.models {
		if m.Enabled && Allowed(tenant, m.ID) {
			out = append(out, m)
		}
	}
	return out
}

// Allowed reports whether the tenant may use the model id; an empty allow
// list allows every model.
func Allowed(tenant store.Tenant, id string) bool {
	return len(tenant.AllowedModels) == 0 || slices.Contains(tenant.AllowedModels, id)
}

func link(m store.Model) Link {
	up := m.UpstreamModel
	if up == "" {
		up = m.ID
	}
	return Link{Model: m, Local: m.Vendor == store.LocalVendor, Upstream: up}
}

// Chain returns the models to try for spec, in order, for this tenant. It
// never returns an empty chain without an error.
func (s *Snapshot) Chain(spec Spec, tenant store.Tenant, needs Needs) ([]Link, error) {
	if s == nil {
		s = &Snapshot{} // before the first config load nothing is registered
	}
	policy := spec.Policy
	if policy == "" {
		policy = PolicyAuto // the zero Spec means what an unadorned request means
	}
	if !policy.Valid() {
		return nil, fmt.Errorf("%w: policy %q is not known", ErrInvalid, spec.Policy)
	}
	if !spec.Effort.Valid() {
		return nil, fmt.Errorf("%w: effort %q is not known", ErrInvalid, spec.Effort)
	}

	var (
		chain []Link
		err   error
	)
	if spec.Model == Auto {
		chain, err = s.autoChain(spec.Effort, tenant, needs)
	} else {
		chain, err = s.namedChain(spec.Model, tenant)
	}
	if err != nil {
		return nil, err
	}
	return applyPolicy(chain, policy, spec.Model)
}

// namedChain is the model and its fallbacks, one level deep: a fallback's own
// fallbacks are not followed, so an administrator reads the whole chain in
// one model's record and cycles cannot happen. Fallbacks that cannot serve
// this tenant are skipped rather than failing the request: the named model
// is the one the client asked for, and only its problems are the client's.
func (s *Snapshot) namedChain(id string, tenant store.Tenant) ([]Link, error) {
	i, ok := s.index[id]
	if !ok {
		return nil, notRegistered(id)
	}
	m := s.models[i]
	if !m.Enabled {
		return nil, fmt.Errorf("%w: model %q is disabled", ErrModelNotFound, id)
	}
	if !Allowed(tenant, id) {
		return nil, fmt.Errorf("%w: model %q is not allowed for tenant %q", ErrModelNotAllowed, id, tenant.ID)
	}
	chain := make([]Link, 0, 1+len(m.Fallbacks))
	chain = append(chain, link(m))
	for _, fb := range m.Fallbacks {
		j, ok := s.index[fb]
		if !ok || !s.models[j].Enabled || !Allowed(tenant, fb) || inChain(chain, fb) {
			continue
		}
		chain = append(chain, link(s.models[j]))
	}
	return chain, nil
}

func inChain(chain []Link, id string) bool {
	for _, l := range chain {
		if l.Model.ID == id {
			return true
		}
	}
	return false
}

func (s *Snapshot) autoChain(effort Effort, tenant store.Tenant, needs Needs) ([]Link, error) {
	// Two passes: a Link carries the whole model, so sizing the chain once
	// saves the copies that growing it would make on every request.
	eligible := func(m *store.Model) bool {
		return m.Enabled && Allowed(tenant, m.ID) && serves(m, effort, needs)
	}
	n := 0
	for _, i := range s.auto {
		if eligible(&s.models[i]) {
			n++
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoCandidate, describeNoAuto(effort, tenant, needs))
	}
	chain := make([]Link, 0, n)
	for _, i := range s.auto {
		if m := &s.models[i]; eligible(m) {
			chain = append(chain, link(*m))
		}
	}
	return chain, nil
}

func serves(m *store.Model, effort Effort, needs Needs) bool {
	if effort != EffortNone && !slices.Contains(m.Efforts, string(effort)) {
		return false
	}
	if needs.Tools && !slices.Contains(m.Capabilities, CapTools) {
		return false
	}
	if needs.Vision && !slices.Contains(m.Capabilities, CapVision) {
		return false
	}
	// An embedding model cannot chat and a chat model cannot embed, so the
	// "embeddings" capability splits the registry in two.
	return slices.Contains(m.Capabilities, CapEmbeddings) == (needs.Kind == KindEmbeddings)
}

// describeNoAuto says what was asked, so the client can see which part of
// the request no model serves.
func describeNoAuto(effort Effort, tenant store.Tenant, needs Needs) string {
	var b strings.Builder
	b.WriteString("no enabled ")
	if needs.Kind == KindEmbeddings {
		b.WriteString("embeddings ")
	}
	b.WriteString("model")
	if effort != EffortNone {
		b.WriteString(" serves effort " + string(effort))
	}
	var caps []string
	if needs.Tools {
		caps = append(caps, CapTools)
	}
	if needs.Vision {
		caps = append(caps, CapVision)
	}
	if len(caps) > 0 {
		b.WriteString(" with " + strings.Join(caps, " and "))
	}
	fmt.Fprintf(&b, " for tenant %q", tenant.ID)
	return b.String()
}

// applyPolicy filters and orders a chain. It keeps the chain's relative order
// within each group, because that order already says which model is
// preferred.
func applyPolicy(chain []Link, policy Policy, model string) ([]Link, error) {
	switch policy {
	case PolicyNodesOnly, PolicyCloudOnly:
		wantLocal := policy == PolicyNodesOnly
		kept := chain[:0]
		for _, l := range chain {
			if l.Local == wantLocal {
				kept = append(kept, l)
			}
		}
		if len(kept) == 0 {
			where := "no local model"
			if !wantLocal {
				where = "no cloud model"
			}
			return nil, fmt.Errorf("%w: policy %s leaves nothing to try: the chain of %q has %s the tenant may use",
				ErrNoCandidate, policy, model, where)
		}
		return kept, nil
	case PolicyCloudFirst:
		slices.SortStableFunc(chain, func(a, b Link) int {
			switch {
			case a.Local == b.Local:
				return 0
			case b.Local:
				return -1
			}
			return 1
		})
	}
	return chain, nil
}
