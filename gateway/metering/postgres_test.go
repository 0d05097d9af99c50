package metering_test

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/gateway/metering"
	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/gateway/store/postgres"
	"github.com/switchyard-ai/switchyard/internal/testenv"
)

func openPostgres(t *testing.T) *postgres.Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := postgres.New(ctx, testenv.Postgres(t), postgres.Options{})
	if err != nil {
		t.Fatalf("postgres.New: %v", err)
	}
	t.Cleanup(db.Close)
	if _, err := db.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return db
}

// outageSink fails its first calls, as a database that comes back would,
// then hands batches to the real store.
type outageSink struct {
	store.Store
	failures atomic.Int64
}

func (s *outageSink) InsertUsage(ctx context.Context, events []store.UsageEvent) error {
	if s.failures.Add(-1) >= 0 {
		return errDown
	}
	return s.Store.InsertUsage(ctx, events)
}

func TestPostgres(t *testing.T) {
	db := openPostgres(t)
	sink := &outageSink{Store: db}
	sink.failures.Store(3)
	w := metering.New(sink, metering.Options{BatchSize: 7, FlushInterval: 5 * time.Millisecond,
		RetryBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	start(t, w)

	type sum struct {
		requests, in, out int64
		cost              float64
	}
	want := map[[2]string]sum{}
	when := time.Now().UTC().Add(-time.Minute).Truncate(time.Microsecond)
	const n = 50
	for i := range n {
		e := store.UsageEvent{
			Time:         when,
			RequestID:    fmt.Sprintf("req-%03d", i),
			TenantID:     []string{"acme", "globex"}[i%2],
			KeyID:        "k1",
			Model:        []string{"gemma", "gpt-4o", "llama"}[i%3],
			Target:       "node:anna-mac",
			InputTokens:  int64(100 + i),
			OutputTokens: int64(i),
			CostUSD:      float64(i) / 1000,
			FallbackPath: []string{"gemma"},
			Status:       200,
			Attributes:   map[string]string{"team": "search"},
		}
		if !w.Emit(e) {
			t.Fatalf("Emit %d refused", i)
		}
		k := [2]string{e.TenantID, e.Model}
		s := want[k]
		s.requests++
		s.in += e.InputTokens
		s.out += e.OutputTokens
		s.cost += e.CostUSD
		want[k] = s
	}
	// Run writes part of it (through the outage); Close writes the rest.
	eventually(t, "the outage is over", func() bool { return sink.failures.Load() < 0 })
	closeOK(t, w)
	if w.Written() != n || w.Dropped() != 0 {
		t.Fatalf("written %d, dropped %d; want %d, 0", w.Written(), w.Dropped(), n)
	}

	ctx := context.Background()
	rows, err := db.QueryUsage(ctx, store.UsageQuery{})
	if err != nil {
		t.Fatalf("QueryUsage: %v", err)
	}
	if len(rows) != len(want) {
		t.Errorf("QueryUsage returned %d rows, want %d", len(rows), len(want))
	}
	for _, r := range rows {
		exp, ok := want[[2]string{r.TenantID, r.Model}]
		if !ok {
			t.Errorf("unexpected row %+v", r)
			continue
		}
		if r.Requests != exp.requests || r.InputTokens != exp.in || r.OutputTokens != exp.out || math.Abs(r.CostUSD-exp.cost) > 1e-9 {
			t.Errorf("row %s/%s = %+v, want %+v", r.TenantID, r.Model, r, exp)
		}
	}

	var rowsWritten, distinct int
	var firstTime time.Time
	err = db.Pool().QueryRow(ctx, `SELECT count(*), count(DISTINCT request_id), min(time) FROM usage_events`).
		Scan(&rowsWritten, &distinct, &firstTime)
	if err != nil {
		t.Fatal(err)
	}
	if rowsWritten != n || distinct != n {
		t.Errorf("usage_events has %d rows, %d request ids; want %d each (every event once)", rowsWritten, distinct, n)
	}
	if !firstTime.Equal(when) {
		t.Errorf("event time stored as %v, want %v", firstTime, when)
	}
}
