package migrations

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-ai/switchyard/internal/testenv"
)

// compatSets reads the query sets of earlier releases: each file under
// testdata/compat is one release's store statements, one per line, as the
// store's TestQueriesGolden recorded them.
func compatSets(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("testdata/compat/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no query sets under testdata/compat (%v)", err)
	}
	sets := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "--") {
				continue
			}
			sets[filepath.Base(f)] = append(sets[filepath.Base(f)], strings.TrimSuffix(line, ";"))
		}
	}
	return sets
}

// prepareAll prepares every statement (PREPARE checks tables, columns and
// types without running anything) and returns those that fail.
func prepareAll(t *testing.T, pool *pgxpool.Pool, stmts []string) []string {
	t.Helper()
	conn, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var failed []string
	for i, q := range stmts {
		if _, err := conn.Conn().Prepare(context.Background(), "compat_"+strconv.Itoa(i), q); err != nil {
			failed = append(failed, err.Error()+"\n    "+q)
		}
	}
	return failed
}

// TestEarlierReleasesQueriesRunOnTheMigratedSchema: every statement an
// earlier release's store sends still prepares against the fully migrated
// schema, so that release's replicas keep working during a rolling upgrade.
func TestEarlierReleasesQueriesRunOnTheMigratedSchema(t *testing.T) {
	pool := newPool(t, testenv.Postgres(t))
	if _, err := Apply(context.Background(), pool, FS(), nil); err != nil {
		t.Fatal(err)
	}
	for release, stmts := range compatSets(t) {
		t.Run(release, func(t *testing.T) {
			if len(stmts) < 10 {
				t.Fatalf("only %d statements: the set looks truncated", len(stmts))
			}
			if failed := prepareAll(t, pool, stmts); len(failed) > 0 {
				t.Fatalf("%d statements of %s no longer work on the migrated schema:\n%s", len(failed), release, strings.Join(failed, "\n"))
			}
		})
	}
}

// TestCompatCheckCatchesAContractingChange: the check above fails when a
// migration takes away what an earlier release uses.
func TestCompatCheckCatchesAContractingChange(t *testing.T) {
	pool := newPool(t, testenv.Postgres(t))
	if _, err := Apply(context.Background(), pool, FS(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `ALTER TABLE tenants RENAME COLUMN priority TO rank`); err != nil {
		t.Fatal(err)
	}
	for _, stmts := range compatSets(t) {
		if failed := prepareAll(t, pool, stmts); len(failed) == 0 {
			t.Fatal("a renamed column went unnoticed")
		}
	}
}
