package migrations

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-ai/switchyard/internal/testenv"
)

func newPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// counterFS is a migration set whose steps 2 and 3 each add one row to a
// counter table, so that a step applied twice shows up as an extra row.
// Step 2 sleeps so that concurrent runners really overlap.
func counterFS() fstest.MapFS {
	return fstest.MapFS{
		"0001_counter.sql": {Data: []byte(`CREATE TABLE counter (id bigserial PRIMARY KEY, step text NOT NULL);`)},
		"0002_first.sql":   {Data: []byte(`SELECT pg_sleep(0.2); INSERT INTO counter (step) VALUES ('0002');`)},
		"0003_second.sql":  {Data: []byte(`INSERT INTO counter (step) VALUES ('0003');`)},
		"README.md":        {Data: []byte(`not a migration`)},
	}
}

func count(t *testing.T, pool *pgxpool.Pool, query string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func TestConcurrentApplyRunsEachStepOnce(t *testing.T) {
	url := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const runners = 5
	pools := make([]*pgxpool.Pool, runners)
	for i := range pools {
		pools[i] = newPool(t, url)
	}
	results := make([][]string, runners)
	errs := make([]error, runners)
	var wg sync.WaitGroup
	for i := range runners {
		wg.Go(func() {
			results[i], errs[i] = Apply(ctx, pools[i], counterFS(), nil, WithLockTimeout(30*time.Second))
		})
	}
	wg.Wait()

	var all []string
	for i := range runners {
		if errs[i] != nil {
			t.Fatalf("runner %d: %v", i, errs[i])
		}
		all = append(all, results[i]...)
	}
	slices.Sort(all)
	if want := []string{"0001_counter", "0002_first", "0003_second"}; !slices.Equal(all, want) {
		t.Fatalf("applied across runners = %v, want each of %v exactly once", all, want)
	}
	if n := count(t, pools[0], "SELECT count(*) FROM counter"); n != 2 {
		t.Errorf("counter rows = %d, want 2", n)
	}
	if n := count(t, pools[0], "SELECT count(*) FROM schema_migrations"); n != 3 {
		t.Errorf("schema_migrations rows = %d, want 3", n)
	}
	// Every runner released the lock: nobody holds it now.
	if n := count(t, pools[0], "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"); n != 0 {
		t.Errorf("advisory locks still held: %d", n)
	}

	again, err := Apply(ctx, pools[0], counterFS(), nil)
	if err != nil {
		t.Fatalf("second Apply: %v", err)
	}
	if len(again) != 0 {
		t.Errorf("second Apply applied %v, want nothing", again)
	}
}

func TestApplyEmbeddedSchema(t *testing.T) {
	url := testenv.Postgres(t)
	ctx := context.Background()
	pool := newPool(t, url)
	applied, err := Apply(ctx, pool, FS(), nil)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	steps, err := readSteps(FS())
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != len(steps) || applied[0] != "0001_init" {
		t.Fatalf("applied %v, want all %d embedded steps starting with 0001_init", applied, len(steps))
	}
	for _, table := range []string{"tenants", "api_keys", "vendors", "models", "nodes", "usage_events", "audit_log", "config_version"} {
		if n := count(t, pool, "SELECT count(*) FROM information_schema.tables WHERE table_name = '"+table+"'"); n != 1 {
			t.Errorf("table %s missing", table)
		}
	}
	if n := count(t, pool, "SELECT count(*) FROM config_version"); n != 1 {
		t.Errorf("config_version rows = %d, want 1", n)
	}
	again, err := Apply(ctx, pool, FS(), nil)
	if err != nil || len(again) != 0 {
		t.Fatalf("second Apply = %v, %v; want nothing applied", again, err)
	}
}

func TestApplyFailsWhenTheLockIsHeld(t *testing.T) {
	url := testenv.Postgres(t)
	ctx := context.Background()

	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		t.Fatal(err)
	}

	pool := newPool(t, url)
	const timeout = 300 * time.Millisecond
	start := time.Now()
	applied, err := Apply(ctx, pool, counterFS(), nil, WithLockTimeout(timeout))
	elapsed := time.Since(start)
	if !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("Apply = %v, %v; want ErrLockTimeout", applied, err)
	}
	if elapsed < timeout || elapsed > timeout+5*time.Second {
		t.Errorf("Apply failed after %s, want about %s", elapsed, timeout)
	}
	if len(applied) != 0 {
		t.Errorf("applied %v while the lock was held elsewhere", applied)
	}
	t.Logf("error: %v", err)

	// Once the holder lets go, the same pool migrates: the failed attempt
	// left no lock or setting behind.
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", lockKey); err != nil {
		t.Fatal(err)
	}
	applied, err = Apply(ctx, pool, counterFS(), nil, WithLockTimeout(timeout))
	if err != nil || len(applied) != 3 {
		t.Fatalf("Apply after release = %v, %v; want 3 steps", applied, err)
	}
}

func TestApplyStopsAtAFailingStep(t *testing.T) {
	url := testenv.Postgres(t)
	ctx := context.Background()
	pool := newPool(t, url)
	fsys := fstest.MapFS{
		"0001_ok.sql":     {Data: []byte(`CREATE TABLE a (id int);`)},
		"0002_broken.sql": {Data: []byte(`CREATE TABLE b (id int); SELECT no_such_function();`)},
		"0003_never.sql":  {Data: []byte(`CREATE TABLE c (id int);`)},
	}
	applied, err := Apply(ctx, pool, fsys, nil)
	if err == nil {
		t.Fatal("Apply succeeded with a broken step")
	}
	if !slices.Equal(applied, []string{"0001_ok"}) {
		t.Errorf("applied = %v, want [0001_ok]", applied)
	}
	// The broken step rolled back as a whole.
	if n := count(t, pool, "SELECT count(*) FROM information_schema.tables WHERE table_name IN ('b', 'c')"); n != 0 {
		t.Errorf("tables of the failed and later steps exist: %d", n)
	}
	if n := count(t, pool, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"); n != 0 {
		t.Errorf("advisory lock still held after a failure")
	}
}

func TestReadSteps(t *testing.T) {
	tests := []struct {
		name    string
		fsys    fstest.MapFS
		want    []string
		wantErr bool
	}{
		{"ordered by number", fstest.MapFS{
			"0010_c.sql": {}, "0002_b.sql": {}, "0001_a.sql": {}, "notes.txt": {},
		}, []string{"0001_a", "0002_b", "0010_c"}, false},
		{"same number twice", fstest.MapFS{"0001_a.sql": {}, "0001_b.sql": {}}, nil, true},
		{"badly named", fstest.MapFS{"init.sql": {}}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps, err := readSteps(tt.fsys)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			var got []string
			for _, s := range steps {
				got = append(got, s.version)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
