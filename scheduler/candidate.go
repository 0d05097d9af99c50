package scheduler

import (
	"fmt"
	"time"
)

// Status is a node's liveness as the gateway sees it (SPEC §4.2). The zero
// value is Healthy so that a hand-built Candidate in a test or fake is
// routable without ceremony; any value not listed here counts as Offline.
type Status uint8

const (
	Healthy Status = iota
	Suspect
	Offline
)

// String returns the name used in ListNodes and metric labels.
func (s Status) String() string {
	switch s {
	case Healthy:
		return "healthy"
	case Suspect:
		return "suspect"
	case Offline:
		return "offline"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Speed is what the gateway measured for one model on one node.
type Speed struct {
	// TPS is output tokens per second while generating; 0 means unknown.
	TPS float64
	// TTFTPer1k is the time to first token per 1000 input tokens; 0 means
	// unknown.
	TTFTPer1k time.Duration
	// Known is false until the node has been measured for the model.
	Known bool
}

// Candidate is one node of the pool for one model, as the snapshot shows
// it: the node's own report merged with the gateway's view.
type Candidate struct {
	NodeID   string
	Status   Status
	Draining bool
	// BaseWeight is the operator's weight (SetNodeWeight); 0, negative or
	// not finite means 1, so an unset weight is the neutral one.
	BaseWeight float64
	HasModel   bool
	// Warm means the model is loaded in memory now.
	Warm bool
	// ContextWindow in tokens; 0 means the node did not say and the
	// context rule is not applied to it.
	ContextWindow int
	// Slots is how many requests the engine runs at once for the model.
	Slots int
	// Busy is how many of those slots the gateway holds leases on now.
	Busy int
	// EngineRunning and EngineWaiting are the engine's own counts, meaningful
	// only when EngineQueueKnown (Ollama reports no queue: unknown, not zero).
	EngineRunning    int
	EngineWaiting    int
	EngineQueueKnown bool
	Speed            Speed
}

// Request is what the scheduler needs to know about one request.
type Request struct {
	Model string
	// InputTokens is the gateway's estimate of the prompt size.
	InputTokens int
	// MaxOutputTokens is max_completion_tokens/max_tokens, else the
	// model's default.
	MaxOutputTokens int
	// Interactive caps the wait at InteractiveWaitLimit.
	Interactive bool
	// QueueTimeout is the model's queue_timeout_ms; 0 means no limit of its
	// own.
	QueueTimeout time.Duration
}

// Decision is the node chosen for a request and the admission estimate
// that let it through.
type Decision struct {
	NodeID string
	// Index is the node's position in the pool passed to Pick.
	Index int
	// Weight is the node's effective weight in this round.
	Weight           float64
	ExpectedWait     time.Duration
	ExpectedDuration time.Duration
}
