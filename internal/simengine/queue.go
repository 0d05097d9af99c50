package simengine

import (
	"context"
	"slices"
	"time"
)

// Admission is an explicit ticket queue rather than a semaphore (a buffered
// channel or x/sync/semaphore) for three reasons:
//   - order: the gateway's Little's-law admission and the benchmarks assume an
//     engine serves its queue first come, first served; Go promises no order
//     among goroutines blocked on a channel or mutex, so a semaphore would only
//     usually be FIFO, and a test of ordering would be flaky;
//   - exact counts: the waiting count is what the flavours' /metrics report,
//     and it must be the true length of the queue, per model, at any instant;
//   - run-time changes: SetSlots can grow or shrink the limit while requests
//     wait, which a fixed-capacity semaphore cannot.
//
// A ticket is handed a slot by the goroutine that frees one (dispatchLocked),
// so a slot never sits free while someone waits, and a waiter that gives up
// either leaves the queue or, if it was granted a slot at that very moment,
// passes the slot on.
type ticket struct {
	model   string
	ready   chan struct{} // closed when granted
	granted bool          // guarded by Engine.mu
}

func (e *Engine) hasFreeSlotLocked() bool {
	return e.k.slots == 0 || e.running < e.k.slots
}

// acquire takes a slot for model, waiting in FIFO order behind earlier
// requests. It returns ctx's error if the client goes away first, in which
// case the request holds no slot and is no longer counted as waiting.
func (e *Engine) acquire(ctx context.Context, model string) error {
	e.mu.Lock()
	mc := e.byModel[model]
	if len(e.queue) == 0 && e.hasFreeSlotLocked() {
		e.running++
		mc.running++
		e.mu.Unlock()
		return nil
	}
	t := &ticket{model: model, ready: make(chan struct{})}
	e.queue = append(e.queue, t)
	mc.waiting++
	e.mu.Unlock()

	select {
	case <-t.ready:
		return nil
	case <-ctx.Done():
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	if t.granted {
		// Granted while the client left: hand the slot to the next in line.
		e.releaseLocked(model)
		return ctx.Err()
	}
	if i := slices.Index(e.queue, t); i >= 0 {
		e.queue = slices.Delete(e.queue, i, i+1)
		mc.waiting--
	}
	return ctx.Err()
}

// release gives back a slot taken by acquire.
func (e *Engine) release(model string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.releaseLocked(model)
}

func (e *Engine) releaseLocked(model string) {
	e.running--
	e.byModel[model].running--
	e.dispatchLocked()
}

// dispatchLocked grants free slots to the head of the queue.
func (e *Engine) dispatchLocked() {
	for len(e.queue) > 0 && e.hasFreeSlotLocked() {
		t := e.queue[0]
		e.queue[0] = nil
		e.queue = e.queue[1:]
		t.granted = true
		e.running++
		mc := e.byModel[t.model]
		mc.waiting--
		mc.running++
		close(t.ready)
	}
}

// waitUntil blocks until the deadline computed from the current knobs has
// passed, recomputing it whenever a knob changes, so that SetTTFT, SetTPS and
// StallAfter act on requests already waiting. It returns the deadline it met,
// so that a sequence of waits keeps to schedule instead of drifting by each
// timer's lateness, or ctx's error if the client goes away.
func (e *Engine) waitUntil(ctx context.Context, deadline func(k knobs) time.Time) (time.Time, error) {
	for {
		k, changed := e.snapshot()
		at := deadline(k)
		d := time.Until(at)
		if d <= 0 {
			return at, ctx.Err()
		}
		timer := time.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return at, ctx.Err()
		case <-changed:
			timer.Stop()
		case <-timer.C:
			return at, nil
		}
	}
}

// tokenInterval is the time between two tokens of one request.
func (k knobs) tokenInterval() time.Duration {
	if k.tps <= 0 {
		return 0
	}
	return time.Duration(float64(time.Second) / k.tps)
}

// firstTokenDelay is the time from admission to the first token for a prompt
// of promptTokens tokens.
func (k knobs) firstTokenDelay(promptTokens int) time.Duration {
	return k.ttft + time.Duration(int64(k.ttftPer1k)*int64(promptTokens)/1000)
}
