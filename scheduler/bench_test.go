package scheduler

import (
	"fmt"
	"testing"
	"time"
)

// benchPool is a pool of n routable nodes with varied load, speeds and
// engine queues, the way a busy cluster looks.
func benchPool(n int) []Candidate {
	pool := make([]Candidate, n)
	for i := range pool {
		pool[i] = Candidate{
			NodeID:           fmt.Sprintf("node-%05d", i),
			HasModel:         true,
			Warm:             i%5 != 0,
			ContextWindow:    32768,
			Slots:            8,
			Busy:             i % 8,
			BaseWeight:       float64(1 + i%3),
			EngineRunning:    i % 8,
			EngineWaiting:    i % 3,
			EngineQueueKnown: i%2 == 0,
			Speed:            Speed{TPS: float64(20 + i%50), TTFTPer1k: time.Duration(100+i%200) * time.Millisecond, Known: i%7 != 0},
		}
	}
	return pool
}

func benchRequest() Request {
	return Request{Model: model, InputTokens: 1500, MaxOutputTokens: 500, QueueTimeout: time.Hour}
}

func benchmarkPick(b *testing.B, n int) {
	pool := benchPool(n)
	req := benchRequest()
	p := NewPicker(Defaults{})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Pick(req, pool); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPick10(b *testing.B)    { benchmarkPick(b, 10) }
func BenchmarkPick100(b *testing.B)   { benchmarkPick(b, 100) }
func BenchmarkPick1000(b *testing.B)  { benchmarkPick(b, 1000) }
func BenchmarkPick10000(b *testing.B) { benchmarkPick(b, 10000) }
