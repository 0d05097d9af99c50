package scheduler

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const model = "gemma4:26b-a4b-it-qat"

// node is a routable candidate: healthy, warm, model present, 4 free
// slots, a big context window. Tests change what they are about.
func node(id string) Candidate {
	return Candidate{NodeID: id, HasModel: true, Warm: true, ContextWindow: 32768, Slots: 4}
}

func with(c Candidate, f func(*Candidate)) Candidate {
	f(&c)
	return c
}

// picks runs n picks and returns how often each node id was chosen.
func picks(t *testing.T, p *Picker, req Request, pool []Candidate, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		d, err := p.Pick(req, pool)
		if err != nil {
			t.Fatalf("Pick: %v", err)
		}
		if pool[d.Index].NodeID != d.NodeID {
			t.Fatalf("Decision.Index %d is %q, NodeID says %q", d.Index, pool[d.Index].NodeID, d.NodeID)
		}
		got[d.NodeID]++
	}
	return got
}

func keys(m map[string]int) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func TestFilter(t *testing.T) {
	req := Request{Model: model, InputTokens: 3000, MaxOutputTokens: 1000}
	tests := []struct {
		name string
		pool []Candidate
		want []string // the nodes that may be chosen
	}{
		{"model missing", []Candidate{with(node("a"), func(c *Candidate) { c.HasModel = false }), node("b")}, []string{"b"}},
		{"draining", []Candidate{with(node("a"), func(c *Candidate) { c.Draining = true }), node("b")}, []string{"b"}},
		{"offline", []Candidate{with(node("a"), func(c *Candidate) { c.Status = Offline }), node("b")}, []string{"b"}},
		{"unknown status counts as offline", []Candidate{with(node("a"), func(c *Candidate) { c.Status = 9 }), node("b")}, []string{"b"}},
		{"suspect skipped while a healthy node is left", []Candidate{with(node("a"), func(c *Candidate) { c.Status = Suspect }), node("b")}, []string{"b"}},
		{"suspect used when no healthy node", []Candidate{
			with(node("a"), func(c *Candidate) { c.Status = Suspect }),
			with(node("b"), func(c *Candidate) { c.Status = Offline }),
			with(node("c"), func(c *Candidate) { c.Status = Suspect }),
		}, []string{"a", "c"}},
		{"suspect used when the healthy ones are full", []Candidate{
			with(node("a"), func(c *Candidate) { c.Busy = 4 }),
			with(node("b"), func(c *Candidate) { c.Status = Suspect }),
		}, []string{"b"}},
		{"warm only when one is warm", []Candidate{with(node("a"), func(c *Candidate) { c.Warm = false }), node("b"), node("c")}, []string{"b", "c"}},
		{"cold ones when none is warm", []Candidate{
			with(node("a"), func(c *Candidate) { c.Warm = false }),
			with(node("b"), func(c *Candidate) { c.Warm = false }),
		}, []string{"a", "b"}},
		{"warm rule after the health rule", []Candidate{
			with(node("a"), func(c *Candidate) { c.Warm = false }),
			with(node("b"), func(c *Candidate) { c.Status = Suspect }),
		}, []string{"a"}},
		{"warm rule after the slot rule", []Candidate{
			with(node("a"), func(c *Candidate) { c.Busy = 4 }),
			with(node("b"), func(c *Candidate) { c.Warm = false }),
		}, []string{"b"}},
		{"full slots", []Candidate{with(node("a"), func(c *Candidate) { c.Busy = 4 }), node("b")}, []string{"b"}},
		{"over-full slots", []Candidate{with(node("a"), func(c *Candidate) { c.Busy = 9 }), node("b")}, []string{"b"}},
		{"no slots", []Candidate{with(node("a"), func(c *Candidate) { c.Slots = 0 }), node("b")}, []string{"b"}},
		{"context window too small", []Candidate{with(node("a"), func(c *Candidate) { c.ContextWindow = 3999 }), node("b")}, []string{"b"}},
		{"context window exactly enough", []Candidate{with(node("a"), func(c *Candidate) { c.ContextWindow = 4000 }), node("b")}, []string{"a", "b"}},
		{"context window unknown", []Candidate{with(node("a"), func(c *Candidate) { c.ContextWindow = 0 }), node("b")}, []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := keys(picks(t, NewPicker(Defaults{}), req, tt.pool, 60))
			if !slices.Equal(got, tt.want) {
				t.Errorf("chosen %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRejections(t *testing.T) {
	req := Request{Model: model, InputTokens: 3000, MaxOutputTokens: 1000}
	small := func(c *Candidate) { c.ContextWindow = 2048 }
	full := func(c *Candidate) { c.Busy = c.Slots }
	tests := []struct {
		name string
		pool []Candidate
		want Reason
	}{
		{"empty pool", nil, NoNode},
		{"no node has the model", []Candidate{with(node("a"), func(c *Candidate) { c.HasModel = false })}, NoNode},
		{"all offline or draining", []Candidate{
			with(node("a"), func(c *Candidate) { c.Status = Offline }),
			with(node("b"), func(c *Candidate) { c.Draining = true }),
			with(node("c"), func(c *Candidate) { c.HasModel = false }),
		}, Unavailable},
		{"context too small everywhere", []Candidate{with(node("a"), small), with(with(node("b"), small), full)}, ContextTooSmall},
		{"context too small beside an offline big one", []Candidate{
			with(node("a"), small),
			with(node("b"), func(c *Candidate) { c.Status = Offline }),
		}, ContextTooSmall},
		{"every big enough node full", []Candidate{with(node("a"), full), with(node("b"), small)}, NoSlot},
		{"full and offline", []Candidate{with(node("a"), full), with(node("b"), func(c *Candidate) { c.Status = Offline })}, NoSlot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPicker(Defaults{})
			d, err := p.Pick(req, tt.pool)
			var rej *Rejection
			if !errors.As(err, &rej) {
				t.Fatalf("Pick = %+v, %v; want a *Rejection", d, err)
			}
			if rej.Reason != tt.want {
				t.Errorf("reason %q (%v), want %q", rej.Reason, err, tt.want)
			}
			if !errors.Is(fmt.Errorf("wrapped: %w", err), &Rejection{Reason: tt.want}) {
				t.Errorf("errors.Is does not match the reason through wrapping")
			}
			if errors.Is(err, &Rejection{Reason: WaitTooLong}) {
				t.Errorf("errors.Is matches another reason")
			}
			if !strings.Contains(err.Error(), string(tt.want)) || !strings.Contains(rej.Detail, model) {
				t.Errorf("message %q should name the reason and the model", err)
			}
			if len(p.pools) != 0 {
				t.Errorf("a rejected request left round-robin state behind")
			}
		})
	}
}

func TestLoadPenalty(t *testing.T) {
	tests := []struct {
		busy, slots int
		want        float64
	}{
		{0, 4, 1},
		{1, 4, 1 - 1.0/16},
		{2, 4, 0.75},
		{3, 4, 1 - 9.0/16},
		{39, 40, LoadPenaltyFloor}, // 1 − 0.975² = 0.049 is under the floor
		{4, 4, LoadPenaltyFloor},
		{9, 4, LoadPenaltyFloor},
		{-1, 4, 1},
		{0, 0, LoadPenaltyFloor},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d of %d", tt.busy, tt.slots), func(t *testing.T) {
			if got := LoadPenalty(tt.busy, tt.slots); math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("LoadPenalty = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSpeedFactor(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name    string
		s       Speed
		medTPS  float64
		medTTFT time.Duration
		want    float64
	}{
		{"unknown", Speed{TPS: 500, TTFTPer1k: ms, Known: false}, 50, 100 * ms, 1},
		{"the median node", Speed{TPS: 50, TTFTPer1k: 100 * ms, Known: true}, 50, 100 * ms, 1},
		{"twice the TPS", Speed{TPS: 100, TTFTPer1k: 100 * ms, Known: true}, 50, 100 * ms, 0.7*2 + 0.3},
		{"half the TTFT", Speed{TPS: 50, TTFTPer1k: 50 * ms, Known: true}, 50, 100 * ms, 0.7 + 0.3*2},
		{"slower on both", Speed{TPS: 25, TTFTPer1k: 200 * ms, Known: true}, 50, 100 * ms, 0.7*0.5 + 0.3*0.5},
		{"clamped high", Speed{TPS: 1000, TTFTPer1k: ms, Known: true}, 50, 100 * ms, SpeedFactorMax},
		{"clamped low", Speed{TPS: 1, TTFTPer1k: 10 * time.Second, Known: true}, 50, 100 * ms, SpeedFactorMin},
		{"own TPS unknown", Speed{TTFTPer1k: 50 * ms, Known: true}, 50, 100 * ms, 0.7 + 0.3*2},
		{"own TTFT unknown", Speed{TPS: 100, Known: true}, 50, 100 * ms, 0.7*2 + 0.3},
		{"median TPS unknown", Speed{TPS: 100, TTFTPer1k: 50 * ms, Known: true}, 0, 100 * ms, 0.7 + 0.3*2},
		{"median TTFT unknown", Speed{TPS: 100, TTFTPer1k: 50 * ms, Known: true}, 50, 0, 0.7*2 + 0.3},
		{"known but empty", Speed{Known: true}, 50, 100 * ms, 1},
		{"NaN TPS", Speed{TPS: math.NaN(), Known: true}, 50, 100 * ms, 1},
		{"infinite TPS", Speed{TPS: math.Inf(1), Known: true}, 50, 100 * ms, SpeedFactorMax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SpeedFactor(tt.s, tt.medTPS, tt.medTTFT); math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("SpeedFactor = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestEffectiveWeight checks base × load × speed, with the medians taken
// over the whole pool before filtering (the offline node c counts).
func TestEffectiveWeight(t *testing.T) {
	ms := time.Millisecond
	sp := func(tps float64, ttft time.Duration) func(*Candidate) {
		return func(c *Candidate) { c.Speed = Speed{TPS: tps, TTFTPer1k: ttft, Known: true} }
	}
	pool := []Candidate{
		with(with(node("a"), sp(10, 100*ms)), func(c *Candidate) { c.BaseWeight = 2 }),
		with(with(node("b"), sp(20, 100*ms)), func(c *Candidate) { c.Busy = 2 }),
		with(with(node("c"), sp(40, 100*ms)), func(c *Candidate) { c.Status = Offline }),
		with(node("d"), sp(80, 50*ms)),
		node("e"), // unknown speed
		with(with(node("f"), sp(1000, 0)), func(c *Candidate) { c.HasModel = false }), // not in the medians
		with(node("g"), func(c *Candidate) { c.BaseWeight = -3 }),
	}
	// median TPS over a, b, c, d = (20+40)/2 = 30; median TTFT over a, b, c, d = 100ms.
	want := map[string]float64{
		"a": 2 * (0.7*10/30 + 0.3),
		"b": 0.75 * (0.7*20/30 + 0.3),
		"d": 0.7*80/30 + 0.3*2,
		"e": 1,
		"g": 1,
	}
	p := NewPicker(Defaults{})
	got := map[string]float64{}
	for range 200 {
		d, err := p.Pick(Request{Model: model, InputTokens: 100, MaxOutputTokens: 100}, pool)
		if err != nil {
			t.Fatal(err)
		}
		got[d.NodeID] = d.Weight
	}
	for id, w := range want {
		if math.Abs(got[id]-w) > 1e-9 {
			t.Errorf("weight of %s = %v, want %v", id, got[id], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("chosen %v, want exactly %v", got, want)
	}
}

func weighted(ws ...float64) []Candidate {
	pool := make([]Candidate, len(ws))
	for i, w := range ws {
		pool[i] = with(node(string(rune('a'+i))), func(c *Candidate) { c.BaseWeight = w })
	}
	return pool
}

func TestSWRRNginxSequence(t *testing.T) {
	p := NewPicker(Defaults{})
	pool := weighted(5, 1, 1)
	var seq strings.Builder
	for range 21 {
		d, err := p.Pick(Request{Model: model}, pool)
		if err != nil {
			t.Fatal(err)
		}
		seq.WriteString(d.NodeID)
	}
	if want := strings.Repeat("aabacaa", 3); seq.String() != want {
		t.Errorf("sequence %s, want %s", seq.String(), want)
	}
}

func TestSWRRProportions(t *testing.T) {
	tests := []struct {
		weights []float64
		windows int
		scale   float64 // makes every weight a whole number of picks per window
	}{
		{[]float64{5, 1, 1}, 100, 1},
		{[]float64{3, 2, 1}, 100, 1},
		{[]float64{1, 1, 1, 1}, 50, 1},
		{[]float64{10, 1}, 40, 1},
		{[]float64{2.5, 1.5, 1}, 100, 2},
		{[]float64{0.75, 0.5, 0.25}, 100, 4},
		{[]float64{7, 3, 0}, 30, 1}, // 0 means 1
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.weights), func(t *testing.T) {
			pool := weighted(tt.weights...)
			total := 0.0
			for i := range pool {
				total += baseWeight(pool[i].BaseWeight)
			}
			p := NewPicker(Defaults{})
			// Every window of Σw picks holds exactly w picks of each node.
			for w := range tt.windows {
				got := picks(t, p, Request{Model: model}, pool, int(total*tt.scale))
				for i := range pool {
					if want := int(baseWeight(pool[i].BaseWeight) * tt.scale); got[pool[i].NodeID] != want {
						t.Fatalf("window %d: node %s chosen %d times, want %d (%v)", w, pool[i].NodeID, got[pool[i].NodeID], want, got)
					}
				}
			}
		})
	}
}

// TestSWRRReorderedPool checks that state follows node ids, not positions:
// a pool passed in a new order every time still gets exact proportions.
func TestSWRRReorderedPool(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pool := weighted(3, 2, 1)
	p := NewPicker(Defaults{})
	got := map[string]int{}
	for range 600 {
		rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
		for id, n := range picks(t, p, Request{Model: model}, pool, 1) {
			got[id] += n
		}
	}
	if got["a"] != 300 || got["b"] != 200 || got["c"] != 100 {
		t.Errorf("counts %v, want a:300 b:200 c:100", got)
	}
}

func TestSWRRStateDropsNodesThatLeft(t *testing.T) {
	p := NewPicker(Defaults{})
	req := Request{Model: model}
	abc := weighted(5, 1, 1)
	picks(t, p, req, abc, 3) // a a b: currents a=1 b=-4 c=3
	st := p.pools[model]
	if !slices.Equal(st.cur, []float64{1, -4, 3}) {
		t.Fatalf("currents %v, want [1 -4 3]", st.cur)
	}

	ac := []Candidate{abc[0], abc[2]}
	picks(t, p, req, ac, 1) // a=6 c=4 → a: a=0 c=4
	if _, ok := st.index["b"]; ok || len(st.ids) != 2 || len(st.cur) != 2 {
		t.Fatalf("b left the pool but its state is still there: ids %v, cur %v", st.ids, st.cur)
	}
	if !slices.Equal(st.cur, []float64{0, 4}) {
		t.Fatalf("currents %v, want [0 4]", st.cur)
	}

	// b comes back from zero, not from −4.
	picks(t, p, req, abc, 1) // a=5 b=1 c=5 → a (first of a tie): a=-2
	if !slices.Equal(st.cur, []float64{-2, 1, 5}) {
		t.Fatalf("currents %v, want [-2 1 5]", st.cur)
	}

	// A node that no longer has the model leaves the pool too, and one that
	// is only filtered out (full) keeps its place.
	gone := slices.Clone(abc)
	gone[2].HasModel = false
	gone[1].Busy = gone[1].Slots
	picks(t, p, req, gone, 1) // a=3 → a: a=-2; b frozen at 1, c dropped to 0
	if !slices.Equal(st.cur, []float64{-2, 1, 0}) {
		t.Fatalf("currents %v, want [-2 1 0]", st.cur)
	}

	p.DropModel(model)
	if len(p.pools) != 0 {
		t.Errorf("DropModel left state behind")
	}
}

func TestSWRRStatePerModel(t *testing.T) {
	p := NewPicker(Defaults{})
	pool := weighted(5, 1, 1)
	var seq strings.Builder
	for range 7 {
		for _, m := range []string{"x", "y"} {
			d, err := p.Pick(Request{Model: m}, pool)
			if err != nil {
				t.Fatal(err)
			}
			seq.WriteString(d.NodeID)
		}
	}
	if want := "aaaabbaaccaaaa"; seq.String() != want {
		t.Errorf("interleaved sequence %s, want %s (each model on its own)", seq.String(), want)
	}
}

func TestPickConcurrent(t *testing.T) {
	p := NewPicker(Defaults{})
	var book SpeedBook
	const goroutines, each = 16, 700
	pool := weighted(5, 1, 1)
	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			local := map[string]int{}
			other := weighted(1, 2, 3, 4)
			for i := range each {
				d, err := p.Pick(Request{Model: model}, pool)
				if err != nil {
					t.Error(err)
					return
				}
				local[d.NodeID]++
				// Another model, a reordered pool and speed updates at the
				// same time, for the race detector.
				slices.Reverse(other)
				if _, err := p.Pick(Request{Model: "other"}, other); err != nil {
					t.Error(err)
					return
				}
				book.Observe(d.NodeID, model, 100, time.Second, 500+g, time.Duration(i)*time.Millisecond)
				_ = book.Get(d.NodeID, model)
			}
			mu.Lock()
			for k, v := range local {
				counts[k] += v
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	// Picks are serialised, so the proportions stay exact.
	n := goroutines * each / 7
	if counts["a"] != 5*n || counts["b"] != n || counts["c"] != n {
		t.Errorf("counts %v, want a:%d b:%d c:%d", counts, 5*n, n, n)
	}
}

func TestPickDoesNotAllocate(t *testing.T) {
	pool := benchPool(100)
	p := NewPicker(Defaults{})
	req := benchRequest()
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := p.Pick(req, pool); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Pick allocates %v times per call at 100 nodes", allocs)
	}
}
