package scheduler

import (
	"math"
	"time"
)

const (
	// InteractiveWaitLimit is the longest an interactive request may wait
	// for a node before it moves on (SPEC §4.5).
	InteractiveWaitLimit = 250 * time.Millisecond

	// DefaultTPS and DefaultTTFTPer1k stand in for a node's speed until the
	// gateway has measured it: a modest single-GPU figure, so an unmeasured
	// node is neither flooded nor starved.
	DefaultTPS       = 30.0
	DefaultTTFTPer1k = 250 * time.Millisecond

	// TTFTTokenFloor is the prompt size below which time to first token is
	// taken as fixed cost; see the package documentation.
	TTFTTokenFloor = 128
)

// Defaults are the speeds admission assumes for a node whose speed is not
// known yet. A zero field means the package default.
type Defaults struct {
	TPS       float64
	TTFTPer1k time.Duration
}

func (d Defaults) tps() float64 {
	if d.TPS > 0 && !math.IsInf(d.TPS, 1) {
		return d.TPS
	}
	return DefaultTPS
}

func (d Defaults) ttftPer1k() time.Duration {
	if d.TTFTPer1k > 0 {
		return d.TTFTPer1k
	}
	return DefaultTTFTPer1k
}

// Duration is how long req should take on a node of speed s, from the
// moment it starts to its last token, each unknown figure replaced by d's.
func (d Defaults) Duration(s Speed, req Request) time.Duration {
	tps, ttft := d.tps(), d.ttftPer1k()
	if s.Known {
		if s.TPS > 0 && !math.IsInf(s.TPS, 1) {
			tps = s.TPS
		}
		if s.TTFTPer1k > 0 {
			ttft = s.TTFTPer1k
		}
	}
	in := max(req.InputTokens, TTFTTokenFloor)
	out := max(req.MaxOutputTokens, 0)
	ns := float64(ttft)*float64(in)/1000 + float64(out)/tps*float64(time.Second)
	return clampDuration(ns)
}

// Estimate returns how long req would wait on c before it starts, and how
// long it would then run; the formula is in the package documentation.
func (d Defaults) Estimate(c Candidate, req Request) (wait, duration time.Duration) {
	duration = d.Duration(c.Speed, req)
	ahead := QueueAhead(c)
	if ahead == 0 {
		return 0, duration
	}
	slots := max(c.Slots, 1)
	return clampDuration(float64(ahead) * float64(duration) / float64(slots)), duration
}

// QueueAhead is how many requests must finish on c before one more can
// start there: max(0, max(Busy, EngineRunning+EngineWaiting) + 1 − Slots),
// with the engine's counts left out when it does not report them.
func QueueAhead(c Candidate) int {
	inSystem := max(c.Busy, 0)
	if c.EngineQueueKnown {
		inSystem = max(inSystem, max(c.EngineRunning, 0)+max(c.EngineWaiting, 0))
	}
	return max(0, inSystem+1-max(c.Slots, 0))
}

// WaitLimit is the longest req may wait for a node: its QueueTimeout,
// capped at InteractiveWaitLimit for interactive traffic. ok is false when
// neither applies and any wait is acceptable.
func WaitLimit(req Request) (limit time.Duration, ok bool) {
	if req.QueueTimeout > 0 {
		limit, ok = req.QueueTimeout, true
	}
	if req.Interactive && (!ok || InteractiveWaitLimit < limit) {
		limit, ok = InteractiveWaitLimit, true
	}
	return limit, ok
}

// clampDuration turns nanoseconds into a Duration without wrapping: a
// node measured at a near-zero TPS gives an absurd but finite estimate,
// which admission then refuses, rather than a negative one it would admit.
func clampDuration(ns float64) time.Duration {
	if ns >= math.MaxInt64 || math.IsNaN(ns) {
		return math.MaxInt64
	}
	if ns <= 0 {
		return 0
	}
	return time.Duration(ns)
}
