// Package metering writes usage events (SPEC §6) to the store in batches,
// from a bounded buffer that requests never wait on.
//
// A request hands its event to Emit and moves on: Emit only appends to a
// buffer under a mutex that no I/O ever holds, and drops the event (counted)
// when the buffer is full. Run writes the buffer out in batches. When the
// store fails — Postgres down — the events stay in the buffer and Run retries
// with backoff, so an outage shorter than the buffer loses nothing, and a
// longer one drops only what arrives once the buffer is full, each drop
// counted in switchyard_metering_dropped_total. Close stops accepting and
// flushes what is left, for shutdown (SPEC §10).
//
// Only one write is in flight at a time (Run's or Close's), and a batch
// leaves the buffer only after the sink accepted it, so an accepted event is
// written once, unless the sink reports a failure for a batch it in fact
// committed.
package metering

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-ai/switchyard/gateway/metrics"
	"github.com/switchyard-ai/switchyard/gateway/store"
)

// Sink is where batches go; the store implements it. InsertUsage must be
// all or nothing (a failed batch is sent again), must honour ctx, and must
// neither keep nor change the slice.
type Sink interface {
	InsertUsage(ctx context.Context, events []store.UsageEvent) error
}

var _ Sink = store.Store(nil)

// Defaults of Options.
const (
	DefaultCapacity      = 10_000
	DefaultBatchSize     = 500
	DefaultFlushInterval = time.Second
	DefaultRetryBackoff  = 500 * time.Millisecond
	DefaultMaxBackoff    = 30 * time.Second
	DefaultWriteTimeout  = 10 * time.Second
)

// Options configures a Writer. The zero value takes every default.
type Options struct {
	// Capacity is how many events the buffer holds, counting those being
	// written (default DefaultCapacity). It bounds memory and how long an
	// outage can last before events are dropped.
	Capacity int
	// BatchSize is the most events one InsertUsage gets (default
	// DefaultBatchSize); a full batch is written without waiting for the
	// interval.
	BatchSize int
	// FlushInterval is the longest an event waits in the buffer while the
	// sink works (default DefaultFlushInterval).
	FlushInterval time.Duration
	// RetryBackoff is the first wait after a failed write (default
	// DefaultRetryBackoff); it doubles on each failure in a row, up to
	// MaxBackoff, with jitter so that replicas do not retry in step.
	RetryBackoff time.Duration
	// MaxBackoff caps the wait between retries (default DefaultMaxBackoff).
	MaxBackoff time.Duration
	// WriteTimeout bounds one InsertUsage made by Run (default
	// DefaultWriteTimeout), so that a hung database is a failed write that
	// is retried, not a writer stuck for good.
	WriteTimeout time.Duration
	// Logger receives write failures and drops; nil discards.
	Logger *slog.Logger
	// Metrics, when set, receives the buffered, written and dropped counts.
	Metrics *metrics.Metrics
}

// Writer is the bounded, batched usage-event writer. Make it with New, start
// Run in a goroutine, and call Close at shutdown.
type Writer struct {
	sink Sink
	opt  Options
	log  *slog.Logger
	met  *metrics.Metrics // nil: no metrics

	mu     sync.Mutex
	buf    []store.UsageEvent // oldest first; only the writer removes from the front
	closed bool

	// writing is held (a token in the channel) by whoever calls the sink, so
	// Run and Close never send the same events twice; a channel rather than
	// a mutex so that Close can give up on it when its ctx ends.
	writing chan struct{}
	batch   []store.UsageEvent // what write hands the sink; used only by the holder of writing
	full    chan struct{}      // a full batch is waiting; capacity 1, sent without blocking
	stop    chan struct{}      // closed by Close: Run returns and leaves the rest to Close
	once    sync.Once

	dropped atomic.Int64
	written atomic.Int64
}

// New makes a Writer that writes to sink.
func New(sink Sink, o Options) *Writer {
	if o.Capacity <= 0 {
		o.Capacity = DefaultCapacity
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	o.BatchSize = min(o.BatchSize, o.Capacity)
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = DefaultRetryBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	o.MaxBackoff = max(o.MaxBackoff, o.RetryBackoff)
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Writer{
		sink:    sink,
		opt:     o,
		log:     log,
		met:     o.Metrics,
		writing: make(chan struct{}, 1),
		full:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
	}
}

// Emit hands an event to the writer and never blocks on I/O. It returns
// false, and counts a drop, when the buffer is full or the writer is
// closed. An event without a time gets the current one here, so that a
// retried batch keeps the time of the call rather than of the write. The
// event's slice and map belong to the writer from here on: the sink reads
// them later, from another goroutine.
func (w *Writer) Emit(e store.UsageEvent) bool {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	w.mu.Lock()
	if w.closed || len(w.buf) >= w.opt.Capacity {
		w.mu.Unlock()
		w.drop(1)
		return false
	}
	w.buf = append(w.buf, e)
	n := len(w.buf)
	w.setBuffered(n)
	w.mu.Unlock()
	if n >= w.opt.BatchSize {
		select {
		case w.full <- struct{}{}:
		default: // Run has been told already
		}
	}
	return true
}

// Buffered is how many accepted events are not written yet.
func (w *Writer) Buffered() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.buf)
}

// Dropped is how many events Emit refused.
func (w *Writer) Dropped() int64 { return w.dropped.Load() }

// Written is how many events the sink accepted.
func (w *Writer) Written() int64 { return w.written.Load() }

// Run writes batches until ctx ends or Close is called: a full batch at
// once, everything buffered each FlushInterval, with backoff while the sink
// fails. It does not flush on the way out, so events accepted after its ctx
// ends wait in the buffer for Close; run it on a context that lasts until
// the servers that emit have stopped, then call Close.
func (w *Writer) Run(ctx context.Context) {
	tick := time.NewTicker(w.opt.FlushInterval)
	defer tick.Stop()
	var (
		failures     int
		lastDropped  int64
		onlyFullOnes bool
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.stop:
			return
		case <-w.full:
			onlyFullOnes = true
		case <-tick.C:
			onlyFullOnes = false
		}
		for {
			n, err := w.writeBatch(ctx, onlyFullOnes)
			if err != nil {
				if ctx.Err() != nil || errors.Is(err, errStopped) {
					return
				}
				failures++
				wait := w.backoff(failures)
				w.log.Warn("metering: writing usage events failed; keeping them buffered",
					"err", err, "buffered", w.Buffered(), "dropped_total", w.Dropped(), "failures", failures, "retry_in", wait)
				// Close takes over from here: it does not wait out Run's
				// backoff.
				if !sleep(ctx, w.stop, wait) {
					return
				}
				continue
			}
			if failures > 0 && n > 0 {
				w.log.Info("metering: writing usage events again", "after_failures", failures)
				failures = 0
			}
			if n == 0 {
				break
			}
		}
		if d := w.dropped.Load(); d > lastDropped {
			// Once per round rather than per drop: a full buffer drops at
			// request rate.
			w.log.Warn("metering: usage events dropped, the buffer was full",
				"dropped", d-lastDropped, "dropped_total", d, "capacity", w.opt.Capacity)
			lastDropped = d
		}
	}
}

// errStopped says Close took over while Run waited to write.
var errStopped = errors.New("metering: writer closed")

// writeBatch writes the oldest batch, if there is one to write (a full one
// when fullOnly), and returns how many events it wrote.
func (w *Writer) writeBatch(ctx context.Context, fullOnly bool) (int, error) {
	select {
	case w.writing <- struct{}{}:
	case <-w.stop:
		return 0, errStopped
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-w.writing }()
	ctx, cancel := context.WithTimeout(ctx, w.opt.WriteTimeout)
	defer cancel()
	return w.write(ctx, fullOnly)
}

// write sends the oldest batch to the sink and, once it is accepted,
// removes it from the buffer. The caller holds w.writing: nobody else
// removes events, so the front of the buffer stays put while the sink runs,
// even as Emit appends behind it.
func (w *Writer) write(ctx context.Context, fullOnly bool) (int, error) {
	w.mu.Lock()
	n := min(len(w.buf), w.opt.BatchSize)
	if n == 0 || fullOnly && n < w.opt.BatchSize {
		w.mu.Unlock()
		return 0, nil
	}
	// A copy, because Emit's append may move the buffer while the sink
	// reads; into one array kept for the purpose, as writes never overlap.
	batch := append(w.batch[:0], w.buf[:n]...)
	w.batch = batch
	w.mu.Unlock()
	defer clear(batch)

	if err := w.sink.InsertUsage(ctx, batch); err != nil {
		// A cancelled write is the owner shutting down, not the store
		// failing; a timed-out one is the store.
		if w.met != nil && !errors.Is(err, context.Canceled) {
			w.met.DependencyErrors.WithLabelValues("postgres", "insert_usage").Inc()
		}
		return 0, err
	}

	w.mu.Lock()
	// Dropping the front rather than copying the rest down keeps this O(n)
	// under the lock Emit waits on; append moves the buffer to a new array
	// once it reaches the end of this one, so memory follows what is
	// buffered. Clearing lets the written events' strings and maps go now.
	clear(w.buf[:n])
	w.buf = w.buf[n:]
	w.setBuffered(len(w.buf))
	w.mu.Unlock()
	w.written.Add(int64(n))
	if w.met != nil {
		w.met.MeteringWritten.Add(float64(n))
	}
	return n, nil
}

// Close stops accepting events and writes out the buffer, retrying with
// backoff until it is empty or ctx ends; then it returns an *UnwrittenError
// saying how many events were not written. It waits for a write Run has in
// flight rather than racing it. Calling it again, or without Run, is fine.
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.once.Do(func() { close(w.stop) })

	select {
	case w.writing <- struct{}{}:
	case <-ctx.Done():
		// Run's write in flight, if any, may still land; what is buffered
		// now is what Close could not see written.
		if n := w.Buffered(); n > 0 {
			return &UnwrittenError{Count: n, Err: ctx.Err()}
		}
		return nil
	}
	defer func() { <-w.writing }()

	for failures := 0; ; {
		n, err := w.write(ctx, false)
		switch {
		case err == nil && n == 0:
			return nil
		case err == nil:
			continue
		}
		failures++
		if ctx.Err() == nil && sleep(ctx, nil, w.backoff(failures)) {
			continue
		}
		if ctxErr := ctx.Err(); !errors.Is(err, ctxErr) {
			err = fmt.Errorf("%w (%w)", err, ctxErr)
		}
		return &UnwrittenError{Count: w.Buffered(), Err: err}
	}
}

// UnwrittenError is Close's report of the events it could not write.
type UnwrittenError struct {
	Count int   // events still buffered: not written, though a later Close may retry them
	Err   error // the last sink error, and the context's when it ended
}

func (e *UnwrittenError) Error() string {
	return fmt.Sprintf("metering: %d usage events could not be written: %v", e.Count, e.Err)
}

func (e *UnwrittenError) Unwrap() error { return e.Err }

func (w *Writer) drop(n int) {
	w.dropped.Add(int64(n))
	if w.met != nil {
		w.met.MeteringDropped.Add(float64(n))
	}
}

func (w *Writer) setBuffered(n int) {
	if w.met != nil {
		w.met.MeteringBuffered.Set(float64(n))
	}
}

// backoff is the wait after the given number of failures in a row:
// RetryBackoff doubled each time up to MaxBackoff, then ±20% jitter.
func (w *Writer) backoff(failures int) time.Duration {
	d := w.opt.RetryBackoff
	for i := 1; i < failures && d < w.opt.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, w.opt.MaxBackoff)
	return d - d/5 + rand.N(2*d/5+1)
}

// sleep waits d and reports whether it did: it gives up when ctx ends or
// stop is closed (nil: never).
func sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	}
}
