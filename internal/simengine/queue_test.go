package simengine

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestFIFO queues requests for two models behind one slot, in a known arrival
// order, and checks that they complete in that order.
func TestFIFO(t *testing.T) {
	e, srv := newEngine(t, Config{Models: []string{"a", "b"}, Slots: 1, TTFT: hold})
	const n = 6
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	errs := make(chan error, n)
	for i := range n {
		model := []string{"a", "b"}[i%2]
		wg.Go(func() {
			resp, err := post(context.Background(), srv.URL+"/v1/chat/completions", chatBody(model, fmt.Sprint("request ", i), nil))
			if err != nil {
				errs <- err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("request %d: status %d", i, resp.StatusCode)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
		})
		// Send the next request only once this one is in, so that the
		// arrival order is known.
		if i == 0 {
			waitFor(t, "the first request to run", func() bool { return e.Running() == 1 })
		} else {
			waitFor(t, fmt.Sprintf("%d requests waiting", i), func() bool { return e.Waiting() == i })
		}
	}
	s := e.Stats()
	if s.Running != 1 || s.Waiting != n-1 || s.ByModel["a"].Running != 1 || s.ByModel["a"].Waiting != 2 ||
		s.ByModel["b"].Running != 0 || s.ByModel["b"].Waiting != 3 {
		t.Errorf("held: %+v", s)
	}
	// Each request now takes 100 ms from admission, so that a completion out
	// of order would need a client goroutine to lag its successor by that much.
	e.SetTTFT(100 * time.Millisecond)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if want := []int{0, 1, 2, 3, 4, 5}; !slices.Equal(order, want) {
		t.Errorf("completion order %v, want %v", order, want)
	}
}

func TestLiveCounts(t *testing.T) {
	tests := []struct {
		name        string
		slots       int
		requests    int
		wantRunning int
	}{
		{"limited", 2, 5, 2},
		{"unlimited", 0, 4, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, srv := newEngine(t, Config{Models: []string{"a", "b"}, Slots: tc.slots, TTFT: hold})
			var wg sync.WaitGroup
			for i := range tc.requests {
				wg.Go(func() {
					resp, err := post(context.Background(), srv.URL+"/v1/chat/completions", chatBody([]string{"a", "b"}[i%2], "hi", nil))
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				})
			}
			wantWaiting := tc.requests - tc.wantRunning
			waitFor(t, "requests to be held", func() bool {
				return e.Running() == tc.wantRunning && e.Waiting() == wantWaiting
			})
			s := e.Stats()
			var running, waiting int
			for _, m := range s.ByModel {
				running += m.Running
				waiting += m.Waiting
			}
			if running != tc.wantRunning || waiting != wantWaiting {
				t.Errorf("per-model counts sum to %d running, %d waiting: %+v", running, waiting, s.ByModel)
			}
			if tc.slots > 0 {
				// Raising the limit admits waiting requests at once.
				e.SetSlots(tc.slots + 1)
				waitFor(t, "one more to run", func() bool {
					return e.Running() == tc.wantRunning+1 && e.Waiting() == wantWaiting-1
				})
			}
			e.SetTTFT(0)
			wg.Wait()
			waitFor(t, "all to be served", func() bool { return e.Served() == int64(tc.requests) })
			if s := e.Stats(); s.Running != 0 || s.Waiting != 0 || s.ByModel["a"].Running != 0 || s.ByModel["b"].Waiting != 0 {
				t.Errorf("after: %+v", s)
			}
		})
	}
}

func TestDisconnectWhileWaiting(t *testing.T) {
	e, srv := newEngine(t, Config{Models: []string{"m"}, Slots: 1, TTFT: hold})
	results := make(chan string, 3)
	send := func(ctx context.Context, name string) {
		resp, err := post(ctx, srv.URL+"/v1/chat/completions", chatBody("m", name, nil))
		if err != nil {
			results <- name + ": error"
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		results <- fmt.Sprintf("%s: %d", name, resp.StatusCode)
	}
	go send(context.Background(), "first")
	waitFor(t, "the first request to run", func() bool { return e.Running() == 1 })

	ctx, cancel := context.WithCancel(context.Background())
	go send(ctx, "leaver")
	waitFor(t, "the leaver to wait", func() bool { return e.Waiting() == 1 })
	cancel()
	if got := <-results; got != "leaver: error" {
		t.Fatalf("got %q, want the leaver's error", got)
	}
	waitFor(t, "the leaver to leave the queue", func() bool { return e.Waiting() == 0 })
	if s := e.Stats(); s.Running != 1 || s.ByModel["m"].Waiting != 0 {
		t.Errorf("after leaving: %+v", s)
	}

	go send(context.Background(), "last")
	waitFor(t, "the last request to wait", func() bool { return e.Waiting() == 1 })
	e.SetTTFT(0)
	got := []string{<-results, <-results}
	slices.Sort(got)
	if !slices.Equal(got, []string{"first: 200", "last: 200"}) {
		t.Errorf("results %v", got)
	}
	if e.Served() != 2 {
		t.Errorf("served %d, want 2", e.Served())
	}
}

// TestQueueInvariants drives acquire and release directly, with waiters that
// give up at random moments, including the moment they are granted a slot,
// and checks that the limit is never exceeded and that nothing leaks.
func TestQueueInvariants(t *testing.T) {
	const slots = 3
	e := New(Config{Models: []string{"a", "b"}, Slots: slots}, nil)
	var inside, peak atomic.Int32
	var wg sync.WaitGroup
	for i := range 200 {
		model := []string{"a", "b"}[i%2]
		patience := time.Duration(rand.IntN(2000)) * time.Microsecond
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			if err := e.acquire(ctx, model); err != nil {
				return
			}
			n := inside.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(100 * time.Microsecond)
			inside.Add(-1)
			e.release(model)
		})
	}
	wg.Wait()
	if p := peak.Load(); p > slots {
		t.Errorf("%d requests ran at once with %d slots", p, slots)
	}
	s := e.Stats()
	if s.Running != 0 || s.Waiting != 0 {
		t.Errorf("leaked: %+v", s)
	}
	for m, c := range s.ByModel {
		if c.Running != 0 || c.Waiting != 0 {
			t.Errorf("model %s leaked: %+v", m, c)
		}
	}
}
