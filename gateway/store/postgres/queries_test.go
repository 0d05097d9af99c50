package postgres_test

import (
	"context"
	"flag"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/gateway/store/postgres"
	"github.com/switchyard-ai/switchyard/gateway/store/storetest"
	"github.com/switchyard-ai/switchyard/internal/testenv"
)

var updateQueries = flag.Bool("update-queries", false, "rewrite testdata/queries.sql from the queries the store sends")

// queryRecorder keeps every distinct statement the store sends.
type queryRecorder struct {
	mu   sync.Mutex
	seen map[string]bool
}

var space = regexp.MustCompile(`\s+`)

func (r *queryRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	q := strings.TrimSpace(space.ReplaceAllString(d.SQL, " "))
	// Transaction control and LISTEN are not the schema's business.
	switch up := strings.ToUpper(q); {
	case up == "", strings.HasPrefix(up, "BEGIN"), strings.HasPrefix(up, "COMMIT"), strings.HasPrefix(up, "ROLLBACK"),
		strings.HasPrefix(up, "LISTEN"), strings.HasPrefix(up, "SET "), strings.Contains(up, "SCHEMA_MIGRATIONS"),
		strings.Contains(up, "PG_ADVISORY"), strings.Contains(up, "PG_STAT_ACTIVITY"), strings.HasPrefix(up, "-- "):
		return ctx
	}
	r.mu.Lock()
	r.seen[q] = true
	r.mu.Unlock()
	return ctx
}

func (r *queryRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceCopyFromStart records a COPY as the SELECT of its columns, which is
// what a newer schema must still have for it.
func (r *queryRecorder) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceCopyFromStartData) context.Context {
	q := "SELECT " + strings.Join(d.ColumnNames, ", ") + " FROM " + d.TableName.Sanitize()
	r.mu.Lock()
	r.seen[q] = true
	r.mu.Unlock()
	return ctx
}

func (r *queryRecorder) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// TestQueriesGolden records the statements the store sends while the
// contract suite runs and keeps them in testdata/queries.sql. The file is
// this release's query set: at a release it is copied to
// migrations/testdata/compat/<version>.sql, where the migrations' tests
// prepare every statement of every earlier release against the fully
// migrated schema — so that an older replica keeps working during a rolling
// upgrade.
func TestQueriesGolden(t *testing.T) {
	rec := &queryRecorder{seen: map[string]bool{}}
	storetest.Run(t, func(t *testing.T) store.Store {
		pg, err := postgres.New(context.Background(), testenv.Postgres(t), postgres.Options{Tracer: rec})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pg.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pg.Close)
		return pg
	})
	if t.Failed() {
		return
	}
	var qs []string
	for q := range rec.seen {
		qs = append(qs, q)
	}
	sort.Strings(qs)
	got := "-- The statements the Postgres store sends, one per line (recorded by TestQueriesGolden).\n" + strings.Join(qs, ";\n") + ";\n"
	const golden = "testdata/queries.sql"
	if *updateQueries {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run: go test ./gateway/store/postgres -run TestQueriesGolden -update-queries)", err)
	}
	if string(want) != got {
		t.Fatalf("the store's queries changed; review them, then run go test ./gateway/store/postgres -run TestQueriesGolden -update-queries")
	}
}
