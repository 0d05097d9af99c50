package scheduler

import "time"

// Reason says why no node took a request. The values are stable and short
// so they can be a Prometheus label and a fallback reason as they are.
type Reason string

const (
	// NoNode: no node of the pool has the model.
	NoNode Reason = "no_node"
	// Unavailable: every node with the model is offline or draining.
	Unavailable Reason = "unavailable"
	// ContextTooSmall: no available node has a context window big enough
	// for the input plus the requested output.
	ContextTooSmall Reason = "context_too_small"
	// NoSlot: every node that could serve the request has all slots busy.
	NoSlot Reason = "no_slot"
	// WaitTooLong: the chosen node would start the request later than the
	// request may wait (admission refused).
	WaitTooLong Reason = "wait_too_long"
)

// Rejection is the error Pick returns when the request should move on to
// the next model of the chain. Use errors.As to read it, or errors.Is with
// a Rejection that carries only a Reason to test for one reason.
type Rejection struct {
	Reason Reason
	// Detail is a sentence for logs and error messages; it names models,
	// nodes and numbers, never anything secret.
	Detail string
	// NodeID, ExpectedWait and Limit are set for WaitTooLong: the node that
	// was chosen, how long the request would have waited there, and the
	// limit it exceeded. ExpectedWait makes a fair Retry-After.
	NodeID       string
	ExpectedWait time.Duration
	Limit        time.Duration
}

func (r *Rejection) Error() string {
	if r.Detail == "" {
		return "scheduler: " + string(r.Reason)
	}
	return "scheduler: " + string(r.Reason) + ": " + r.Detail
}

// Is reports whether target is a Rejection for the same reason, so that
// errors.Is(err, &Rejection{Reason: NoSlot}) works through wrapping.
func (r *Rejection) Is(target error) bool {
	t, ok := target.(*Rejection)
	return ok && t != nil && t.Reason == r.Reason
}
