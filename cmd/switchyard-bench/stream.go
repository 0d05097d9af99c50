package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// streamClient is an HTTP client for many concurrent streams: one
// connection per stream, kept alive, nothing pooled away.
func streamClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        20000,
		MaxIdleConnsPerHost: 20000,
		IdleConnTimeout:     30 * time.Second,
	}}
}

// streamTiming is what one client saw of one stream.
type streamTiming struct {
	Status int
	TTFT   time.Duration   // request sent → first data event
	Total  time.Duration   // request sent → [DONE] (or the end)
	Gaps   []time.Duration // between consecutive token events
	Done   bool            // [DONE] arrived
	Header http.Header
	Err    error
}

// readStream sends one streaming request and times its events: the first
// data event is the first token; gaps are measured between the first
// tokens events only (what follows the last token, the finish and usage
// chunks, is not paced by the engine). firstChunk, when set, is called as
// soon as the first event arrives; hold, when set, keeps the stream open
// after that until it is closed.
func readStream(ctx context.Context, c *http.Client, url string, header http.Header, body []byte, tokens int, firstChunk func(), hold <-chan struct{}) streamTiming {
	var t streamTiming
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Err = err
		return t
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Err = err
		return t
	}
	defer resp.Body.Close()
	t.Status, t.Header = resp.StatusCode, resp.Header
	if resp.StatusCode != http.StatusOK {
		t.Err = fmt.Errorf("HTTP %d", resp.StatusCode)
		return t
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	events := 0
	var last time.Time
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		now := time.Now()
		data = bytes.TrimSpace(data)
		if bytes.Equal(data, []byte("[DONE]")) {
			t.Done = true
			break
		}
		if bytes.Contains(data, []byte(`"error"`)) && !bytes.Contains(data, []byte(`"choices"`)) {
			t.Err = errors.New("error event")
			break
		}
		events++
		switch {
		case events == 1:
			t.TTFT = now.Sub(start)
			if firstChunk != nil {
				firstChunk()
			}
			if hold != nil {
				select {
				case <-hold:
				case <-ctx.Done():
				}
				return t
			}
		case events <= tokens:
			t.Gaps = append(t.Gaps, now.Sub(last))
		}
		last = now
	}
	t.Total = time.Since(start)
	if err := sc.Err(); err != nil && t.Err == nil {
		t.Err = err
	}
	if !t.Done && t.Err == nil {
		t.Err = errors.New("stream ended without [DONE]")
	}
	return t
}

// StreamRun is one arm's streams at a rate.
type StreamRun struct {
	Arm     string  `json:"arm"`
	Rep     int     `json:"rep"`
	Streams int     `json:"streams"`
	Errors  int     `json:"errors"`
	TTFT    Summary `json:"ttft"`
	Gap     Summary `json:"chunk_gap"`
	Total   Summary `json:"total"`
}

// StreamingResult compares time to first token and chunk gaps by arm.
type StreamingResult struct {
	EngineTTFTMS float64              `json:"engine_ttft_ms"`
	EngineTPS    float64              `json:"engine_tps"`
	Tokens       int                  `json:"tokens"`
	Rate         int                  `json:"rate"`
	Runs         []StreamRun          `json:"runs"`
	Arms         map[string]StreamArm `json:"arms"`
}

// StreamArm is an arm's medians over repetitions, and what it adds over
// direct (paired by repetition).
type StreamArm struct {
	TTFTP50MS      Spread `json:"ttft_p50_ms"`
	TTFTP99MS      Spread `json:"ttft_p99_ms"`
	AddedTTFTP50MS Spread `json:"added_ttft_p50_ms"`
	AddedTTFTP99MS Spread `json:"added_ttft_p99_ms"`
	GapP50MS       Spread `json:"gap_p50_ms"`
	GapP99MS       Spread `json:"gap_p99_ms"`
	AddedGapMeanMS Spread `json:"added_gap_mean_ms"`
	AddedGapP99MS  Spread `json:"added_gap_p99_ms"`
	Errors         int    `json:"errors"`
}

// streamLoad starts streams on a at rate for d, open loop, and waits for
// them all.
func streamLoad(ctx context.Context, c *http.Client, a arm, body []byte, tokens, rate int, d time.Duration) StreamRun {
	run := StreamRun{Arm: a.Name}
	var mu sync.Mutex
	var ttft, gaps, total []time.Duration
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(rate)
	n := int(d / interval)
	start := time.Now()
	for i := range n {
		if !sleepUntil(ctx, start.Add(time.Duration(i)*interval)) {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			t := readStream(rctx, c, a.URL, a.Header, body, tokens, nil, nil)
			mu.Lock()
			defer mu.Unlock()
			run.Streams++
			if t.Err != nil {
				run.Errors++
				return
			}
			ttft = append(ttft, t.TTFT)
			gaps = append(gaps, t.Gaps...)
			total = append(total, t.Total)
		}()
	}
	wg.Wait()
	run.TTFT, run.Gap, run.Total = Summarize(ttft), Summarize(gaps), Summarize(total)
	return run
}

// summarizeStreaming fills res.Arms from res.Runs.
func summarizeStreaming(res *StreamingResult) {
	byArm := map[string][]StreamRun{}
	for _, r := range res.Runs {
		byArm[r.Arm] = append(byArm[r.Arm], r)
	}
	get := func(runs []StreamRun, f func(StreamRun) float64) []float64 {
		out := make([]float64, len(runs))
		for i, r := range runs {
			out[i] = f(r)
			if r.TTFT.Count == 0 {
				out[i] = math.NaN()
			}
		}
		return out
	}
	ttft50 := func(r StreamRun) float64 { return r.TTFT.P50MS }
	ttft99 := func(r StreamRun) float64 { return r.TTFT.P99MS }
	gapMean := func(r StreamRun) float64 { return r.Gap.MeanMS }
	gap50 := func(r StreamRun) float64 { return r.Gap.P50MS }
	gap99 := func(r StreamRun) float64 { return r.Gap.P99MS }
	direct := byArm[ArmDirect]
	res.Arms = map[string]StreamArm{}
	for name, runs := range byArm {
		a := StreamArm{
			TTFTP50MS: SpreadOf(get(runs, ttft50)), TTFTP99MS: SpreadOf(get(runs, ttft99)),
			GapP50MS: SpreadOf(get(runs, gap50)), GapP99MS: SpreadOf(get(runs, gap99)),
			AddedTTFTP50MS: SpreadOf(Added(get(runs, ttft50), get(direct, ttft50))),
			AddedTTFTP99MS: SpreadOf(Added(get(runs, ttft99), get(direct, ttft99))),
			AddedGapMeanMS: SpreadOf(Added(get(runs, gapMean), get(direct, gapMean))),
			AddedGapP99MS:  SpreadOf(Added(get(runs, gap99), get(direct, gap99))),
		}
		for _, r := range runs {
			a.Errors += r.Errors
		}
		res.Arms[name] = a
	}
}

// HeapPoint is the gateway's memory with n streams held open.
type HeapPoint struct {
	Wanted int `json:"wanted"`
	Open   int `json:"open"` // streams that got their first chunk and were held
	Failed int `json:"failed"`
	// Live heap: what the garbage collector found live, after two
	// collections with and without the streams: go_gc_heap_live_bytes where
	// the gateway exports it, else gctrace's whole MiB.
	BaselineLiveMiB float64 `json:"baseline_live_heap_mib"`
	LiveMiB         float64 `json:"live_heap_mib"`
	LivePerStreamKB float64 `json:"live_heap_per_stream_kib"`
	LiveExact       bool    `json:"live_heap_exact,omitempty"` // from go_gc_heap_live_bytes
	// Heap in use (go_memstats_heap_inuse_bytes) read right after those
	// collections: live objects, garbage made since, and free space in
	// spans in use.
	BaselineInuseMiB float64 `json:"baseline_heap_inuse_mib"`
	InuseMiB         float64 `json:"heap_inuse_mib"`
	InusePerStreamKB float64 `json:"heap_inuse_per_stream_kib"`
	StackPerStreamKB float64 `json:"stack_per_stream_kib"` // goroutine stacks, not heap
	GoroutinesPer    float64 `json:"goroutines_per_stream"`
	RSSPerStreamKB   float64 `json:"rss_per_stream_kib"`
	OpenSeconds      float64 `json:"open_seconds"` // time to open them all
	FileLimit        uint64  `json:"file_limit"`
	Note             string  `json:"note,omitempty"`
}

// memory is the gateway's memory figures at one instant.
type memory struct {
	live       gcCycle
	liveBytes  float64 // go_gc_heap_live_bytes; 0 when not exported
	inuse      float64 // bytes
	stack      float64 // bytes
	goroutines float64
	rss        float64 // bytes
}

// gatewayMemory collects the gateway's garbage (two cycles, so that what
// the previous step left is gone) and reads its memory.
func gatewayMemory(ctx context.Context, gw *gateway) (memory, error) {
	var m memory
	var err error
	if m.live, err = gw.liveHeap(ctx, 2); err != nil {
		return m, err
	}
	raw, err := scrape(ctx, "http://"+gw.metrics+"/metrics")
	if err != nil {
		return m, err
	}
	for _, f := range []struct {
		name string
		into *float64
	}{{"go_memstats_heap_inuse_bytes", &m.inuse}, {"go_memstats_stack_inuse_bytes", &m.stack}, {"go_goroutines", &m.goroutines}} {
		if *f.into, err = metricValue(raw, f.name); err != nil {
			return m, err
		}
	}
	// Exact where the gateway exports it; gctrace rounds to whole MiB,
	// which is ±1 KiB per stream at 1 000 streams.
	m.liveBytes, _ = metricValue(raw, "go_gc_heap_live_bytes")
	s, err := sampleProc(gw.pid())
	if err != nil {
		return m, err
	}
	m.rss = float64(s.RSSBytes)
	return m, nil
}

// holdStreams opens n streams through the gateway against an engine that
// stalls every stream after its first chunk, measures the gateway's memory
// with them all open, then lets them go.
func holdStreams(ctx context.Context, gw *gateway, a arm, body []byte, n int, fileLimit uint64, verbose func(string, ...any)) (HeapPoint, error) {
	p := HeapPoint{Wanted: n, FileLimit: fileLimit}
	// Let the previous step's connections and goroutines wind down.
	time.Sleep(3 * time.Second)
	base, err := gatewayMemory(ctx, gw)
	if err != nil {
		return p, err
	}
	c := streamClient()
	defer c.CloseIdleConnections()
	hold := make(chan struct{})
	var opened, failed atomic.Int64
	var wg sync.WaitGroup
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var errMu sync.Mutex
	errs := map[string]int{}
	start := time.Now()
	// Opened at a steady pace, as clients arrive, rather than all in one
	// instant, which would measure the accept queue instead.
	const openRate = 2000
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * time.Second / openRate)); wait > 0 {
			time.Sleep(wait)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := readStream(hctx, c, a.URL, a.Header, body, 1, func() { opened.Add(1) }, hold)
			if t.TTFT == 0 {
				failed.Add(1)
				errMu.Lock()
				if t.Err != nil {
					errs[shortError(t.Err)]++
				}
				errMu.Unlock()
			}
		}()
	}
	deadline := time.Now().Add(60 * time.Second)
	for opened.Load()+failed.Load() < int64(n) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	p.OpenSeconds = time.Since(start).Seconds()
	loaded, err := gatewayMemory(ctx, gw)
	p.Open, p.Failed = int(opened.Load()), int(failed.Load())
	close(hold)
	cancel()
	wg.Wait()
	if len(errs) > 0 {
		p.Note = "failures: " + describeCounts(errs)
	}
	if err != nil {
		return p, err
	}
	p.BaselineLiveMiB, p.LiveMiB = base.live.LiveMiB, loaded.live.LiveMiB
	if base.liveBytes > 0 && loaded.liveBytes > 0 {
		p.BaselineLiveMiB, p.LiveMiB, p.LiveExact = base.liveBytes/(1<<20), loaded.liveBytes/(1<<20), true
	}
	p.BaselineInuseMiB, p.InuseMiB = base.inuse/(1<<20), loaded.inuse/(1<<20)
	if p.Open > 0 {
		k := float64(p.Open)
		p.LivePerStreamKB = (loaded.live.LiveMiB - base.live.LiveMiB) * 1024 / k
		p.InusePerStreamKB = (loaded.inuse - base.inuse) / 1024 / k
		p.StackPerStreamKB = (loaded.stack - base.stack) / 1024 / k
		p.GoroutinesPer = (loaded.goroutines - base.goroutines) / k
		p.RSSPerStreamKB = (loaded.rss - base.rss) / 1024 / k
	}
	verbose("heap: %d streams wanted, %d open, %d failed: %.1f KiB live heap, %.1f KiB heap in use, %.1f KiB stack, %.1f goroutines per stream",
		n, p.Open, p.Failed, p.LivePerStreamKB, p.InusePerStreamKB, p.StackPerStreamKB, p.GoroutinesPer)
	return p, nil
}

// shortError names an error briefly, without the addresses that make each
// message unique, so that errors can be counted by kind.
func shortError(err error) string {
	e := err.Error()
	for _, k := range []string{"timeout", "connection refused", "connection reset", "too many open files", "EOF", "broken pipe", "cannot assign requested address", "HTTP "} {
		if i := strings.Index(e, k); i >= 0 {
			if k == "HTTP " {
				return e[i:]
			}
			return k
		}
	}
	if len(e) > 60 {
		e = e[:60]
	}
	return e
}

func describeCounts(m map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%d × %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}

// streamsThatFit is how many streams the file limit allows: the gateway
// holds two descriptors per stream (client and upstream), plus its own.
func streamsThatFit(limit uint64) int {
	const reserve = 1000
	if limit <= 2*reserve {
		return 0
	}
	return int((limit - reserve) / 2)
}

// sleepUntil waits for t, the next arrival of an open-loop schedule; false
// when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	if wait := time.Until(t); wait > 0 {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
	}
	return ctx.Err() == nil
}
