package metering

import (
	"context"
	"slices"
	"sync"

	"github.com/switchyard-ai/switchyard/gateway/store"
)

var _ Sink = (*MemorySink)(nil)

// MemorySink is a Sink that keeps batches in memory, for tests here and in
// the packages that emit events. Its zero value is ready; Fail makes it
// fail like a database that is down.
type MemorySink struct {
	mu      sync.Mutex
	batches [][]store.UsageEvent
	err     error
	calls   int
}

// InsertUsage records a copy of the batch, or returns the error set by Fail
// (recording nothing, as a failed transaction would).
func (s *MemorySink) InsertUsage(ctx context.Context, events []store.UsageEvent) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.err != nil {
		return s.err
	}
	s.batches = append(s.batches, slices.Clone(events))
	return nil
}

// Fail makes every later InsertUsage return err; Fail(nil) recovers.
func (s *MemorySink) Fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// Batches returns the batches written so far, oldest first.
func (s *MemorySink) Batches() [][]store.UsageEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]store.UsageEvent, len(s.batches))
	for i, b := range s.batches {
		out[i] = slices.Clone(b)
	}
	return out
}

// Events returns every event written so far, in order.
func (s *MemorySink) Events() []store.UsageEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.UsageEvent
	for _, b := range s.batches {
		out = append(out, b...)
	}
	return out
}

// Len is how many events were written.
func (s *MemorySink) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, b := range s.batches {
		n += len(b)
	}
	return n
}

// Calls is how many times InsertUsage was called, failed calls included.
func (s *MemorySink) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}
