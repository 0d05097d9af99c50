package scheduler

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name string
		d    Defaults
		s    Speed
		req  Request
		want time.Duration
	}{
		{"measured", Defaults{}, Speed{TPS: 50, TTFTPer1k: 200 * ms, Known: true},
			Request{InputTokens: 2000, MaxOutputTokens: 500}, 400*ms + 10*time.Second},
		{"unknown uses the package defaults", Defaults{}, Speed{},
			Request{InputTokens: 1000, MaxOutputTokens: 300}, DefaultTTFTPer1k + 10*time.Second},
		{"unknown uses the configured defaults", Defaults{TPS: 100, TTFTPer1k: 100 * ms}, Speed{},
			Request{InputTokens: 1000, MaxOutputTokens: 300}, 100*ms + 3*time.Second},
		{"figures not flagged known are ignored", Defaults{}, Speed{TPS: 1000, TTFTPer1k: ms},
			Request{InputTokens: 1000, MaxOutputTokens: 300}, DefaultTTFTPer1k + 10*time.Second},
		{"TPS unknown, TTFT measured", Defaults{}, Speed{TTFTPer1k: 100 * ms, Known: true},
			Request{InputTokens: 1000, MaxOutputTokens: 30}, 100*ms + time.Second},
		{"tiny prompt costs the floor", Defaults{}, Speed{TPS: 50, TTFTPer1k: 1000 * ms, Known: true},
			Request{InputTokens: 5, MaxOutputTokens: 0}, 1000 * ms * TTFTTokenFloor / 1000},
		{"no prompt size costs the floor", Defaults{}, Speed{TPS: 50, TTFTPer1k: 1000 * ms, Known: true},
			Request{InputTokens: 0, MaxOutputTokens: 50}, 128*ms + time.Second},
		{"absurdly slow node saturates", Defaults{}, Speed{TPS: 1e-12, Known: true},
			Request{InputTokens: 1000, MaxOutputTokens: 1 << 30}, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.d.Duration(tt.s, tt.req); got != tt.want {
				t.Errorf("Duration = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEstimate(t *testing.T) {
	// Unknown speed, 1000 input and 300 output tokens: 250ms + 10s.
	req := Request{InputTokens: 1000, MaxOutputTokens: 300}
	dur := DefaultTTFTPer1k + 10*time.Second
	q := func(busy, slots, running, waiting int, known bool) Candidate {
		return Candidate{Slots: slots, Busy: busy, EngineRunning: running, EngineWaiting: waiting, EngineQueueKnown: known}
	}
	tests := []struct {
		name  string
		c     Candidate
		ahead int
	}{
		{"free slot, empty engine", q(0, 4, 0, 0, true), 0},
		{"free slot, engine agrees", q(3, 4, 3, 0, true), 0},
		{"last slot taken by the engine's own traffic", q(3, 4, 4, 0, true), 1},
		{"engine waiting beyond the gateway", q(2, 4, 4, 3, true), 4},
		{"engine behind the gateway's leases", q(3, 4, 0, 0, true), 0},
		{"unknown queue adds nothing", q(1, 4, 4, 1000, false), 0},
		{"gateway over its slots", q(4, 4, 0, 0, false), 1},
		{"gateway over its slots, engine waiting more", q(5, 4, 4, 5, true), 6},
		{"negative counts read as zero", q(-3, 2, -1, -1, true), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := QueueAhead(tt.c); got != tt.ahead {
				t.Errorf("QueueAhead = %d, want %d", got, tt.ahead)
			}
			wait, d := Defaults{}.Estimate(tt.c, req)
			if d != dur {
				t.Errorf("duration %v, want %v", d, dur)
			}
			if want := time.Duration(tt.ahead) * dur / time.Duration(tt.c.Slots); wait != want {
				t.Errorf("wait %v, want %d × %v ÷ %d = %v", wait, tt.ahead, dur, tt.c.Slots, want)
			}
		})
	}
}

func TestWaitLimit(t *testing.T) {
	tests := []struct {
		name string
		req  Request
		want time.Duration
		ok   bool
	}{
		{"none", Request{}, 0, false},
		{"queue timeout", Request{QueueTimeout: 2 * time.Second}, 2 * time.Second, true},
		{"interactive", Request{Interactive: true}, InteractiveWaitLimit, true},
		{"interactive, longer timeout", Request{Interactive: true, QueueTimeout: 2 * time.Second}, InteractiveWaitLimit, true},
		{"interactive, shorter timeout", Request{Interactive: true, QueueTimeout: 100 * time.Millisecond}, 100 * time.Millisecond, true},
		{"negative timeout is none", Request{QueueTimeout: -time.Second}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := WaitLimit(tt.req)
			if got != tt.want || ok != tt.ok {
				t.Errorf("WaitLimit = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestAdmission drives admission through Pick. The node runs at 100 tok/s
// and 100ms per 1k input tokens; the request (1000 in, 100 out) takes
// 100ms + 1s = 1.1s, so each request ahead on its 4 slots adds 275ms.
func TestAdmission(t *testing.T) {
	ms := time.Millisecond
	base := Candidate{
		NodeID: "a", HasModel: true, Warm: true, ContextWindow: 8192, Slots: 4, Busy: 1,
		EngineRunning: 1, EngineQueueKnown: true,
		Speed: Speed{TPS: 100, TTFTPer1k: 100 * ms, Known: true},
	}
	const step = 275 * time.Millisecond
	tests := []struct {
		name     string
		waiting  int
		known    bool
		req      Request
		wait     time.Duration
		rejected bool
	}{
		{"free slot, empty queue, interactive", 0, true, Request{Interactive: true}, 0, false},
		{"free slot, empty queue, tight timeout", 0, true, Request{QueueTimeout: ms}, 0, false},
		{"waiting fills the free slots first", 2, true, Request{Interactive: true}, 0, false},
		{"one ahead", 3, true, Request{}, step, false},
		{"one ahead, interactive: 275ms > 250ms", 3, true, Request{Interactive: true}, step, true},
		{"one ahead, timeout 1s", 3, true, Request{QueueTimeout: time.Second}, step, false},
		{"four ahead", 6, true, Request{}, 4 * step, false},
		{"four ahead, timeout 1s", 6, true, Request{QueueTimeout: time.Second}, 4 * step, true},
		{"four ahead, timeout exactly the wait", 6, true, Request{QueueTimeout: 4 * step}, 4 * step, false},
		{"unknown queue counts as no extra waiting", 1000, false, Request{Interactive: true}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			c.EngineWaiting, c.EngineQueueKnown = tt.waiting, tt.known
			req := tt.req
			req.Model, req.InputTokens, req.MaxOutputTokens = model, 1000, 100
			d, err := NewPicker(Defaults{}).Pick(req, []Candidate{c})
			if tt.rejected {
				var rej *Rejection
				if !errors.As(err, &rej) || rej.Reason != WaitTooLong {
					t.Fatalf("Pick = %+v, %v; want WaitTooLong", d, err)
				}
				limit, _ := WaitLimit(req)
				if rej.NodeID != "a" || rej.ExpectedWait != tt.wait || rej.Limit != limit {
					t.Errorf("rejection %+v, want node a, wait %v, limit %v", rej, tt.wait, limit)
				}
				return
			}
			if err != nil {
				t.Fatalf("Pick: %v", err)
			}
			if d.ExpectedWait != tt.wait || d.ExpectedDuration != 1100*ms {
				t.Errorf("wait %v, duration %v; want %v, 1.1s", d.ExpectedWait, d.ExpectedDuration, tt.wait)
			}
		})
	}
}

// TestAdmissionSpendsTheTurn checks that a refused node does not stay the
// round-robin winner: the next request goes to the other node.
func TestAdmissionSpendsTheTurn(t *testing.T) {
	congested := with(node("a"), func(c *Candidate) {
		c.EngineQueueKnown, c.EngineRunning, c.EngineWaiting = true, 4, 20
	})
	pool := []Candidate{congested, node("b")}
	p := NewPicker(Defaults{})
	req := Request{Model: model, InputTokens: 100, MaxOutputTokens: 100, Interactive: true}
	if _, err := p.Pick(req, pool); !errors.Is(err, &Rejection{Reason: WaitTooLong}) {
		t.Fatalf("first pick: %v, want WaitTooLong on a", err)
	}
	d, err := p.Pick(req, pool)
	if err != nil || d.NodeID != "b" {
		t.Fatalf("second pick = %+v, %v; want b", d, err)
	}
}
