package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// gcTrace matches the line GODEBUG=gctrace=1 prints per collection:
//
//	gc 12 @3.201s 1%: 0.018+1.2+0.003 ms clock, …, 40->41->20 MB, 42 MB goal, 1 MB stacks, 0 MB globals, 2 P
//
// where the third heap figure is what the collection found live.
var gcTrace = regexp.MustCompile(`^gc (\d+) @[0-9.]+s .*? (\d+)->(\d+)->(\d+) MB, (\d+) MB goal, (\d+) MB stacks`)

// gcCycle is one collection as gctrace reports it, in MiB.
type gcCycle struct {
	N       int
	LiveMiB float64
	GoalMiB float64
	Stacks  float64
}

func parseGCTrace(line string) (gcCycle, bool) {
	m := gcTrace.FindStringSubmatch(line)
	if m == nil {
		return gcCycle{}, false
	}
	n, _ := strconv.Atoi(m[1])
	live, _ := strconv.ParseFloat(m[4], 64)
	goal, _ := strconv.ParseFloat(m[5], 64)
	stacks, _ := strconv.ParseFloat(m[6], 64)
	return gcCycle{N: n, LiveMiB: live, GoalMiB: goal, Stacks: stacks}, true
}

// gcWatch follows a process's gctrace lines.
type gcWatch struct {
	mu     sync.Mutex
	cycles int
	last   gcCycle
}

func (w *gcWatch) observe(line string) {
	if !strings.HasPrefix(line, "gc ") {
		return
	}
	if c, ok := parseGCTrace(line); ok {
		w.mu.Lock()
		w.cycles++
		w.last = c
		w.mu.Unlock()
	}
}

func (w *gcWatch) state() (int, gcCycle) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cycles, w.last
}

// liveHeap makes the gateway collect its garbage and reports what the
// last collection found live. The gateway offers no way to ask for a
// collection, so the bench provokes them: it sends requests with a large
// body for a model that does not exist, one at a time (so that at most one
// such request is live when the collector marks), until cycles more
// collections have run.
func (g *gateway) liveHeap(ctx context.Context, cycles int) (gcCycle, error) {
	start, _ := g.gc.state()
	body := churnBody()
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, last := g.gc.state()
		if n >= start+cycles {
			return last, nil
		}
		if time.Now().After(deadline) {
			return last, fmt.Errorf("the gateway ran %d garbage collections in 60 s, not %d (is GODEBUG=gctrace=1 reaching it?)", n-start, cycles)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+g.http+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+g.client)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return last, err
		}
		resp.Body.Close()
	}
}

// churnBody is a 256 KiB chat request for a model nobody registered: the
// gateway reads and parses it, then answers 404, leaving it all garbage.
func churnBody() []byte {
	return []byte(`{"model":"bench-no-such-model","messages":[{"role":"user","content":"` + strings.Repeat("x", 256<<10) + `"}]}`)
}
