package upstream

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// switchable answers with the status in code; 0 makes it wait for release
// first and then answer 200.
type switchable struct {
	code    atomic.Int64
	header  http.Header
	arrived chan struct{}
	release chan struct{}
}

func (s *switchable) handler(w http.ResponseWriter, r *http.Request) {
	code := int(s.code.Load())
	if code == 0 {
		s.arrived <- struct{}{}
		<-s.release
		code = 200
	}
	for k, v := range s.header {
		w.Header()[k] = v
	}
	w.WriteHeader(code)
	io.WriteString(w, `{}`)
}

type pauseLog struct {
	mu     sync.Mutex
	vendor []string
	until  []time.Time
}

func (p *pauseLog) record(v string, u time.Time) {
	p.mu.Lock()
	p.vendor, p.until = append(p.vendor, v), append(p.until, u)
	p.mu.Unlock()
}

func (p *pauseLog) calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.vendor)
}

func send(c *Client, tgt Target) error {
	resp, err := c.Send(context.Background(), tgt, "/chat/completions", []byte(`{}`), nil)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

func TestBreakerPausesAfterConsecutiveFailuresAndProbesOnce(t *testing.T) {
	up := &switchable{arrived: make(chan struct{}), release: make(chan struct{})}
	up.code.Store(500)
	s := newServer(t, up.handler)
	clock := newFakeClock()
	var pauses pauseLog
	c := newTestClient(Options{Now: clock.Now, OnPause: pauses.record})
	tgt := vendorAt(s)

	for i := range 5 {
		asError(t, send(c, tgt), Status5xx)
		if i < 4 && !c.PausedUntil("acme").IsZero() {
			t.Fatalf("paused after %d failures", i+1)
		}
	}
	want := clock.Now().Add(30 * time.Second)
	if got := c.PausedUntil("acme"); !got.Equal(want) {
		t.Fatalf("PausedUntil = %v, want %v", got, want)
	}
	if pauses.calls() != 1 || pauses.vendor[0] != "acme" || !pauses.until[0].Equal(want) {
		t.Errorf("OnPause calls = %v %v", pauses.vendor, pauses.until)
	}

	// While paused nothing reaches the vendor.
	e := asError(t, send(c, tgt), Paused)
	if !e.Retryable() || e.RetryAfter != 30*time.Second {
		t.Errorf("paused error: Retryable %v RetryAfter %s", e.Retryable(), e.RetryAfter)
	}
	if n := s.hits.Load(); n != 5 {
		t.Fatalf("upstream saw %d requests, want 5", n)
	}
	clock.Advance(29 * time.Second)
	asError(t, send(c, tgt), Paused)

	// After the pause exactly one probe goes through; the others are
	// refused until its outcome is known.
	clock.Advance(2 * time.Second)
	if !c.PausedUntil("acme").IsZero() {
		t.Error("still reported paused after the pause")
	}
	up.code.Store(0) // the probe waits for release, then succeeds
	probe := make(chan error, 1)
	go func() { probe <- send(c, tgt) }()
	waitFor(t, up.arrived, 5*time.Second, "the probe")
	for range 3 {
		asError(t, send(c, tgt), Paused)
	}
	if n := s.hits.Load(); n != 6 {
		t.Fatalf("upstream saw %d requests during the probe, want 6", n)
	}
	up.release <- struct{}{}
	if err := <-probe; err != nil {
		t.Fatalf("probe: %v", err)
	}

	// The probe's success closed the breaker.
	up.code.Store(200)
	for range 3 {
		if err := send(c, tgt); err != nil {
			t.Fatalf("after a successful probe: %v", err)
		}
	}
	if n := s.hits.Load(); n != 9 {
		t.Errorf("upstream saw %d requests, want 9", n)
	}
}

func TestBreakerFailedProbePausesAgain(t *testing.T) {
	up := &switchable{}
	up.code.Store(502)
	s := newServer(t, up.handler)
	clock := newFakeClock()
	var pauses pauseLog
	c := newTestClient(Options{Now: clock.Now, OnPause: pauses.record})
	tgt := vendorAt(s)
	for range 5 {
		send(c, tgt)
	}
	clock.Advance(31 * time.Second)
	asError(t, send(c, tgt), Status5xx) // the probe
	if want := clock.Now().Add(30 * time.Second); !c.PausedUntil("acme").Equal(want) {
		t.Errorf("PausedUntil = %v, want %v", c.PausedUntil("acme"), want)
	}
	asError(t, send(c, tgt), Paused)
	if s.hits.Load() != 6 || pauses.calls() != 2 {
		t.Errorf("hits = %d, pauses = %d; want 6, 2", s.hits.Load(), pauses.calls())
	}
}

func TestBreakerHonoursLongerRetryAfter(t *testing.T) {
	tests := []struct {
		name  string
		retry string
		pause time.Duration
	}{
		{name: "longer wins", retry: "120", pause: 120 * time.Second},
		{name: "shorter ignored", retry: "3", pause: 30 * time.Second},
		{name: "absurd capped", retry: "99999999", pause: time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := &switchable{header: http.Header{"Retry-After": {tt.retry}}}
			up.code.Store(429)
			s := newServer(t, up.handler)
			clock := newFakeClock()
			c := newTestClient(Options{Now: clock.Now})
			for range 5 {
				asError(t, send(c, vendorAt(s)), RateLimited)
			}
			if want := clock.Now().Add(tt.pause); !c.PausedUntil("acme").Equal(want) {
				t.Errorf("PausedUntil = %v, want %v", c.PausedUntil("acme"), want)
			}
		})
	}
}

func TestBreakerCounting(t *testing.T) {
	tests := []struct {
		name   string
		codes  []int // 0 = the caller cancels
		paused bool
	}{
		{name: "five failures", codes: []int{500, 503, 429, 401, 502}, paused: true},
		{name: "four failures", codes: []int{500, 500, 500, 500}},
		{name: "success resets the run", codes: []int{500, 500, 500, 500, 200, 500, 500, 500, 500}},
		{name: "bad requests neither count nor reset", codes: []int{500, 500, 400, 404, 500, 422, 500, 400, 500}, paused: true},
		{name: "bad requests alone", codes: []int{400, 400, 400, 400, 400, 400}},
		{name: "cancels neither count nor reset", codes: []int{500, 500, 0, 500, 0, 500, 500}, paused: true},
		{name: "redirects count", codes: []int{302, 302, 302, 302, 302}, paused: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := &switchable{}
			s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				if up.code.Load() == 0 {
					<-r.Context().Done()
					return
				}
				up.handler(w, r)
			})
			c := newTestClient(Options{Now: newFakeClock().Now})
			for _, code := range tt.codes {
				up.code.Store(int64(code))
				if code != 0 {
					send(c, vendorAt(s))
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				_, err := c.Send(ctx, vendorAt(s), "/chat/completions", []byte(`{}`), nil)
				cancel()
				asError(t, err, Canceled)
			}
			if got := !c.PausedUntil("acme").IsZero(); got != tt.paused {
				t.Errorf("paused = %v, want %v", got, tt.paused)
			}
		})
	}
}

func TestBreakerCountsTransportFailures(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	c := newTestClient(Options{Now: newFakeClock().Now, BreakerFailures: 2})
	tgt := vendorAt(s)
	tgt.FirstByteTimeout = 20 * time.Millisecond
	asError(t, send(c, tgt), Timeout)
	asError(t, send(c, tgt), Timeout)
	asError(t, send(c, tgt), Paused)
}

func TestBreakerIsPerVendorAndNodesHaveNone(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) })
	c := newTestClient(Options{Now: newFakeClock().Now, NodeNetworks: loopbackOnly()})
	a, b := vendorAt(s), vendorAt(s)
	b.ID = "other"
	node := Target{Kind: TargetNode, ID: "anna-mac", BaseURL: s.URL + "/v1", APIKey: testKey}
	for range 5 {
		send(c, a)
	}
	asError(t, send(c, a), Paused)
	asError(t, send(c, b), Status5xx)
	for range 10 {
		asError(t, send(c, node), Status5xx)
	}
	if got := c.PausedUntil("anna-mac"); !got.IsZero() {
		t.Errorf("a node has a pause: %v", got)
	}
	if n := s.hits.Load(); n != 16 {
		t.Errorf("upstream saw %d requests, want 16", n)
	}
}

func TestBreakerRealClockShortPause(t *testing.T) {
	up := &switchable{}
	up.code.Store(500)
	s := newServer(t, up.handler)
	c := newTestClient(Options{BreakerPause: 100 * time.Millisecond})
	tgt := vendorAt(s)
	for range 5 {
		send(c, tgt)
	}
	asError(t, send(c, tgt), Paused)
	time.Sleep(150 * time.Millisecond)
	up.code.Store(200)
	if err := send(c, tgt); err != nil {
		t.Fatalf("probe after the pause: %v", err)
	}
	if err := send(c, tgt); err != nil {
		t.Fatalf("after the probe: %v", err)
	}
}

func TestResetVendor(t *testing.T) {
	up := &switchable{}
	up.code.Store(401)
	s := newServer(t, up.handler)
	c := newTestClient(Options{Now: newFakeClock().Now})
	for range 5 {
		send(c, vendorAt(s))
	}
	asError(t, send(c, vendorAt(s)), Paused)
	c.ResetVendor("acme") // e.g. after SetVendorKey
	up.code.Store(200)
	if err := send(c, vendorAt(s)); err != nil {
		t.Fatal(err)
	}
}
