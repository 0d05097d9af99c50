package scheduler

import (
	"math"
	"sync"
	"time"
)

const (
	// SpeedAlpha is the weight of a new sample in the speed EWMAs: about
	// the last ten requests count, so a node that slows down is noticed
	// within a few requests while one odd reply moves little.
	SpeedAlpha = 0.2
	// MinTPSTokens is the fewest output tokens a TPS sample needs.
	MinTPSTokens = 4
)

// SpeedBook holds the gateway's measured speeds per (node, model). It is
// safe for concurrent use, and its zero value is ready.
type SpeedBook struct {
	mu    sync.RWMutex
	books map[speedKey]speedEntry
}

type speedKey struct{ node, model string }

type speedEntry struct {
	tps     float64 // tokens per second
	ttft    float64 // nanoseconds per 1000 input tokens
	hasTPS  bool
	hasTTFT bool
}

// Observe records one proxied response: outputTokens produced over
// genDuration (first token to last), and a first token that came ttft
// after a prompt of inputTokens. A figure without enough to measure is
// skipped on its own — a one-token answer still teaches TTFT.
func (b *SpeedBook) Observe(node, model string, outputTokens int, genDuration time.Duration, inputTokens int, ttft time.Duration) {
	var tps, per1k float64
	okTPS := outputTokens >= MinTPSTokens && genDuration > 0
	if okTPS {
		tps = float64(outputTokens) / genDuration.Seconds()
		okTPS = !math.IsInf(tps, 0) && !math.IsNaN(tps)
	}
	okTTFT := inputTokens >= 1 && ttft > 0
	if okTTFT {
		per1k = float64(ttft) * 1000 / float64(max(inputTokens, TTFTTokenFloor))
	}
	if !okTPS && !okTTFT {
		return
	}

	k := speedKey{node, model}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.books == nil {
		b.books = make(map[speedKey]speedEntry)
	}
	e := b.books[k]
	if okTPS {
		e.tps, e.hasTPS = ewma(e.tps, tps, e.hasTPS), true
	}
	if okTTFT {
		e.ttft, e.hasTTFT = ewma(e.ttft, per1k, e.hasTTFT), true
	}
	b.books[k] = e
}

func ewma(old, sample float64, has bool) float64 {
	if !has {
		return sample
	}
	return old + SpeedAlpha*(sample-old)
}

// Get returns the speed measured for model on node; Known is false until
// a first usable sample.
func (b *SpeedBook) Get(node, model string) Speed {
	b.mu.RLock()
	e, ok := b.books[speedKey{node, model}]
	b.mu.RUnlock()
	if !ok {
		return Speed{}
	}
	return Speed{TPS: e.tps, TTFTPer1k: time.Duration(e.ttft), Known: e.hasTPS || e.hasTTFT}
}

// Forget drops every speed measured on node, for a node that was removed
// or whose hardware changed.
func (b *SpeedBook) Forget(node string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.books {
		if k.node == node {
			delete(b.books, k)
		}
	}
}
