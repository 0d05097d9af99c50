package metering_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-ai/switchyard/gateway/metering"
	"github.com/switchyard-ai/switchyard/gateway/metrics"
	"github.com/switchyard-ai/switchyard/gateway/store"
)

var errDown = errors.New("connection refused")

func event(i int) store.UsageEvent {
	return store.UsageEvent{
		RequestID:    fmt.Sprintf("req-%06d", i),
		TenantID:     "acme",
		KeyID:        "k1",
		Model:        "gemma",
		Target:       "node:anna-mac",
		InputTokens:  10,
		OutputTokens: 5,
		Status:       200,
	}
}

// eventually polls cond; the deadline only turns a hang into a failure, it
// measures nothing.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// start runs w until the test ends and returns a channel closed when Run
// has returned.
func start(t *testing.T, w *metering.Writer) (context.CancelFunc, <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return cancel, done
}

func closeOK(t *testing.T, w *metering.Writer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// exactlyOnce checks that the sink holds each of ids once and nothing else.
func exactlyOnce(t *testing.T, got []store.UsageEvent, ids []string) {
	t.Helper()
	seen := map[string]int{}
	for _, e := range got {
		seen[e.RequestID]++
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("event %s written %d times, want 1", id, seen[id])
		}
		delete(seen, id)
	}
	for id, n := range seen {
		t.Errorf("event %s written %d times but never accepted", id, n)
	}
}

func batchSizes(bs [][]store.UsageEvent) []int {
	out := make([]int, len(bs))
	for i, b := range bs {
		out[i] = len(b)
	}
	return out
}

func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Counter != nil {
		return d.GetCounter().GetValue()
	}
	return d.GetGauge().GetValue()
}

func TestBatchesBySize(t *testing.T) {
	sink := &metering.MemorySink{}
	// An interval that never comes: only full batches are written by Run.
	w := metering.New(sink, metering.Options{BatchSize: 10, FlushInterval: time.Hour})
	start(t, w)
	for i := range 35 {
		if !w.Emit(event(i)) {
			t.Fatalf("Emit %d refused", i)
		}
	}
	eventually(t, "three full batches are written", func() bool { return sink.Len() == 30 })
	if got := w.Buffered(); got != 5 {
		t.Errorf("Buffered = %d, want 5 (the partial batch waits for the interval)", got)
	}
	closeOK(t, w)
	if got, want := fmt.Sprint(batchSizes(sink.Batches())), "[10 10 10 5]"; got != want {
		t.Errorf("batch sizes %s, want %s", got, want)
	}
	for i, e := range sink.Events() {
		if want := event(i).RequestID; e.RequestID != want {
			t.Fatalf("event %d is %s, want %s: order not kept", i, e.RequestID, want)
		}
	}
	if w.Written() != 35 || w.Buffered() != 0 || w.Dropped() != 0 {
		t.Errorf("written %d, buffered %d, dropped %d; want 35, 0, 0", w.Written(), w.Buffered(), w.Dropped())
	}
}

func TestFlushesByInterval(t *testing.T) {
	sink := &metering.MemorySink{}
	w := metering.New(sink, metering.Options{BatchSize: 100, FlushInterval: 10 * time.Millisecond})
	start(t, w)
	for i := range 3 {
		w.Emit(event(i))
	}
	eventually(t, "the partial batch is written", func() bool { return sink.Len() == 3 })
	if got := batchSizes(sink.Batches()); len(got) != 1 || got[0] != 3 {
		t.Errorf("batch sizes %v, want [3]", got)
	}
	if w.Buffered() != 0 {
		t.Errorf("Buffered = %d, want 0", w.Buffered())
	}
}

func TestEmitStampsTime(t *testing.T) {
	sink := &metering.MemorySink{}
	w := metering.New(sink, metering.Options{})
	set := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	e := event(1)
	e.Time = set
	before := time.Now()
	w.Emit(event(0))
	w.Emit(e)
	closeOK(t, w)
	got := sink.Events()
	if got[0].Time.Before(before) {
		t.Errorf("an event without a time got %v, want the time of Emit", got[0].Time)
	}
	if !got[1].Time.Equal(set) {
		t.Errorf("an event's own time became %v, want %v", got[1].Time, set)
	}
}

// stallSink blocks every write until released (or its ctx ends).
type stallSink struct {
	mem     metering.MemorySink
	entered chan struct{}
	release chan struct{}
}

func newStallSink() *stallSink {
	return &stallSink{entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (s *stallSink) InsertUsage(ctx context.Context, events []store.UsageEvent) error {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.mem.InsertUsage(ctx, events)
}

func TestEmitNeverBlocksOnAStalledSink(t *testing.T) {
	const (
		capacity   = 1000
		batch      = 100
		goroutines = 16
		perG       = 100_000 / goroutines
	)
	sink := newStallSink()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	w := metering.New(sink, metering.Options{Capacity: capacity, BatchSize: batch, FlushInterval: time.Hour,
		WriteTimeout: time.Hour, Metrics: m})
	start(t, w)

	var accepted []string
	for i := range batch {
		if !w.Emit(event(i)) {
			t.Fatalf("Emit %d refused", i)
		}
		accepted = append(accepted, event(i).RequestID)
	}
	<-sink.entered // Run is now stuck in the sink with a full batch

	// If Emit waited on the sink, this would never finish: the sink is
	// released only after every Emit has returned.
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		took atomic.Int64
	)
	for g := range goroutines {
		wg.Go(func() {
			var mine []string
			for i := range perG {
				e := event(batch + g*perG + i)
				if w.Emit(e) {
					mine = append(mine, e.RequestID)
				}
				took.Add(1)
			}
			mu.Lock()
			accepted = append(accepted, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if got := took.Load(); got != goroutines*perG {
		t.Fatalf("%d Emits returned, want %d", got, goroutines*perG)
	}
	if len(accepted) != capacity {
		t.Errorf("accepted %d events, want the capacity %d", len(accepted), capacity)
	}
	wantDropped := int64(batch + goroutines*perG - capacity)
	if w.Dropped() != wantDropped {
		t.Errorf("Dropped = %d, want %d", w.Dropped(), wantDropped)
	}
	if got := value(t, m.MeteringDropped); got != float64(wantDropped) {
		t.Errorf("dropped metric = %v, want %d", got, wantDropped)
	}
	if got := value(t, m.MeteringBuffered); got != capacity {
		t.Errorf("buffered metric = %v, want %d", got, capacity)
	}

	close(sink.release)
	closeOK(t, w)
	exactlyOnce(t, sink.mem.Events(), accepted)
	if w.Written() != capacity || value(t, m.MeteringWritten) != capacity {
		t.Errorf("Written = %d (metric %v), want %d", w.Written(), value(t, m.MeteringWritten), capacity)
	}
}

func TestDropsAreCountedExactly(t *testing.T) {
	tests := []struct {
		name                  string
		capacity, emit        int
		wantKept, wantDropped int
	}{
		{"under capacity", 50, 49, 49, 0},
		{"at capacity", 50, 50, 50, 0},
		{"over capacity", 50, 80, 50, 30},
		{"far over", 1, 1000, 1, 999},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := &metering.MemorySink{}
			m := metrics.New(prometheus.NewRegistry())
			w := metering.New(sink, metering.Options{Capacity: tt.capacity, Metrics: m}) // no Run: nothing drains
			var ids []string
			for i := range tt.emit {
				ok := w.Emit(event(i))
				if want := i < tt.capacity; ok != want {
					t.Fatalf("Emit %d = %v, want %v", i, ok, want)
				}
				if ok {
					ids = append(ids, event(i).RequestID)
				}
			}
			if w.Buffered() != tt.wantKept || w.Dropped() != int64(tt.wantDropped) {
				t.Errorf("buffered %d, dropped %d; want %d, %d", w.Buffered(), w.Dropped(), tt.wantKept, tt.wantDropped)
			}
			if got := value(t, m.MeteringDropped); got != float64(tt.wantDropped) {
				t.Errorf("dropped metric = %v, want %d", got, tt.wantDropped)
			}
			closeOK(t, w)
			exactlyOnce(t, sink.Events(), ids)
			if got := value(t, m.MeteringBuffered); got != 0 {
				t.Errorf("buffered metric = %v after Close, want 0", got)
			}
		})
	}
}

func TestSinkFailureThenRecovery(t *testing.T) {
	sink := &metering.MemorySink{}
	sink.Fail(errDown)
	m := metrics.New(prometheus.NewRegistry())
	w := metering.New(sink, metering.Options{Capacity: 100, BatchSize: 7, FlushInterval: 2 * time.Millisecond,
		RetryBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond, Metrics: m})
	start(t, w)

	var ids []string
	for i := range 130 {
		if w.Emit(event(i)) {
			ids = append(ids, event(i).RequestID)
		}
	}
	eventually(t, "the writer has retried", func() bool { return sink.Calls() >= 5 })
	if len(ids) != 100 || w.Dropped() != 30 {
		t.Errorf("accepted %d, dropped %d during the outage; want 100 (the capacity), 30 (the newest)", len(ids), w.Dropped())
	}
	if ids[len(ids)-1] != event(99).RequestID {
		t.Errorf("the last accepted event is %s, want %s: newer events are the ones dropped", ids[len(ids)-1], event(99).RequestID)
	}
	if w.Buffered() != 100 || w.Written() != 0 || sink.Len() != 0 {
		t.Errorf("buffered %d, written %d, sink %d during the outage; want 100, 0, 0", w.Buffered(), w.Written(), sink.Len())
	}
	if got := value(t, m.DependencyErrors.WithLabelValues("postgres", "insert_usage")); got < 5 {
		t.Errorf("dependency errors = %v, want every failed write counted", got)
	}

	sink.Fail(nil)
	eventually(t, "everything is written after recovery", func() bool { return w.Written() == 100 })
	exactlyOnce(t, sink.Events(), ids)
	if w.Buffered() != 0 {
		t.Errorf("Buffered = %d, want 0", w.Buffered())
	}
}

// flakySink fails every other call, and sometimes only after a delay, as
// a struggling database does.
type flakySink struct {
	mem   metering.MemorySink
	calls atomic.Int64
}

func (s *flakySink) InsertUsage(ctx context.Context, events []store.UsageEvent) error {
	if s.calls.Add(1)%2 == 1 {
		return errDown
	}
	return s.mem.InsertUsage(ctx, events)
}

func TestFlakySinkWritesEachEventOnce(t *testing.T) {
	sink := &flakySink{}
	w := metering.New(sink, metering.Options{Capacity: 100_000, BatchSize: 13, FlushInterval: time.Millisecond,
		RetryBackoff: time.Microsecond, MaxBackoff: time.Microsecond})
	start(t, w)
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		ids []string
	)
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				e := event(g*500 + i)
				if !w.Emit(e) {
					t.Errorf("Emit %s refused", e.RequestID)
				}
				mu.Lock()
				ids = append(ids, e.RequestID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	closeOK(t, w)
	exactlyOnce(t, sink.mem.Events(), ids)
	for i, b := range sink.mem.Batches() {
		if len(b) > 13 {
			t.Errorf("batch %d has %d events, more than BatchSize", i, len(b))
		}
	}
}

func TestClose(t *testing.T) {
	t.Run("flushes with Run", func(t *testing.T) {
		sink := &metering.MemorySink{}
		w := metering.New(sink, metering.Options{BatchSize: 10, FlushInterval: time.Hour})
		_, done := start(t, w)
		for i := range 25 {
			w.Emit(event(i))
		}
		closeOK(t, w)
		<-done // Close also ends Run
		if sink.Len() != 25 || w.Buffered() != 0 {
			t.Errorf("sink has %d, buffered %d; want 25, 0", sink.Len(), w.Buffered())
		}
		if w.Emit(event(99)) {
			t.Error("Emit after Close was accepted")
		}
		if w.Dropped() != 1 {
			t.Errorf("Dropped = %d, want 1: an event refused after Close is still counted", w.Dropped())
		}
		closeOK(t, w) // twice is fine
	})
	t.Run("flushes without Run", func(t *testing.T) {
		sink := &metering.MemorySink{}
		w := metering.New(sink, metering.Options{BatchSize: 5})
		for i := range 12 {
			w.Emit(event(i))
		}
		closeOK(t, w)
		if got, want := fmt.Sprint(batchSizes(sink.Batches())), "[5 5 2]"; got != want {
			t.Errorf("batch sizes %s, want %s", got, want)
		}
	})
	t.Run("empty", func(t *testing.T) {
		w := metering.New(&metering.MemorySink{}, metering.Options{})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := w.Close(ctx); err != nil {
			t.Errorf("Close of an empty writer with a done ctx = %v, want nil", err)
		}
	})
	t.Run("after Run's ctx ended", func(t *testing.T) {
		sink := &metering.MemorySink{}
		w := metering.New(sink, metering.Options{BatchSize: 100, FlushInterval: time.Hour})
		cancel, done := start(t, w)
		cancel()
		<-done
		for i := range 3 {
			w.Emit(event(i)) // requests still finishing after Run stopped
		}
		closeOK(t, w)
		if sink.Len() != 3 {
			t.Errorf("sink has %d events, want 3", sink.Len())
		}
	})
}

func TestCloseWithADeadSinkNamesTheCount(t *testing.T) {
	sink := &metering.MemorySink{}
	sink.Fail(errDown)
	w := metering.New(sink, metering.Options{BatchSize: 10, RetryBackoff: time.Millisecond})
	start(t, w)
	for i := range 42 {
		w.Emit(event(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := w.Close(ctx)
	var unwritten *metering.UnwrittenError
	if !errors.As(err, &unwritten) {
		t.Fatalf("Close = %v, want an *UnwrittenError", err)
	}
	if unwritten.Count != 42 || !strings.Contains(err.Error(), "42 usage events") {
		t.Errorf("Close = %q (count %d), want it to name 42 events", err, unwritten.Count)
	}
	if !errors.Is(err, errDown) {
		t.Errorf("Close = %v, want it to carry the sink's error", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want it to say the deadline passed", err)
	}
}

// Close while Run's write is in flight waits for it rather than sending the
// same batch again.
func TestCloseDuringAWriteDoesNotDuplicate(t *testing.T) {
	sink := newStallSink()
	w := metering.New(sink, metering.Options{BatchSize: 10, FlushInterval: time.Hour, WriteTimeout: time.Hour})
	start(t, w)
	var ids []string
	for i := range 15 {
		w.Emit(event(i))
		ids = append(ids, event(i).RequestID)
	}
	<-sink.entered
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		closed <- w.Close(ctx)
	}()
	next := 100
	eventually(t, "Close stops accepting", func() bool {
		e := event(next)
		next++
		if w.Emit(e) { // before Close got there: it must be written too
			ids = append(ids, e.RequestID)
			return false
		}
		return true
	})
	close(sink.release)
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	exactlyOnce(t, sink.mem.Events(), ids)
}

func TestRunWithoutMetricsOrLogger(t *testing.T) {
	// The zero Options work: nil Metrics and Logger are allowed.
	sink := &metering.MemorySink{}
	sink.Fail(errDown)
	w := metering.New(sink, metering.Options{Capacity: 1, FlushInterval: time.Millisecond, RetryBackoff: time.Millisecond})
	start(t, w)
	w.Emit(event(0))
	w.Emit(event(1))
	eventually(t, "a failed write", func() bool { return sink.Calls() > 0 })
	sink.Fail(nil)
	eventually(t, "the write", func() bool { return w.Written() == 1 })
	if w.Dropped() != 1 {
		t.Errorf("Dropped = %d, want 1", w.Dropped())
	}
}

// BenchmarkEmit is the cost a request pays to meter itself, with Run
// draining to a sink that keeps nothing.
func BenchmarkEmit(b *testing.B) {
	w := metering.New(discard{}, metering.Options{Capacity: 100_000, FlushInterval: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	e := event(1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w.Emit(e)
		}
	})
}

type discard struct{}

func (discard) InsertUsage(context.Context, []store.UsageEvent) error { return nil }
