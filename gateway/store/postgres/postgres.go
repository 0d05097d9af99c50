// Package postgres is the production store: Switchyard's durable state in
// Postgres, behind one connection pool per replica.
//
// Every admin write runs in one transaction that makes the change, records
// an audit entry (before/after JSON of the store types, whose JSON leaves
// secrets out) and bumps the single config_version row, then NOTIFYs
// switchyard_config with the new version; the notification is delivered on
// commit, so a replica that hears it reads the change. The config_version
// row lock, taken last, also puts those notifications in version order.
//
// Rows are locked (SELECT … FOR UPDATE) before they are read for a change,
// so an audit entry's "before" is what the change replaced, and a key set
// while ResealAll rewrites values waits for it and then lands on top.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/migrations"
)

var _ store.Store = (*Postgres)(nil)

// DefaultMaxConns is the pool size per replica when neither Options nor the
// URL (pool_max_conns) sets one (SPEC §8).
const DefaultMaxConns = 25

// notifyChannel is the LISTEN/NOTIFY channel carrying config versions.
const notifyChannel = "switchyard_config"

// entityLockClass is the first key of the transaction-level advisory locks
// that serialise writes to one entity (the second is hashtext of
// "kind/id"). It makes an upsert's "before" exact even when the row does not
// exist yet, which a row lock cannot. The two-key space never meets the
// one-key migration lock.
const entityLockClass int32 = 0x5377 // "Sw"

// Options configures New.
type Options struct {
	// MaxConns caps the pool (default DefaultMaxConns, or pool_max_conns
	// from the URL). Listen holds one of them while it runs.
	MaxConns int32
	// Logger receives migration and LISTEN reconnection messages; nil
	// discards them.
	Logger *slog.Logger
	// LockTimeout bounds how long Migrate waits for the migration lock
	// (default migrations.DefaultLockTimeout).
	LockTimeout time.Duration
	// OnListenError is told each time Listen loses (or cannot open) its
	// connection, so that the app can count it as a dependency error.
	OnListenError func(err error)
	// Tracer sees every query (tests record the store's queries with it).
	Tracer pgx.QueryTracer
}

// DefaultConnectTimeout bounds opening one connection when the URL sets no
// connect_timeout. Without it a database that accepts TCP connections but
// does not answer (hung, or frozen) would hold every caller that needs a
// new connection until the caller's own deadline, if it has one.
const DefaultConnectTimeout = 5 * time.Second

// Postgres is the Postgres store.Store.
type Postgres struct {
	pool          *pgxpool.Pool
	logger        *slog.Logger
	lockTimeout   time.Duration
	onListenError func(error)
}

// New makes the pool. It does not connect: the first query (Migrate or
// Ping) does, and the pool reconnects by itself after an outage, so a
// database that is down at start-up is a failed Ping rather than a failed
// New.
func New(ctx context.Context, databaseURL string, opts Options) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		// pgx leaves the password out of its message.
		return nil, &storeError{msg: "the database URL cannot be used: " + err.Error(), kind: store.ErrInvalid}
	}
	switch {
	case opts.MaxConns > 0:
		cfg.MaxConns = opts.MaxConns
	case !strings.Contains(databaseURL, "pool_max_conns"):
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "switchyard"
	}
	if opts.Tracer != nil {
		cfg.ConnConfig.Tracer = opts.Tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fail("open the pool", err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Postgres{pool: pool, logger: logger, lockTimeout: opts.LockTimeout, onListenError: opts.OnListenError}, nil
}

// Pool returns the connection pool, for health checks and tests.
func (p *Postgres) Pool() *pgxpool.Pool { return p.pool }

// Migrate applies the embedded migrations and returns the versions it
// applied.
func (p *Postgres) Migrate(ctx context.Context) ([]string, error) {
	applied, err := migrations.Apply(ctx, p.pool, migrations.FS(), p.logger, migrations.WithLockTimeout(p.lockTimeout))
	if err != nil && unreachable(err) {
		return applied, &storeError{msg: "the database is unavailable: " + err.Error(), kind: store.ErrUnavailable, cause: err}
	}
	// Anything else keeps the runner's own message, which names the step
	// or the lock that failed.
	return applied, err
}

// Ping checks that the database answers.
func (p *Postgres) Ping(ctx context.Context) error {
	if err := p.pool.Ping(ctx); err != nil {
		return fail("ping", err)
	}
	return nil
}

// Close closes the pool.
func (p *Postgres) Close() { p.pool.Close() }

// ConfigVersion returns the version every admin write bumps.
func (p *Postgres) ConfigVersion(ctx context.Context) (int64, error) {
	var v int64
	if err := p.pool.QueryRow(ctx, "SELECT version FROM config_version").Scan(&v); err != nil {
		return 0, fail("read the config version", err)
	}
	return v, nil
}

// change is one audited change; before and after are nil when the entity
// did not exist before, or no longer does.
type change struct {
	action, entity string
	before, after  any
}

// write runs fn in a transaction and, when fn reports changes, records them
// in the audit log, bumps the config version and notifies followers, all in
// the same transaction. No changes (a dry run, an idempotent call) roll
// back: nothing happened, so nothing is audited and no version is used.
func (p *Postgres) write(ctx context.Context, a store.Actor, op string, fn func(tx pgx.Tx) ([]change, error)) error {
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return fail(op, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	changes, err := fn(tx)
	if err != nil {
		return fail(op, err)
	}
	if len(changes) == 0 {
		return nil
	}
	for _, c := range changes {
		if _, err := tx.Exec(ctx, `INSERT INTO audit_log (actor_key_id, action, entity, before_json, after_json)
			VALUES ($1, $2, $3, NULLIF($4, '')::jsonb, NULLIF($5, '')::jsonb)`,
			a.KeyID, c.action, c.entity, store.AuditJSON(c.before), store.AuditJSON(c.after)); err != nil {
			return fail(op+": audit", err)
		}
	}
	var version int64
	if err := tx.QueryRow(ctx, "UPDATE config_version SET version = version + 1 RETURNING version").Scan(&version); err != nil {
		return fail(op+": bump the config version", err)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", notifyChannel, strconv.FormatInt(version, 10)); err != nil {
		return fail(op+": notify", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fail(op+": commit", err)
	}
	return nil
}

// lockEntity serialises writers of one entity until the transaction ends.
func lockEntity(ctx context.Context, tx pgx.Tx, entity string) error {
	_, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext($2))", entityLockClass, entity)
	return err
}

// storeError carries a message a person can act on, the sentinel the edge
// maps, and, for failures of the database, the cause.
type storeError struct {
	msg   string
	kind  error
	cause error
}

func (e *storeError) Error() string { return e.msg }

func (e *storeError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}

func invalid(format string, args ...any) error {
	return &storeError{msg: fmt.Sprintf(format, args...), kind: store.ErrInvalid}
}

func conflict(format string, args ...any) error {
	return &storeError{msg: fmt.Sprintf(format, args...), kind: store.ErrConflict}
}

// fail turns a database error into the store's vocabulary. Errors the store
// made itself pass through. Postgres's own text is kept only where it cannot
// carry a value: constraint violations get a message of ours, because their
// detail repeats the row.
func fail(op string, err error) error {
	if err == nil {
		return nil
	}
	var se *storeError
	var nf *store.NotFoundError
	if errors.As(err, &se) || errors.As(err, &nf) {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: %w", op, err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "23505":
			return &storeError{msg: fmt.Sprintf("%s: it already exists (%s)", op, pe.ConstraintName), kind: store.ErrConflict}
		case pe.Code == "23503":
			return &storeError{msg: fmt.Sprintf("%s: it refers to, or is referred to by, another entity (%s)", op, pe.ConstraintName), kind: store.ErrConflict}
		case strings.HasPrefix(pe.Code, "23"), strings.HasPrefix(pe.Code, "22"):
			return &storeError{msg: fmt.Sprintf("%s: a value is out of range or breaks a rule (%s)", op, pe.Code), kind: store.ErrInvalid}
		case strings.HasPrefix(pe.Code, "08"), strings.HasPrefix(pe.Code, "53"),
			pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03",
			pe.Code == "40001", pe.Code == "40P01", pe.Code == "55P03":
			// Lost connection, out of resources, shutting down, or a
			// serialisation failure, deadlock or lock timeout: trying again
			// later is the remedy.
			return &storeError{msg: fmt.Sprintf("%s: the database is unavailable: %s (%s)", op, pe.Message, pe.Code), kind: store.ErrUnavailable, cause: err}
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	if unreachable(err) {
		return &storeError{msg: fmt.Sprintf("%s: the database is unavailable: %v", op, err), kind: store.ErrUnavailable, cause: err}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// unreachable reports failures of the connection rather than of the
// statement.
func unreachable(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	switch {
	case pgconn.SafeToRetry(err), pgconn.Timeout(err),
		errors.As(err, &ce), errors.As(err, &ne),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, context.DeadlineExceeded):
		return true
	}
	return false
}

// scanner is a row: pgx.Row and pgx.CollectableRow both are.
type scanner interface {
	Scan(dest ...any) error
}

// collect reads every row with scan.
func collect[T any](rows pgx.Rows, scan func(scanner) (T, error)) ([]T, error) {
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) { return scan(r) })
	if out == nil {
		out = []T{}
	}
	return out, err
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// notFound maps pgx.ErrNoRows to store.NotFound and leaves other errors.
func notFound(err error, entity, id string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return store.NotFound(entity, id)
	}
	return err
}
