package scheduler

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

const (
	// LoadPenaltyFloor keeps a nearly full node in rotation, slowly, so
	// that it is still sampled and its speed stays measured.
	LoadPenaltyFloor = 0.05
	// SpeedFactorMin and SpeedFactorMax bound how much measured speed can
	// move traffic, so that one odd measurement cannot starve or flood a
	// node.
	SpeedFactorMin = 0.25
	SpeedFactorMax = 4.0
)

// Picker chooses nodes for requests (filter, weight, smooth weighted
// round-robin, admission). It remembers the round-robin state of each
// model's pool, so one Picker serves the whole gateway. It is safe for
// concurrent use; the zero value uses the package's default speeds.
type Picker struct {
	mu       sync.Mutex
	defaults Defaults
	pools    map[string]*poolState
	// Scratch reused under mu so that Pick does not allocate: the speeds
	// for the medians, the indices that pass the filter and those of nodes
	// without the model.
	tps, ttft    []float64
	free, absent []int
}

// poolState is the round-robin state of one model's pool: current weights
// by position in the last pool seen, so that a pool passed in the same
// order as last time (the usual case) costs no map lookup.
type poolState struct {
	ids   []string
	cur   []float64
	index map[string]int
	// The previous ids and cur, kept to be refilled when the pool changes.
	spareIDs []string
	spareCur []float64
}

// NewPicker returns a Picker that assumes d for nodes whose speed is not
// measured yet.
func NewPicker(d Defaults) *Picker {
	return &Picker{defaults: d}
}

// DropModel forgets the round-robin state of a model's pool, for a model
// that was deleted or no longer has local nodes.
func (p *Picker) DropModel(model string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pools, model)
}

// stage is how far a candidate gets through the filter; a rejection names
// the furthest stage any candidate reached.
type stage uint8

const (
	stageNoModel     stage = iota // lacks the model
	stageUnavailable              // has it, but offline or draining
	stageTooSmall                 // available, context window too small
	stageFull                     // big enough, every slot busy
	stageFree                     // passes every hard filter
)

func filterStage(c *Candidate, need int) stage {
	switch {
	case !c.HasModel:
		return stageNoModel
	case c.Draining || c.Status > Suspect:
		return stageUnavailable
	case c.ContextWindow > 0 && c.ContextWindow < need:
		return stageTooSmall
	case max(c.Busy, 0) >= c.Slots:
		return stageFull
	}
	return stageFree
}

// Pick chooses a node of pool for req and checks that it would start req
// in time. On success the Decision names the node by id and by its index in
// pool; otherwise the error is a *Rejection.
//
// pool is every node known for req.Model, in any order, but a stable order
// (by node id, say) keeps Pick on its fast path. Pick reads pool and keeps
// no reference to it.
func (p *Picker) Pick(req Request, pool []Candidate) (Decision, error) {
	p.mu.Lock()
	defer p.mu.Unlock()

	need := max(req.InputTokens, 0) + max(req.MaxOutputTokens, 0)
	var (
		counts      [stageFree]int
		anyHealthy  bool
		warmHealthy bool
		warmSuspect bool
		largestCtx  int
	)
	tps, ttft := p.tps[:0], p.ttft[:0]
	free, absent := p.free[:0], p.absent[:0]
	// The round-robin state is checked against the pool's order in the
	// same pass, so an unchanged pool costs no second walk over it.
	st := p.pools[req.Model]
	var ids []string
	if st != nil && len(st.ids) == len(pool) {
		ids = st.ids
	}
	sameOrder := ids != nil || len(pool) == 0
	for i := range pool {
		c := &pool[i]
		if sameOrder && ids[i] != c.NodeID {
			sameOrder = false
		}
		if !c.HasModel {
			absent = append(absent, i)
			continue
		}
		if c.Speed.Known {
			if v := c.Speed.TPS; v > 0 && !math.IsInf(v, 1) {
				tps = append(tps, v)
			}
			if v := c.Speed.TTFTPer1k; v > 0 {
				ttft = append(ttft, float64(v))
			}
		}
		if s := filterStage(c, need); s != stageFree {
			// Only a rejection reads these, so the common path skips them.
			counts[s]++
			if s >= stageTooSmall {
				largestCtx = max(largestCtx, c.ContextWindow)
			}
			continue
		}
		free = append(free, i)
		if c.Status == Healthy {
			anyHealthy = true
			warmHealthy = warmHealthy || c.Warm
		} else {
			warmSuspect = warmSuspect || c.Warm
		}
	}
	p.tps, p.ttft, p.free, p.absent = tps, ttft, free, absent
	if len(free) == 0 {
		return Decision{}, reject(req, counts, largestCtx, need)
	}
	medTPS, medTTFT := median(tps), median(ttft)
	warmOnly := warmSuspect
	if anyHealthy {
		warmOnly = warmHealthy
	}

	if st == nil {
		st = p.newPool(req.Model)
	}
	if !sameOrder {
		st.reorder(pool)
	}
	cur := st.cur
	for _, i := range absent {
		// A node without the model has left this pool: it starts afresh
		// if it comes back.
		cur[i] = 0
	}
	best, bestW, bestCur, total := -1, 0.0, 0.0, 0.0
	for _, i := range free {
		c := &pool[i]
		if (c.Status == Healthy) != anyHealthy || (warmOnly && !c.Warm) {
			continue
		}
		w := baseWeight(c.BaseWeight) * LoadPenalty(c.Busy, c.Slots) * speedFactor(c.Speed, medTPS, medTTFT)
		ci := cur[i] + w
		cur[i] = ci
		total += w
		if best < 0 || ci > bestCur {
			best, bestW, bestCur = i, w, ci
		}
	}
	cur[best] -= total

	c := &pool[best]
	wait, dur := p.defaults.Estimate(*c, req)
	if limit, ok := WaitLimit(req); ok && wait > limit {
		return Decision{}, &Rejection{
			Reason: WaitTooLong,
			Detail: fmt.Sprintf("node %q for model %q: expected wait %v exceeds the limit of %v (%d requests ahead, %v each, %d slots)",
				c.NodeID, req.Model, wait.Round(time.Millisecond), limit, QueueAhead(*c), dur.Round(time.Millisecond), c.Slots),
			NodeID:       c.NodeID,
			ExpectedWait: wait,
			Limit:        limit,
		}
	}
	return Decision{
		NodeID:           c.NodeID,
		Index:            best,
		Weight:           bestW,
		ExpectedWait:     wait,
		ExpectedDuration: dur,
	}, nil
}

func reject(req Request, counts [stageFree]int, largestCtx, need int) *Rejection {
	withModel := counts[stageUnavailable] + counts[stageTooSmall] + counts[stageFull]
	switch {
	case withModel == 0:
		return &Rejection{Reason: NoNode, Detail: fmt.Sprintf("no node serves model %q", req.Model)}
	case counts[stageTooSmall]+counts[stageFull] == 0:
		return &Rejection{Reason: Unavailable, Detail: fmt.Sprintf("all %d nodes serving model %q are offline or draining", withModel, req.Model)}
	case counts[stageFull] == 0:
		return &Rejection{Reason: ContextTooSmall, Detail: fmt.Sprintf("model %q needs a context window of %d tokens (input %d + output %d); the largest on an available node is %d",
			req.Model, need, max(req.InputTokens, 0), max(req.MaxOutputTokens, 0), largestCtx)}
	}
	return &Rejection{Reason: NoSlot, Detail: fmt.Sprintf("all %d nodes that can serve model %q have every slot busy", counts[stageFull], req.Model)}
}

func (p *Picker) newPool(model string) *poolState {
	if p.pools == nil {
		p.pools = make(map[string]*poolState)
	}
	st := &poolState{index: make(map[string]int)}
	p.pools[model] = st
	return st
}

// reorder lines the state up with a pool whose ids differ from the last
// one's, or come in another order: each node keeps its current weight by
// id, new nodes start at zero and nodes no longer in pool are forgotten.
func (st *poolState) reorder(pool []Candidate) {
	n := len(pool)
	ids := slices.Grow(st.spareIDs[:0], n)[:n]
	cur := slices.Grow(st.spareCur[:0], n)[:n]
	for i := range pool {
		ids[i] = pool[i].NodeID
		cur[i] = 0
		if j, ok := st.index[ids[i]]; ok {
			cur[i] = st.cur[j]
		}
	}
	clear(st.index)
	for i, id := range ids {
		st.index[id] = i
	}
	// Drop the references the old order held to ids that may be gone.
	clear(st.ids)
	st.spareIDs, st.spareCur = st.ids, st.cur
	st.ids, st.cur = ids, cur
}

// LoadPenalty is 1 − u² for u = busy ÷ slots, floored at LoadPenaltyFloor:
// a half-full node keeps 75 % of its weight, a nearly full one little.
func LoadPenalty(busy, slots int) float64 {
	if slots <= 0 {
		return LoadPenaltyFloor
	}
	u := min(float64(max(busy, 0))/float64(slots), 1)
	return max(1-u*u, LoadPenaltyFloor)
}

// SpeedFactor is 0.7 × TPS/median TPS + 0.3 × median TTFT/TTFT, clamped to
// [SpeedFactorMin, SpeedFactorMax]; 1 for a node of unknown speed, and each
// term 1 when its own figure or its median is unknown (zero).
func SpeedFactor(s Speed, medianTPS float64, medianTTFTPer1k time.Duration) float64 {
	return speedFactor(s, medianTPS, float64(medianTTFTPer1k))
}

func speedFactor(s Speed, medTPS, medTTFT float64) float64 {
	if !s.Known {
		return 1
	}
	tpsTerm, ttftTerm := 1.0, 1.0
	if s.TPS > 0 && medTPS > 0 {
		tpsTerm = s.TPS / medTPS
	}
	if s.TTFTPer1k > 0 && medTTFT > 0 {
		ttftTerm = medTTFT / float64(s.TTFTPer1k)
	}
	f := 0.7*tpsTerm + 0.3*ttftTerm
	if math.IsNaN(f) {
		return 1
	}
	return min(max(f, SpeedFactorMin), SpeedFactorMax)
}

// baseWeight reads the operator's weight: unset, nonsensical or infinite
// weights count as 1 rather than excluding the node or taking all traffic.
func baseWeight(w float64) float64 {
	if w > 0 && !math.IsInf(w, 1) {
		return w
	}
	return 1
}
