package redisstate

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/switchyard-ai/switchyard/gateway/store"
)

// Decision codes, as the OpenAI error JSON carries them (SPEC §3.3).
const (
	CodeRateLimitExceeded = "rate_limit_exceeded"
	CodeBudgetExceeded    = "budget_exceeded"
)

// The limits a Decision may name, spelled as the tenant's fields are.
const (
	LimitRequestsPerMinute    = "requests_per_minute"
	LimitTokensPerMinute      = "tokens_per_minute"
	LimitDailyTokenBudget     = "daily_token_budget"
	LimitMonthlyCostBudgetUSD = "monthly_cost_budget_usd"
)

// BudgetOnFailure values (SWITCHYARD_BUDGET_ON_REDIS_FAILURE).
const (
	BudgetOpen   = "open"
	BudgetClosed = "closed"
)

const (
	window = time.Minute
	// windowTTL keeps a minute counter while it can still be the previous
	// window, and not longer.
	windowTTL = 2 * window
	// closedBudgetRetry is the Retry-After of a request refused because
	// budgets cannot be checked: short, since the breaker probes Redis again
	// within seconds.
	closedBudgetRetry = 5 * time.Second
	microUSD          = 1e6
)

// Decision is the outcome of Admit.
type Decision struct {
	Allowed    bool
	Code       string        // CodeRateLimitExceeded or CodeBudgetExceeded when refused
	Limit      string        // which limit refused it: LimitRequestsPerMinute, …
	RetryAfter time.Duration // when a retry may pass; the HTTP layer rounds it up to seconds
}

// LimiterOptions configures a Limiter.
type LimiterOptions struct {
	// BudgetOnFailure says what budgets do while a configured Redis is
	// unavailable: BudgetOpen (the default; anything but BudgetClosed)
	// checks them against this replica's own figures, which know only what
	// this replica recorded, so they mostly admit; BudgetClosed refuses
	// tenants that have budgets. Without Redis (nil) budgets are always
	// checked against this replica's figures.
	BudgetOnFailure string
	// Now is the clock; nil means the Redis's clock, else time.Now.
	Now func() time.Time
}

// Limiter enforces tenant limits and budgets (SPEC §6).
//
// Requests are counted at admission; tokens and cost only by Record, after
// the response, from real usage. So a tenant just under a token limit or
// budget is admitted and the last request may overshoot it; the next one is
// refused.
//
// Minute limits use a sliding window approximated by two fixed windows: the
// previous minute's count weighs by the part of it that still lies within
// the last 60 s. A request is admitted while the weighted count is below
// the limit. Daily tokens are kept per UTC date and monthly cost per UTC
// month, in micro-dollars so that Redis adds integers.
//
// While Redis is unavailable each replica enforces the limits on its own
// in-memory counters of the same shape. A tenant's traffic spread over N
// replicas can then get up to N times its limits through for the length of
// the outage; the alternative, refusing everything, would turn a Redis
// outage into a gateway outage. The local counters also follow what this
// replica admits and records while Redis is up, so an outage does not start
// them from zero.
type Limiter struct {
	redis          *Redis
	budgetsClosed  bool
	now            func() time.Time
	admitScript    *redis.Script
	recordScript   *redis.Script
	local          localCounters
	tenantKeyStart string // "{" + prefix + "tenant:"
}

// NewLimiter returns a Limiter on r; a nil r counts per replica only.
func NewLimiter(r *Redis, o LimiterOptions) *Limiter {
	l := &Limiter{
		redis:         r,
		budgetsClosed: o.BudgetOnFailure == BudgetClosed,
		now:           o.Now,
		admitScript:   redis.NewScript(admitLua),
		recordScript:  redis.NewScript(recordLua),
		local:         localCounters{tenants: map[string]*localTenant{}},
	}
	if l.now == nil {
		if r != nil {
			l.now = r.now
		} else {
			l.now = time.Now
		}
	}
	prefix := ""
	if r != nil {
		prefix = r.prefix
	}
	l.tenantKeyStart = "{" + prefix + "tenant:"
	return l
}

// limits are a tenant's limits in counter units.
type limits struct {
	rpm, tpm, day, monthMicro int64
}

func limitsOf(t store.Tenant) limits {
	l := limits{rpm: max(t.RequestsPerMinute, 0), tpm: max(t.TokensPerMinute, 0), day: max(t.DailyTokenBudget, 0)}
	if t.MonthlyCostBudgetUSD > 0 {
		// A budget below one micro-dollar is still a budget, not "unlimited".
		l.monthMicro = max(toMicro(t.MonthlyCostBudgetUSD), 1)
	}
	return l
}

func (l limits) none() bool    { return l == limits{} }
func (l limits) budgets() bool { return l.day > 0 || l.monthMicro > 0 }

func toMicro(usd float64) int64 { return int64(math.Round(usd * microUSD)) }

// figures are what the counters hold for one tenant at one instant.
type figures struct {
	rpmCur, rpmPrev, tpmCur, tpmPrev, dayTokens, monthMicro int64
}

// refusal codes, shared by the script and the local counters; the order is
// the order of the checks, budgets first because their Retry-After is the
// longest and the most useful to the client.
const (
	refuseNone = iota
	refuseMonth
	refuseDay
	refuseTPM
	refuseRPM
)

// clock places an instant in the windows and periods the counters use.
type clock struct {
	now     time.Time // UTC
	win     int64     // minute window index
	elapsed time.Duration
	day     string // YYYYMMDD
	month   string // YYYYMM
}

func clockAt(t time.Time) clock {
	t = t.UTC()
	ns := t.UnixNano()
	w := ns / int64(window)
	if ns < 0 && ns%int64(window) != 0 {
		w-- // floor, for clocks before 1970 in tests
	}
	return clock{
		now:     t,
		win:     w,
		elapsed: time.Duration(ns - w*int64(window)),
		day:     t.Format("20060102"),
		month:   t.Format("200601"),
	}
}

// prevWeight is the share of the previous window that still lies within
// the last minute. The script computes the same expression.
func (c clock) prevWeight() float64 {
	return float64(window-c.elapsed) / float64(window)
}

func weighted(cur, prev int64, w float64) float64 { return float64(prev)*w + float64(cur) }

// check returns the refusal code for f under lim, in the script's order.
func (lim limits) check(f figures, c clock) int {
	w := c.prevWeight()
	switch {
	case lim.monthMicro > 0 && f.monthMicro >= lim.monthMicro:
		return refuseMonth
	case lim.day > 0 && f.dayTokens >= lim.day:
		return refuseDay
	case lim.tpm > 0 && weighted(f.tpmCur, f.tpmPrev, w) >= float64(lim.tpm):
		return refuseTPM
	case lim.rpm > 0 && weighted(f.rpmCur, f.rpmPrev, w) >= float64(lim.rpm):
		return refuseRPM
	}
	return refuseNone
}

// decision turns a refusal code into a Decision with its Retry-After.
func (lim limits) decision(code int, f figures, c clock) Decision {
	switch code {
	case refuseMonth:
		y, m, _ := c.now.Date()
		next := time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)
		return Decision{Code: CodeBudgetExceeded, Limit: LimitMonthlyCostBudgetUSD, RetryAfter: next.Sub(c.now)}
	case refuseDay:
		y, m, d := c.now.Date()
		next := time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
		return Decision{Code: CodeBudgetExceeded, Limit: LimitDailyTokenBudget, RetryAfter: next.Sub(c.now)}
	case refuseTPM:
		return Decision{Code: CodeRateLimitExceeded, Limit: LimitTokensPerMinute, RetryAfter: windowWait(f.tpmCur, f.tpmPrev, lim.tpm, c.elapsed)}
	case refuseRPM:
		return Decision{Code: CodeRateLimitExceeded, Limit: LimitRequestsPerMinute, RetryAfter: windowWait(f.rpmCur, f.rpmPrev, lim.rpm, c.elapsed)}
	}
	return Decision{Allowed: true}
}

// windowWait is how long until prev×weight + cur falls below limit, the
// counts staying as they are: within this window if the previous one's
// fading share is what holds it up, else into the next window, where cur
// becomes the fading one.
func windowWait(cur, prev, limit int64, elapsed time.Duration) time.Duration {
	var d time.Duration
	if cur >= limit || prev <= 0 {
		// Next window: cur×(1−f) < limit once f > 1 − limit/cur.
		d = window - elapsed + time.Duration(float64(window)*(1-float64(limit)/float64(cur)))
	} else {
		// This window: prev×(1−f) + cur < limit once f > 1 − (limit−cur)/prev.
		d = time.Duration(float64(window)*(1-float64(limit-cur)/float64(prev))) - elapsed
	}
	// The inequality is strict and Retry-After must be positive: step past
	// the boundary by a millisecond.
	return max(d.Truncate(time.Millisecond), 0) + time.Millisecond
}

// Keys. Each tenant's keys share the hash tag {prefix tenant:id}, so the one
// script that reads them all runs on one Redis Cluster slot.
func (l *Limiter) keys(tenantID string, c clock) [6]string {
	base := l.tenantKeyStart + tenantID + "}:"
	return [6]string{
		base + "rpm:" + strconv.FormatInt(c.win, 10),
		base + "rpm:" + strconv.FormatInt(c.win-1, 10),
		base + "tpm:" + strconv.FormatInt(c.win, 10),
		base + "tpm:" + strconv.FormatInt(c.win-1, 10),
		base + "tok:" + c.day,
		base + "usd:" + c.month,
	}
}

// admitLua checks every limit and counts the request only when all pass, in
// one round trip and atomically, so that replicas racing for a tenant's last
// request cannot both get it.
//
// KEYS: rpm current, rpm previous, tpm current, tpm previous, day tokens,
// month micro-USD. ARGV: rpm, tpm, day, month limits (0 = none), elapsed ms
// in the window, window ms, current window TTL ms.
// Returns {refusal code, rpm cur, rpm prev, tpm cur, tpm prev, day, month}.
const admitLua = `
local function get(k)
  local v = redis.call('GET', k)
  if v then return tonumber(v) end
  return 0
end
local rpmL, tpmL, dayL, monL = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local win = tonumber(ARGV[6])
local w = (win - tonumber(ARGV[5])) / win
local rc, rp, tc, tp, day, mon = 0, 0, 0, 0, 0, 0
if monL > 0 then
  mon = get(KEYS[6])
  if mon >= monL then return {1, rc, rp, tc, tp, day, mon} end
end
if dayL > 0 then
  day = get(KEYS[5])
  if day >= dayL then return {2, rc, rp, tc, tp, day, mon} end
end
if tpmL > 0 then
  tc, tp = get(KEYS[3]), get(KEYS[4])
  if tp * w + tc >= tpmL then return {3, rc, rp, tc, tp, day, mon} end
end
if rpmL > 0 then
  rc, rp = get(KEYS[1]), get(KEYS[2])
  if rp * w + rc >= rpmL then return {4, rc, rp, tc, tp, day, mon} end
  rc = redis.call('INCR', KEYS[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[7])
end
return {0, rc, rp, tc, tp, day, mon}
`

// recordLua adds a response's usage. KEYS: tpm current, day tokens, month
// micro-USD. ARGV: tokens, micro-USD, window TTL ms, day TTL s, month TTL s.
const recordLua = `
local tokens, micro = tonumber(ARGV[1]), tonumber(ARGV[2])
if tokens > 0 then
  redis.call('INCRBY', KEYS[1], tokens)
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  redis.call('INCRBY', KEYS[2], tokens)
  redis.call('EXPIRE', KEYS[2], ARGV[4])
end
if micro > 0 then
  redis.call('INCRBY', KEYS[3], micro)
  redis.call('EXPIRE', KEYS[3], ARGV[5])
end
return 0
`

// Admit counts the request against requests_per_minute and checks tokens
// per minute and the budgets against what Record has added. A refused
// request is not counted. The error is non-nil only when ctx ended; a
// Redis that cannot be used is answered by the per-replica counters.
func (l *Limiter) Admit(ctx context.Context, t store.Tenant) (Decision, error) {
	lim := limitsOf(t)
	if lim.none() {
		return Decision{Allowed: true}, nil
	}
	c := clockAt(l.now())
	if l.redis != nil {
		d, err := l.admitShared(ctx, t.ID, lim, c)
		if err == nil {
			return d, nil
		}
		if ctx.Err() != nil {
			return Decision{}, ctx.Err()
		}
	}
	return l.admitLocal(t.ID, lim, c), nil
}

func (l *Limiter) admitShared(ctx context.Context, tenantID string, lim limits, c clock) (Decision, error) {
	k := l.keys(tenantID, c)
	var res []int64
	err := l.redis.Do(ctx, "limiter.admit", func(ctx context.Context, rc redis.UniversalClient) error {
		var err error
		res, err = l.admitScript.Run(ctx, rc, k[:],
			lim.rpm, lim.tpm, lim.day, lim.monthMicro,
			c.elapsed.Milliseconds(), window.Milliseconds(), windowTTL.Milliseconds(),
		).Int64Slice()
		return err
	})
	if err != nil {
		return Decision{}, err
	}
	if len(res) != 7 {
		return Decision{}, errors.New("redisstate: limiter script returned an unexpected reply")
	}
	f := figures{rpmCur: res[1], rpmPrev: res[2], tpmCur: res[3], tpmPrev: res[4], dayTokens: res[5], monthMicro: res[6]}
	d := lim.decision(int(res[0]), f, c)
	if d.Allowed && lim.rpm > 0 {
		l.local.countRequest(tenantID, c)
	}
	return d, nil
}

func (l *Limiter) admitLocal(tenantID string, lim limits, c clock) Decision {
	// Closed budgets answer a failing Redis. Without Redis at all the local
	// figures are the only ones there are, and they are enforced.
	if l.redis != nil && l.budgetsClosed && lim.budgets() {
		limit := LimitDailyTokenBudget
		if lim.day == 0 {
			limit = LimitMonthlyCostBudgetUSD
		}
		return Decision{Code: CodeBudgetExceeded, Limit: limit, RetryAfter: closedBudgetRetry}
	}
	return l.local.admit(tenantID, lim, c)
}

// Record adds a response's usage: tokens to the minute window and the day,
// cost to the month. It runs after the response, so the request that
// crosses a token limit or budget is not refused; the next one is. Redis
// errors are reported through Options.OnError; the per-replica counters
// always take the usage.
func (l *Limiter) Record(ctx context.Context, tenantID string, tokens int64, costUSD float64) {
	tokens = max(tokens, 0)
	micro := max(toMicro(costUSD), 0)
	if tokens == 0 && micro == 0 {
		return
	}
	c := clockAt(l.now())
	l.local.record(tenantID, tokens, micro, c)
	if l.redis == nil {
		return
	}
	k := l.keys(tenantID, c)
	y, m, d := c.now.Date()
	// Relative TTLs, not EXPIREAT: they hold with any clock, an injected one
	// included, and a period's key outlives the period by a margin for
	// replicas whose clocks lag.
	dayTTL := time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC).Sub(c.now) + time.Hour
	monthTTL := time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC).Sub(c.now) + 24*time.Hour
	_ = l.redis.Do(ctx, "limiter.record", func(ctx context.Context, rc redis.UniversalClient) error {
		return l.recordScript.Run(ctx, rc, []string{k[2], k[4], k[5]},
			tokens, micro, windowTTL.Milliseconds(), int64(dayTTL/time.Second)+1, int64(monthTTL/time.Second)+1,
		).Err()
	})
}

// localCounters are the per-replica figures: the fallback while Redis is
// unavailable, and the only figures without Redis.
type localCounters struct {
	mu      sync.Mutex
	tenants map[string]*localTenant
}

type localTenant struct {
	rpm, tpm   slidingCount
	day        string
	dayTokens  int64
	month      string
	monthMicro int64
}

// slidingCount is one counter's current and previous minute windows.
type slidingCount struct {
	win       int64
	cur, prev int64
}

func (s *slidingCount) at(win int64) {
	switch {
	case win == s.win:
	case win == s.win+1:
		s.prev, s.cur = s.cur, 0
	case win > s.win:
		s.prev, s.cur = 0, 0
	default:
		return // a clock that stepped back keeps the newer window
	}
	s.win = win
}

// tenant returns the tenant's counters moved to c; the caller holds mu.
func (lc *localCounters) tenant(id string, c clock) *localTenant {
	t := lc.tenants[id]
	if t == nil {
		t = &localTenant{}
		lc.tenants[id] = t
	}
	t.rpm.at(c.win)
	t.tpm.at(c.win)
	if t.day != c.day {
		t.day, t.dayTokens = c.day, 0
	}
	if t.month != c.month {
		t.month, t.monthMicro = c.month, 0
	}
	return t
}

func (lc *localCounters) admit(id string, lim limits, c clock) Decision {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	t := lc.tenant(id, c)
	f := figures{
		rpmCur: t.rpm.cur, rpmPrev: t.rpm.prev,
		tpmCur: t.tpm.cur, tpmPrev: t.tpm.prev,
		dayTokens: t.dayTokens, monthMicro: t.monthMicro,
	}
	code := lim.check(f, c)
	if code == refuseNone && lim.rpm > 0 {
		t.rpm.cur++
	}
	return lim.decision(code, f, c)
}

func (lc *localCounters) countRequest(id string, c clock) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	lc.tenant(id, c).rpm.cur++
}

func (lc *localCounters) record(id string, tokens, micro int64, c clock) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	t := lc.tenant(id, c)
	t.tpm.cur += tokens
	t.dayTokens += tokens
	t.monthMicro += micro
}
