package postgres

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/gateway/store/storetest"
	"github.com/switchyard-ai/switchyard/internal/testenv"
)

var admin = store.Actor{KeyID: "sya-test"}

// open returns a migrated store on a fresh database, and the database URL.
func open(t *testing.T, url string, opts Options) *Postgres {
	t.Helper()
	p, err := New(t.Context(), url, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(p.Close)
	if _, err := p.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return p
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, testenv.Postgres(t), Options{})
	})
}

func TestMigrateTwice(t *testing.T) {
	p := open(t, testenv.Postgres(t), Options{})
	again, err := p.Migrate(t.Context())
	if err != nil || len(again) != 0 {
		t.Fatalf("second Migrate = %v, %v; want nothing to do", again, err)
	}
}

// waitFor polls cond until it holds or the time is up.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSetVendorKeyDuringResealAllIsNotLost(t *testing.T) {
	ctx := t.Context()
	p := open(t, testenv.Postgres(t), Options{})
	if _, err := p.UpsertVendor(ctx, admin, store.Vendor{ID: "openai", BaseURL: "https://api.example/v1", Enabled: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SetVendorKey(ctx, admin, "openai", storetest.Seal(1, "old-key"), 1); err != nil {
		t.Fatal(err)
	}

	// The Resealer stops at its first value, with ResealAll's row locks
	// held, until the test lets it go.
	entered := make(chan struct{})
	release := make(chan struct{})
	var released sync.Once
	let := func() { released.Do(func() { close(release) }) }
	// Should the test fail half-way, ResealAll still ends, so that closing
	// the pool does not wait for its transaction for ever.
	t.Cleanup(let)
	var once sync.Once
	r := storetest.Resealer{Primary: 2, Hook: func(store.SealedRef) {
		once.Do(func() {
			close(entered)
			<-release
		})
	}}
	type result struct {
		rep store.ResealReport
		err error
	}
	resealed := make(chan result, 1)
	go func() {
		rep, err := p.ResealAll(ctx, admin, r, false)
		resealed <- result{rep, err}
	}()
	select {
	case <-entered:
	case res := <-resealed:
		t.Fatalf("ResealAll returned before resealing: %+v", res)
	case <-time.After(10 * time.Second):
		t.Fatal("ResealAll never reached the Resealer")
	}

	set := make(chan error, 1)
	go func() {
		_, err := p.SetVendorKey(ctx, admin, "openai", storetest.Seal(2, "new-key"), 2)
		set <- err
	}()
	// SetVendorKey waits on the vendor's row lock.
	waitFor(t, "SetVendorKey to wait on the row lock", 10*time.Second, func() bool {
		var n int
		err := p.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'
				AND query LIKE '%FROM vendors WHERE id = $1 FOR UPDATE%'`).Scan(&n)
		return err == nil && n == 1
	})
	select {
	case err := <-set:
		t.Fatalf("SetVendorKey finished while ResealAll held the row: %v", err)
	default:
	}
	let()

	res := <-resealed
	if res.err != nil || res.rep.Rewritten != 1 || len(res.rep.Failed) != 0 {
		t.Fatalf("ResealAll = %+v, %v; want one value rewritten", res.rep, res.err)
	}
	if err := <-set; err != nil {
		t.Fatalf("SetVendorKey: %v", err)
	}
	v, err := p.GetVendor(ctx, "openai")
	if err != nil {
		t.Fatal(err)
	}
	if string(v.KeySealed) != string(storetest.Seal(2, "new-key")) || v.KeyVersion != 2 {
		t.Errorf("final key = %q (version %d), want the one SetVendorKey wrote", v.KeySealed, v.KeyVersion)
	}
	// The audit log tells the same story: the rotation, then the new key.
	es, err := p.ListAudit(ctx, time.Time{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].Action != "SetVendorKey" || es[1].Action != "RotateEncryption" {
		t.Errorf("newest audit entries = %+v", es)
	}
}

func TestPoolNeverExceedsMaxConns(t *testing.T) {
	ctx := t.Context()
	url := testenv.Postgres(t)
	p := open(t, url, Options{MaxConns: 3})
	observer, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer observer.Close(context.Background())

	stop := make(chan struct{})
	peak := make(chan int, 1)
	go func() {
		most := 0
		for {
			var n int
			if err := observer.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err == nil {
				most = max(most, n)
			}
			select {
			case <-stop:
				peak <- most
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()

	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Go(func() {
			if i%2 == 0 {
				_, err := p.Pool().Exec(ctx, "SELECT pg_sleep(0.1)")
				errs <- err
				return
			}
			_, err := p.UpsertTenant(ctx, admin, store.Tenant{ID: "t", Name: "n"})
			errs <- err
		})
	}
	wg.Wait()
	close(stop)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("query: %v", err)
		}
	}
	most := <-peak
	if most > 3 {
		t.Errorf("the database saw %d connections from a pool of 3", most)
	}
	if most < 2 {
		t.Errorf("the database saw at most %d connections; the test did not load the pool", most)
	}
	t.Logf("peak connections: %d", most)
}

func TestListen(t *testing.T) {
	url := testenv.Postgres(t)
	writer := open(t, url+"&application_name=sytest-writer", Options{})
	listener := open(t, url+"&application_name=sytest-listener", Options{})

	ctx, cancel := context.WithCancel(t.Context())
	versions := make(chan int64, 100)
	done := make(chan error, 1)
	go func() {
		done <- listener.Listen(ctx, func(v int64) { versions <- v })
	}()
	next := func(what string) int64 {
		t.Helper()
		select {
		case v := <-versions:
			return v
		case <-time.After(10 * time.Second):
			t.Fatalf("no version for %s", what)
			return 0
		}
	}
	if v := next("the first connection"); v != 0 {
		t.Fatalf("first version = %d, want 0", v)
	}
	if _, err := writer.UpsertTenant(t.Context(), admin, store.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if v := next("a write"); v != 1 {
		t.Fatalf("version after a write = %d, want 1", v)
	}

	// Kill the listener's connection; it comes back by itself, reports the
	// version it finds, and follows later writes.
	var killed int
	if err := writer.Pool().QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'sytest-listener'`).Scan(&killed); err != nil || killed == 0 {
		t.Fatalf("terminate the listener: %d, %v", killed, err)
	}
	if v := next("the reconnection"); v != 1 {
		t.Fatalf("version after reconnecting = %d, want 1", v)
	}
	if _, err := writer.UpsertTenant(t.Context(), admin, store.Tenant{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	if v := next("a write after reconnecting"); v != 2 {
		t.Fatalf("version = %d, want 2", v)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Listen returned %v after its context ended", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Listen did not return after its context ended")
	}
}

func TestUnavailable(t *testing.T) {
	ctx := t.Context()
	// Nothing listens on this port.
	url := "postgres://switchyard:hunter2-secret@" + testenv.Addr(t) + "/nowhere?sslmode=disable&connect_timeout=2"
	p, err := New(ctx, url, Options{})
	if err != nil {
		t.Fatalf("New does not connect, so it cannot fail here: %v", err)
	}
	defer p.Close()
	checks := map[string]error{"Ping": p.Ping(ctx)}
	_, checks["GetTenant"] = p.GetTenant(ctx, "acme")
	_, checks["UpsertTenant"] = p.UpsertTenant(ctx, admin, store.Tenant{ID: "acme"})
	checks["InsertUsage"] = p.InsertUsage(ctx, []store.UsageEvent{{TenantID: "acme"}})
	_, checks["Migrate"] = p.Migrate(ctx)
	short, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	<-short.Done()
	_, checks["deadline"] = p.ListTenants(short)
	for name, err := range checks {
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s = %v, want ErrUnavailable", name, err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s error shows the password: %v", name, err)
		}
	}
}

func TestBadURL(t *testing.T) {
	_, err := New(t.Context(), "postgres://u:hunter2-secret@host:notaport/db", Options{})
	if !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("New = %v, want ErrInvalid", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error shows the password: %v", err)
	}
}

func TestDefaultMaxConns(t *testing.T) {
	p, err := New(t.Context(), "postgres://u@127.0.0.1:1/db", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got := p.Pool().Config().MaxConns; got != DefaultMaxConns {
		t.Errorf("MaxConns = %d, want %d", got, DefaultMaxConns)
	}
	q, err := New(t.Context(), "postgres://u@127.0.0.1:1/db?pool_max_conns=7", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if got := q.Pool().Config().MaxConns; got != 7 {
		t.Errorf("MaxConns from the URL = %d, want 7", got)
	}
}

func TestUsageColumns(t *testing.T) {
	ctx := t.Context()
	p := open(t, testenv.Postgres(t), Options{})
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if err := p.InsertUsage(ctx, []store.UsageEvent{
		{Time: at, RequestID: "r1", TenantID: "t", KeyID: "k", Model: "m", Target: "node:gpu", InputTokens: 3, OutputTokens: 4,
			Estimated: true, CostUSD: 0.01, FallbackPath: []string{"a", "b"}, TTFTMillis: 12.5, TokensPerSec: 33.3,
			Status: 200, ErrorCode: "", Attributes: map[string]string{"team": "search"}, DurationMillis: 99},
		{RequestID: "r2"}, // no time, no attributes, no path
	}); err != nil {
		t.Fatal(err)
	}
	var team, path, attrs2 string
	var when time.Time
	if err := p.Pool().QueryRow(ctx, `SELECT attributes->>'team', array_to_string(fallback_path, '>'), time
		FROM usage_events WHERE request_id = 'r1'`).Scan(&team, &path, &when); err != nil {
		t.Fatal(err)
	}
	if team != "search" || path != "a>b" || !when.Equal(at) {
		t.Errorf("stored attributes %q, path %q, time %v", team, path, when)
	}
	var pathLen int
	if err := p.Pool().QueryRow(ctx, `SELECT attributes::text, cardinality(fallback_path)
		FROM usage_events WHERE request_id = 'r2' AND time > now() - interval '1 minute'`).Scan(&attrs2, &pathLen); err != nil {
		t.Fatalf("an event without a time is stored at the time of insert: %v", err)
	}
	if attrs2 != "{}" || pathLen != 0 {
		t.Errorf("event without attributes or path stored %s and %d steps", attrs2, pathLen)
	}
}
