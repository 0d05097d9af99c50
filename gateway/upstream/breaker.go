package upstream

import (
	"fmt"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
)

// vendorBreaker pauses one vendor after consecutive failures.
//
// gobreaker counts the failures and admits the single half-open probe, but
// its open period is a fixed Timeout read from the wall clock, and a vendor's
// Retry-After can ask for longer. So the pause itself is kept here, as
// pausedUntil on the Client's clock, and gobreaker's Timeout is set to its
// smallest value: by the time our pause has ended, its next Allow moves it to
// half-open and admits exactly one probe. The probe's success closes it; its
// failure opens it again and starts a new pause.
type vendorBreaker struct {
	id string

	mu          sync.Mutex
	cb          *gobreaker.TwoStepCircuitBreaker[struct{}]
	pausedUntil time.Time
	// opened and closed are set by the breaker's OnStateChange. gobreaker
	// calls it synchronously from Allow and from the done callback, and
	// both are only ever called with mu held, so they need no lock of
	// their own.
	opened, closed bool
}

func (c *Client) breakerFor(vendorID string) *vendorBreaker {
	label := TargetVendor + ":" + vendorID
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.breakers[label]; b != nil {
		return b
	}
	b := &vendorBreaker{id: vendorID}
	failures := uint32(c.o.BreakerFailures)
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        label,
		MaxRequests: 1,
		Timeout:     time.Nanosecond,
		ReadyToTrip: func(n gobreaker.Counts) bool { return n.ConsecutiveFailures >= failures },
		// A bad or canceled request is neither a success nor a failure: it
		// neither resets the run of failures nor adds to it, and a
		// canceled probe frees the half-open slot for the next request.
		IsExcluded: func(err error) bool {
			e, ok := err.(*Error)
			return ok && !e.Kind.failure()
		},
		OnStateChange: func(_ string, from, to gobreaker.State) {
			switch to {
			case gobreaker.StateOpen:
				b.opened = true
			case gobreaker.StateClosed:
				b.closed = from == gobreaker.StateHalfOpen
			}
		},
	})
	c.breakers[label] = b
	return b
}

// admit lets a call to the vendor through or refuses it with a Paused
// error. The returned report must be called exactly once with the call's
// outcome (nil for a 2xx).
func (c *Client) admit(b *vendorBreaker) (report func(*Error), err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	label := TargetVendor + ":" + b.id
	now := c.o.Now()
	if now.Before(b.pausedUntil) {
		return nil, &Error{
			Kind:       Paused,
			Target:     label,
			RetryAfter: b.pausedUntil.Sub(now),
			Message:    fmt.Sprintf("vendor paused until %s after repeated failures", b.pausedUntil.UTC().Format(time.RFC3339)),
		}
	}
	done, berr := b.cb.Allow()
	if berr != nil {
		// Half-open with the probe still out: everybody else waits for
		// its outcome instead of piling onto a vendor that may be down.
		return nil, &Error{Kind: Paused, Target: label, Message: "vendor is being probed after a pause", err: berr}
	}
	return func(e *Error) { c.report(b, done, e) }, nil
}

func (c *Client) report(b *vendorBreaker, done func(error), e *Error) {
	var outcome error
	if e != nil {
		outcome = e // never a typed nil in the interface
	}
	b.mu.Lock()
	done(outcome)
	opened, closed := b.opened, b.closed
	b.opened, b.closed = false, false
	var until time.Time
	if opened {
		pause := c.o.BreakerPause
		if e != nil && e.RetryAfter > pause {
			pause = e.RetryAfter
		}
		b.pausedUntil = c.o.Now().Add(pause)
		until = b.pausedUntil
	}
	b.mu.Unlock()

	if opened {
		c.log.Warn("vendor paused", "vendor", b.id, "until", until, "reason", e.Kind, "status", e.Status)
		if c.o.OnPause != nil {
			c.o.OnPause(b.id, until)
		}
	}
	if closed {
		c.log.Info("vendor resumed after a successful probe", "vendor", b.id)
	}
}

// PausedUntil reports until when a vendor is paused by its breaker, or the
// zero time when it is not. While the one probe after a pause is out the
// pause is over and this reports zero, though Send still answers Paused to
// everybody else until the probe's outcome is known.
func (c *Client) PausedUntil(vendorID string) time.Time {
	c.mu.Lock()
	b := c.breakers[TargetVendor+":"+vendorID]
	c.mu.Unlock()
	if b == nil {
		return time.Time{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.o.Now().Before(b.pausedUntil) {
		return b.pausedUntil
	}
	return time.Time{}
}

// ResetVendor forgets a vendor's breaker: after SetVendorKey a fixed key is
// tried at once, and a deleted vendor leaves nothing behind. Calls already
// in flight report to the forgotten breaker and change nothing.
func (c *Client) ResetVendor(vendorID string) {
	c.mu.Lock()
	delete(c.breakers, TargetVendor+":"+vendorID)
	c.mu.Unlock()
}
