package scheduler

import (
	"math"
	"testing"
	"time"
)

func TestSpeedBook(t *testing.T) {
	ms := time.Millisecond
	type obs struct {
		out   int
		gen   time.Duration
		in    int
		ttft  time.Duration
		model string
	}
	tests := []struct {
		name string
		obs  []obs
		want Speed
	}{
		{"nothing measured", nil, Speed{}},
		{"first sample sets the value", []obs{{100, 2 * time.Second, 2000, 400 * ms, model}},
			Speed{TPS: 50, TTFTPer1k: 200 * ms, Known: true}},
		{"second sample moves it by alpha", []obs{
			{100, 2 * time.Second, 2000, 400 * ms, model},
			{100, time.Second, 1000, 100 * ms, model},
		}, Speed{TPS: 50 + SpeedAlpha*(100-50), TTFTPer1k: 200*ms + time.Duration(SpeedAlpha*float64(100*ms-200*ms)), Known: true}},
		{"too few output tokens for TPS, TTFT still counts", []obs{
			{100, 2 * time.Second, 2000, 400 * ms, model},
			{MinTPSTokens - 1, ms, 1000, 200 * ms, model},
		}, Speed{TPS: 50, TTFTPer1k: 200 * ms, Known: true}},
		{"only TTFT measured", []obs{{1, 0, 1000, 300 * ms, model}}, Speed{TTFTPer1k: 300 * ms, Known: true}},
		{"only TPS measured", []obs{{40, time.Second, 0, 300 * ms, model}}, Speed{TPS: 40, Known: true}},
		{"no input tokens, no TTFT", []obs{{1, time.Second, 0, 300 * ms, model}}, Speed{}},
		{"zero durations skipped", []obs{{100, 0, 1000, 0, model}}, Speed{}},
		{"tiny prompt normalised by the floor", []obs{{1, 0, 5, 64 * ms, model}},
			Speed{TTFTPer1k: 64 * ms * 1000 / TTFTTokenFloor, Known: true}},
		{"other models kept apart", []obs{{100, time.Second, 1000, 100 * ms, "other"}}, Speed{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b SpeedBook
			for _, o := range tt.obs {
				b.Observe("a", o.model, o.out, o.gen, o.in, o.ttft)
			}
			got := b.Get("a", model)
			if got.Known != tt.want.Known || math.Abs(got.TPS-tt.want.TPS) > 1e-9 || absDur(got.TTFTPer1k-tt.want.TTFTPer1k) > 1 {
				t.Errorf("Get = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// TestSpeedBookConverges checks that the EWMA follows a node that changed
// speed within a few dozen requests.
func TestSpeedBookConverges(t *testing.T) {
	var b SpeedBook
	b.Observe("a", model, 100, time.Second, 1000, 100*time.Millisecond)
	for range 40 {
		b.Observe("a", model, 100, 4*time.Second, 1000, 400*time.Millisecond)
	}
	got := b.Get("a", model)
	if math.Abs(got.TPS-25) > 0.01 || absDur(got.TTFTPer1k-400*time.Millisecond) > time.Millisecond {
		t.Errorf("after 40 slow samples Get = %+v, want about 25 tok/s and 400ms", got)
	}
}

func TestSpeedBookForget(t *testing.T) {
	var b SpeedBook
	for _, n := range []string{"a", "b"} {
		for _, m := range []string{"x", "y"} {
			b.Observe(n, m, 100, time.Second, 1000, 100*time.Millisecond)
		}
	}
	b.Forget("a")
	b.Forget("nobody")
	for _, tt := range []struct {
		node, model string
		known       bool
	}{{"a", "x", false}, {"a", "y", false}, {"b", "x", true}, {"b", "y", true}} {
		if got := b.Get(tt.node, tt.model).Known; got != tt.known {
			t.Errorf("Get(%s, %s).Known = %v, want %v", tt.node, tt.model, got, tt.known)
		}
	}
}
