package app

import (
	"net/http"
	"sync"
	"time"
)

// readiness answers /readyz: 503 while starting or shutting down, 200 "ok",
// 200 "degraded" while a dependency is down but the gateway still serves
// (Postgres within its outage grace), 503 after.
type readiness struct {
	grace time.Duration
	// redis reports whether Redis answers; nil when none is configured.
	redis func() bool

	mu           sync.Mutex
	migrated     bool
	shuttingDown bool
	dbDownSince  time.Time // zero while the database answers
}

func newReadiness(grace time.Duration) *readiness { return &readiness{grace: grace} }

func (r *readiness) setMigrated() {
	r.mu.Lock()
	r.migrated = true
	r.mu.Unlock()
}

func (r *readiness) setShuttingDown() {
	r.mu.Lock()
	r.shuttingDown = true
	r.mu.Unlock()
}

func (r *readiness) observeDB(ok bool, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case ok:
		r.dbDownSince = time.Time{}
	case r.dbDownSince.IsZero():
		r.dbDownSince = now
	}
}

// dbDown reports since when the database has been failing its pings (zero
// while it answers).
func (r *readiness) dbDown() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dbDownSince
}

// state returns the HTTP status and the word /readyz answers.
func (r *readiness) state(now time.Time) (int, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.shuttingDown:
		return http.StatusServiceUnavailable, "shutting down"
	case !r.migrated:
		return http.StatusServiceUnavailable, "starting: database not ready"
	case !r.dbDownSince.IsZero() && now.Sub(r.dbDownSince) > r.grace:
		return http.StatusServiceUnavailable, "unavailable: database down longer than the outage grace"
	case !r.dbDownSince.IsZero():
		return http.StatusOK, "degraded"
	case r.redis != nil && !r.redis():
		return http.StatusOK, "degraded"
	}
	return http.StatusOK, "ok"
}

func (r *readiness) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	code, word := r.state(time.Now())
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(word + "\n"))
}
