package migrations

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// lockKey is the advisory lock every Switchyard replica takes to migrate. A
// constant rather than hashtext(…): hashtext is an internal function whose
// result is not promised to stay the same across Postgres releases, and two
// replicas on different servers' rules must still meet on one key.
const lockKey int64 = 0x5377_4d69_6772_6174 // "SwMigrat"

// DefaultLockTimeout is how long Apply waits for the migration lock, and how
// long any statement of a migration waits for a table lock, before it fails.
const DefaultLockTimeout = 60 * time.Second

// ErrLockTimeout is returned when the migration lock, or a lock a migration
// needs, was not granted within the lock timeout.
var ErrLockTimeout = errors.New("timed out waiting for a lock")

// Option changes how Apply runs.
type Option func(*config)

type config struct {
	lockTimeout time.Duration
}

// WithLockTimeout sets the lock timeout (DefaultLockTimeout when d ≤ 0).
func WithLockTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.lockTimeout = d
		}
	}
}

// step is one migration file.
type step struct {
	number  int
	version string // the file name without ".sql", as recorded in schema_migrations
	sql     string
}

var fileName = regexp.MustCompile(`^([0-9]+)_[A-Za-z0-9_]+\.sql$`)

// readSteps lists the *.sql files of fsys in the order they apply. A .sql
// file that does not follow the naming rule is an error rather than a file
// silently skipped, and so are two files with the same number.
func readSteps(fsys fs.FS) ([]step, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: list files: %w", err)
	}
	var steps []step
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || path.Ext(name) != ".sql" {
			continue
		}
		m := fileName.FindStringSubmatch(name)
		if m == nil {
			return nil, fmt.Errorf("migrations: %s: a migration is named NNNN_words.sql", name)
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			return nil, fmt.Errorf("migrations: %s: %w", name, err)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("migrations: read %s: %w", name, err)
		}
		steps = append(steps, step{number: n, version: name[:len(name)-len(".sql")], sql: string(b)})
	}
	slices.SortFunc(steps, func(a, b step) int { return a.number - b.number })
	for i := 1; i < len(steps); i++ {
		if steps[i].number == steps[i-1].number {
			return nil, fmt.Errorf("migrations: %s and %s have the same number", steps[i-1].version, steps[i].version)
		}
	}
	return steps, nil
}

// Apply applies the migrations of fsys that the database has not seen yet,
// in order, each in its own transaction together with its schema_migrations
// row, and returns the versions it applied.
//
// Several replicas may start at once: each takes a session-level advisory
// lock on one dedicated connection first, so exactly one of them migrates and
// the others then find nothing left to do. The lock wait is bounded by the
// lock timeout, so a stuck migration elsewhere is an error (ErrLockTimeout)
// rather than a start-up that hangs. The same timeout bounds every lock a
// migration statement waits for, because a DDL statement queued behind a
// long transaction blocks every query on that table while it waits.
//
// Versions recorded in the database that fsys does not have are left alone:
// that is a replica of an older release starting after a newer one migrated.
func Apply(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS, logger *slog.Logger, opts ...Option) (applied []string, err error) {
	cfg := config{lockTimeout: DefaultLockTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	steps, err := readSteps(fsys)
	if err != nil {
		return nil, err
	}

	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: connect: %w", err)
	}
	// The advisory lock and lock_timeout belong to this session. When
	// anything about it is in doubt the connection is closed rather than
	// handed back to the pool, because closing it is what surely releases
	// the lock.
	clean := false
	defer func() {
		if !clean {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = conn.Conn().Close(cctx) // Release then drops it from the pool
		}
		conn.Release()
	}()

	timeout := fmt.Sprintf("%dms", cfg.lockTimeout.Milliseconds())
	if _, err := conn.Exec(ctx, "SELECT set_config('lock_timeout', $1, false)", timeout); err != nil {
		return nil, fmt.Errorf("migrations: set lock_timeout: %w", err)
	}
	start := time.Now()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		if isLockTimeout(err) {
			return nil, fmt.Errorf("migrations: %w: waited %s for the migration lock, which another process holds; is a migration stuck there? (%v)",
				ErrLockTimeout, cfg.lockTimeout, err)
		}
		return nil, fmt.Errorf("migrations: take the migration lock: %w", err)
	}
	logger.Debug("migration lock taken", "waited", time.Since(start))
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		var unlocked bool
		uerr := conn.QueryRow(uctx, "SELECT pg_advisory_unlock($1)", lockKey).Scan(&unlocked)
		switch {
		case uerr != nil:
			err = errors.Join(err, fmt.Errorf("migrations: release the migration lock: %w", uerr))
			clean = false
		case !unlocked:
			err = errors.Join(err, errors.New("migrations: release the migration lock: the session did not hold it"))
			clean = false
		default:
			if _, rerr := conn.Exec(uctx, "RESET lock_timeout"); rerr != nil {
				clean = false
			}
		}
	}()

	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    text PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return nil, fmt.Errorf("migrations: create schema_migrations: %w", err)
	}
	rows, err := conn.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("migrations: read schema_migrations: %w", err)
	}
	done := map[string]bool{}
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, fmt.Errorf("migrations: read schema_migrations: %w", err)
		}
		done[v] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrations: read schema_migrations: %w", err)
	}

	known := map[string]bool{}
	for _, s := range steps {
		known[s.version] = true
		if done[s.version] {
			continue
		}
		t0 := time.Now()
		if err := applyStep(ctx, conn, s); err != nil {
			if isLockTimeout(err) {
				err = fmt.Errorf("%w: a table this migration changes stayed locked for %s (%v)", ErrLockTimeout, cfg.lockTimeout, err)
			}
			clean = true // the transaction was rolled back; the session is sound
			return applied, fmt.Errorf("migrations: %s: %w", s.version, err)
		}
		applied = append(applied, s.version)
		logger.Info("applied migration", "version", s.version, "duration", time.Since(t0))
	}
	for v := range done {
		if !known[v] {
			logger.Info("the database has a migration this release does not know; a newer release applied it", "version", v)
		}
	}
	clean = true
	return applied, nil
}

func applyStep(ctx context.Context, conn *pgxpool.Conn, s step) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	// No arguments: pgx sends the file with the simple protocol, which runs
	// several statements in one call.
	if _, err := tx.Exec(ctx, s.sql); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, now())", s.version); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// isLockTimeout reports Postgres's lock_not_available, which lock_timeout
// raises.
func isLockTimeout(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}
