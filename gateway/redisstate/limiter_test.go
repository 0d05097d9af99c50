package redisstate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/internal/testenv"
)

// base is a minute boundary plus 10 s, so that tests know the elapsed part
// of the window.
var base = time.Date(2031, 3, 4, 10, 0, 10, 0, time.UTC)

func admit(t *testing.T, l *Limiter, tn store.Tenant) Decision {
	t.Helper()
	d, err := l.Admit(context.Background(), tn)
	if err != nil {
		t.Fatalf("Admit: %v", err)
	}
	return d
}

// admitUntilRefused admits up to max requests and returns how many passed
// and the first refusal.
func admitUntilRefused(t *testing.T, l *Limiter, tn store.Tenant, max int) (int, Decision) {
	t.Helper()
	for i := range max {
		if d := admit(t, l, tn); !d.Allowed {
			return i, d
		}
	}
	return max, Decision{Allowed: true}
}

func wantRefusal(t *testing.T, d Decision, code, limit string) {
	t.Helper()
	if d.Allowed || d.Code != code || d.Limit != limit {
		t.Fatalf("decision = %+v, want refused with %s / %s", d, code, limit)
	}
	if d.RetryAfter <= 0 {
		t.Errorf("RetryAfter = %v, want > 0", d.RetryAfter)
	}
}

func near(got, want time.Duration) bool {
	d := got - want
	return d > -5*time.Millisecond && d < 5*time.Millisecond
}

func TestAdmitRequestsPerMinute(t *testing.T) {
	clk := newFakeClock(base)
	r, raw := sharedRedis(t, Options{})
	l := NewLimiter(r, LimiterOptions{Now: clk.Now})
	tn := store.Tenant{ID: "acme", RequestsPerMinute: 5}

	n, d := admitUntilRefused(t, l, tn, 10)
	if n != 5 {
		t.Fatalf("%d requests admitted, want 5", n)
	}
	wantRefusal(t, d, CodeRateLimitExceeded, LimitRequestsPerMinute)
	if d.RetryAfter > time.Minute {
		t.Errorf("RetryAfter = %v, want ≤ 60 s", d.RetryAfter)
	}
	// The window is full; the next one starts in 50 s and the full window
	// then fades, so the first retry passes just after it starts.
	if !near(d.RetryAfter, 50*time.Second) {
		t.Errorf("RetryAfter = %v, want about 50 s", d.RetryAfter)
	}

	// Refused requests are not counted.
	for range 5 {
		admit(t, l, tn)
	}
	got, err := raw.Get(context.Background(), l.keys(tn.ID, clockAt(clk.Now()))[0]).Int64()
	if err != nil || got != 5 {
		t.Errorf("request counter = %d, %v; want 5", got, err)
	}

	clk.Advance(d.RetryAfter)
	if d := admit(t, l, tn); !d.Allowed {
		t.Errorf("after RetryAfter: %+v, want allowed", d)
	}
}

// The previous minute weighs by the part of it still inside the last 60 s.
func TestAdmitSlidingWindow(t *testing.T) {
	clk := newFakeClock(base)
	r, _ := sharedRedis(t, Options{})
	l := NewLimiter(r, LimiterOptions{Now: clk.Now})
	tn := store.Tenant{ID: "slide", RequestsPerMinute: 10}

	if n, _ := admitUntilRefused(t, l, tn, 20); n != 10 {
		t.Fatalf("first minute: %d admitted, want 10", n)
	}

	// 15 s into the next minute the previous one weighs 0.75: 7.5, so three
	// more pass (7.5+2 < 10, 7.5+3 ≥ 10).
	clk.Set(base.Truncate(time.Minute).Add(time.Minute + 15*time.Second))
	n, d := admitUntilRefused(t, l, tn, 20)
	if n != 3 {
		t.Fatalf("at 0:15 of the next minute: %d admitted, want 3", n)
	}
	wantRefusal(t, d, CodeRateLimitExceeded, LimitRequestsPerMinute)
	// 10×(1−f) + 3 < 10 once f > 0.3, i.e. at 0:18: 3 s from now.
	if !near(d.RetryAfter, 3*time.Second) {
		t.Errorf("RetryAfter = %v, want about 3 s", d.RetryAfter)
	}

	// At 0:30 it weighs 0.5: 5 + 3 = 8, so two more.
	clk.Set(base.Truncate(time.Minute).Add(time.Minute + 30*time.Second))
	if n, _ := admitUntilRefused(t, l, tn, 20); n != 2 {
		t.Errorf("at 0:30 of the next minute: %d admitted, want 2", n)
	}

	// Two minutes on, nothing of the first minute is left.
	clk.Set(base.Truncate(time.Minute).Add(3 * time.Minute))
	if n, _ := admitUntilRefused(t, l, tn, 20); n != 10 {
		t.Errorf("two minutes on: %d admitted, want 10", n)
	}
}

func TestAdmitTokensPerMinute(t *testing.T) {
	clk := newFakeClock(base)
	r, _ := sharedRedis(t, Options{})
	l := NewLimiter(r, LimiterOptions{Now: clk.Now})
	tn := store.Tenant{ID: "tok", TokensPerMinute: 1000}
	ctx := context.Background()

	if d := admit(t, l, tn); !d.Allowed {
		t.Fatalf("first request: %+v", d)
	}
	l.Record(ctx, tn.ID, 600, 0)
	if d := admit(t, l, tn); !d.Allowed {
		t.Fatalf("at 600 of 1000 tokens: %+v", d)
	}
	// The last request may overshoot: tokens are known only afterwards.
	l.Record(ctx, tn.ID, 700, 0)
	d := admit(t, l, tn)
	wantRefusal(t, d, CodeRateLimitExceeded, LimitTokensPerMinute)
	// 1300 in this window: the next one must fade it below 1000, f > 3/13.
	want := 50*time.Second + time.Minute*3/13
	if !near(d.RetryAfter, want) {
		t.Errorf("RetryAfter = %v, want about %v", d.RetryAfter, want)
	}
	clk.Advance(d.RetryAfter)
	if d := admit(t, l, tn); !d.Allowed {
		t.Errorf("after RetryAfter: %+v", d)
	}
}

func TestAdmitTokensReachingTheLimitRefuse(t *testing.T) {
	clk := newFakeClock(base)
	r, _ := sharedRedis(t, Options{})
	l := NewLimiter(r, LimiterOptions{Now: clk.Now})
	tn := store.Tenant{ID: "exact", TokensPerMinute: 1000}
	l.Record(context.Background(), tn.ID, 1000, 0)
	wantRefusal(t, admit(t, l, tn), CodeRateLimitExceeded, LimitTokensPerMinute)
}

// The daily budget is per UTC date, whatever the clock's zone.
func TestDailyBudgetResetsAtUTCDay(t *testing.T) {
	// 04:59:30 at UTC+5 is 23:59:30 UTC.
	zone := time.FixedZone("UTC+5", 5*3600)
	clk := newFakeClock(time.Date(2031, 3, 5, 4, 59, 30, 0, zone))
	r, raw := sharedRedis(t, Options{})
	l := NewLimiter(r, LimiterOptions{Now: clk.Now})
	tn := store.Tenant{ID: "daily", DailyTokenBudget: 1000}
	ctx := context.Background()

	l.Record(ctx, tn.ID, 999, 0)
	if d := admit(t, l, tn); !d.Allowed {
		t.Fatalf("at 999 of 1000: %+v", d)
	}
	l.Record(ctx, tn.ID, 1, 0)
	d := admit(t, l, tn)
	wantRefusal(t, d, CodeBudgetExceeded, LimitDailyTokenBudget)
	if d.RetryAfter != 30*time.Second {
		t.Errorf("RetryAfter = %v, want 30 s (to 00:00 UTC)", d.RetryAfter)
	}
	key := l.keys(tn.ID, clockAt(clk.Now()))[4]
	if !strings.Contains(key, "20310304") {
		t.Errorf("day key %q is not keyed by the UTC date", key)
	}
	if ttl := raw.TTL(ctx, key).Val(); ttl <= 0 || ttl > 26*time.Hour {
		t.Errorf("day key TTL = %v, want set and about a day at most", ttl)
	}

	clk.Advance(31 * time.Second)
	if d := admit(t, l, tn); !d.Allowed {
		t.Errorf("on the next UTC day: %+v", d)
	}
}

func TestMonthlyCostBudget(t *testing.T) {
	clk := newFakeClock(time.Date(2031, 1, 31, 12, 0, 0, 0, time.UTC))
	r, raw := sharedRedis(t, Options{})
	l := NewLimiter(r, LimiterOptions{Now: clk.Now})
	tn := store.Tenant{ID: "spend", MonthlyCostBudgetUSD: 1}
	ctx := context.Background()

	l.Record(ctx, tn.ID, 0, 0.4)
	l.Record(ctx, tn.ID, 0, 0.4000004) // rounds to whole micro-dollars
	if d := admit(t, l, tn); !d.Allowed {
		t.Fatalf("at $0.80 of $1: %+v", d)
	}
	key := l.keys(tn.ID, clockAt(clk.Now()))[5]
	if got, err := raw.Get(ctx, key).Int64(); err != nil || got != 800_000 {
		t.Errorf("month key = %d, %v; want 800000 micro-dollars", got, err)
	}
	if ttl := raw.TTL(ctx, key).Val(); ttl <= 0 {
		t.Errorf("month key TTL = %v, want set", ttl)
	}
	l.Record(ctx, tn.ID, 0, 0.2)
	d := admit(t, l, tn)
	wantRefusal(t, d, CodeBudgetExceeded, LimitMonthlyCostBudgetUSD)
	if d.RetryAfter != 12*time.Hour {
		t.Errorf("RetryAfter = %v, want 12 h (to 1 February UTC)", d.RetryAfter)
	}
	clk.Advance(12 * time.Hour)
	if d := admit(t, l, tn); !d.Allowed {
		t.Errorf("in February: %+v", d)
	}
}

// Two replicas share one Redis and so one count.
func TestReplicasShareCounts(t *testing.T) {
	clk := newFakeClock(base)
	_, prefix := testenv.Redis(t)
	replica := func() *Limiter {
		return NewLimiter(guarded(t, testenv.RedisURL(), Options{Prefix: prefix, Timeout: testTimeout}, nil), LimiterOptions{Now: clk.Now})
	}
	a, b := replica(), replica()
	tn := store.Tenant{ID: "shared", RequestsPerMinute: 4, TokensPerMinute: 100}

	allowed := 0
	for i := range 10 {
		l := a
		if i%2 == 1 {
			l = b
		}
		if admit(t, l, tn).Allowed {
			allowed++
		}
	}
	if allowed != 4 {
		t.Errorf("%d admitted across two replicas, want 4", allowed)
	}

	// Tokens recorded on one replica count on the other.
	clk.Advance(2 * time.Minute)
	a.Record(context.Background(), tn.ID, 100, 0)
	wantRefusal(t, admit(t, b, tn), CodeRateLimitExceeded, LimitTokensPerMinute)
}

func TestZeroLimitsAreUnlimited(t *testing.T) {
	r, raw := sharedRedis(t, Options{})
	tn := store.Tenant{ID: "free"}
	for _, l := range []*Limiter{NewLimiter(r, LimiterOptions{}), NewLimiter(nil, LimiterOptions{BudgetOnFailure: BudgetClosed})} {
		for range 500 {
			if d := admit(t, l, tn); !d.Allowed {
				t.Fatalf("unlimited tenant refused: %+v", d)
			}
		}
		l.Record(context.Background(), tn.ID, 1_000_000, 1000)
		if d := admit(t, l, tn); !d.Allowed {
			t.Fatalf("unlimited tenant refused after usage: %+v", d)
		}
	}
	// Nothing to count, so nothing was asked of Redis for admission.
	keys, err := raw.Keys(context.Background(), "*"+r.prefix+"tenant:free}:rpm:*").Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("request counters %v, %v; want none", keys, err)
	}
}

// Limits hold per replica while Redis is down.
func TestRedisDownLimitsPerReplica(t *testing.T) {
	clk := newFakeClock(base)
	for _, tc := range []struct {
		name string
		r    func(t *testing.T) *Redis
	}{
		{"closed port", func(t *testing.T) *Redis {
			return guarded(t, "redis://"+closedAddr(t)+"/0", Options{}, nil)
		}},
		{"no Redis", func(*testing.T) *Redis { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLimiter(tc.r(t), LimiterOptions{Now: clk.Now})
			tn := store.Tenant{ID: "down", RequestsPerMinute: 3, TokensPerMinute: 500}
			n, d := admitUntilRefused(t, l, tn, 10)
			if n != 3 {
				t.Fatalf("%d admitted with Redis down, want 3", n)
			}
			wantRefusal(t, d, CodeRateLimitExceeded, LimitRequestsPerMinute)
			if d.RetryAfter > time.Minute {
				t.Errorf("RetryAfter = %v, want ≤ 60 s", d.RetryAfter)
			}
			clk.Advance(2 * time.Minute)
			l.Record(context.Background(), tn.ID, 500, 0)
			wantRefusal(t, admit(t, l, tn), CodeRateLimitExceeded, LimitTokensPerMinute)
		})
	}
}

// What this replica counted while Redis was up still counts when it goes.
func TestLocalCountersFollowSharedOnes(t *testing.T) {
	clk := newFakeClock(base)
	r, _ := sharedRedis(t, Options{})
	l := NewLimiter(r, LimiterOptions{Now: clk.Now})
	tn := store.Tenant{ID: "mirror", RequestsPerMinute: 5}
	for range 4 {
		if !admit(t, l, tn).Allowed {
			t.Fatal("refused while under the limit")
		}
	}
	l.redis = guarded(t, "redis://"+closedAddr(t)+"/0", Options{}, nil) // Redis goes away
	if n, _ := admitUntilRefused(t, l, tn, 10); n != 1 {
		t.Errorf("%d admitted after the outage began, want 1 (4 already counted)", n)
	}
}

func TestBudgetsOnRedisFailure(t *testing.T) {
	clk := newFakeClock(base)
	budgeted := store.Tenant{ID: "b", RequestsPerMinute: 100, DailyTokenBudget: 1000, MonthlyCostBudgetUSD: 10}
	unbudgeted := store.Tenant{ID: "u", RequestsPerMinute: 100}

	t.Run("open", func(t *testing.T) {
		l := NewLimiter(guarded(t, "redis://"+closedAddr(t)+"/0", Options{}, nil), LimiterOptions{BudgetOnFailure: BudgetOpen, Now: clk.Now})
		if d := admit(t, l, budgeted); !d.Allowed {
			t.Fatalf("budget open: %+v, want allowed", d)
		}
		// This replica's own figures still stop a tenant it saw overspend.
		l.Record(context.Background(), budgeted.ID, 1000, 0)
		wantRefusal(t, admit(t, l, budgeted), CodeBudgetExceeded, LimitDailyTokenBudget)
	})
	t.Run("closed", func(t *testing.T) {
		l := NewLimiter(guarded(t, "redis://"+closedAddr(t)+"/0", Options{}, nil), LimiterOptions{BudgetOnFailure: BudgetClosed, Now: clk.Now})
		d := admit(t, l, budgeted)
		wantRefusal(t, d, CodeBudgetExceeded, LimitDailyTokenBudget)
		if d.RetryAfter != closedBudgetRetry {
			t.Errorf("RetryAfter = %v, want %v", d.RetryAfter, closedBudgetRetry)
		}
		if d := admit(t, l, unbudgeted); !d.Allowed {
			t.Errorf("a tenant without budgets: %+v, want allowed", d)
		}
	})
	t.Run("closed without Redis", func(t *testing.T) {
		// No Redis is not a Redis failure: the replica's figures are the
		// only ones, and they are enforced.
		l := NewLimiter(nil, LimiterOptions{BudgetOnFailure: BudgetClosed, Now: clk.Now})
		if d := admit(t, l, budgeted); !d.Allowed {
			t.Fatalf("no Redis, budget closed: %+v, want allowed", d)
		}
		l.Record(context.Background(), budgeted.ID, 0, 10)
		wantRefusal(t, admit(t, l, budgeted), CodeBudgetExceeded, LimitMonthlyCostBudgetUSD)
	})
}

// A tenant's keys share one hash tag, so the script's keys sit in one
// Cluster slot, and carry TTLs so that nothing lingers.
func TestLimiterKeys(t *testing.T) {
	clk := newFakeClock(base)
	r, raw := sharedRedis(t, Options{})
	l := NewLimiter(r, LimiterOptions{Now: clk.Now})
	tn := store.Tenant{ID: "keys", RequestsPerMinute: 10, TokensPerMinute: 10, DailyTokenBudget: 10, MonthlyCostBudgetUSD: 10}
	ctx := context.Background()
	admit(t, l, tn)
	l.Record(ctx, tn.ID, 1, 0.01)

	keys := l.keys(tn.ID, clockAt(clk.Now()))
	tag := "{" + r.prefix + "tenant:keys}"
	for _, k := range keys {
		if !strings.HasPrefix(k, tag+":") {
			t.Errorf("key %q does not start with the hash tag %q", k, tag)
		}
	}
	for _, i := range []int{0, 2} {
		if ttl := raw.PTTL(ctx, keys[i]).Val(); ttl <= 0 || ttl > windowTTL {
			t.Errorf("%s TTL = %v, want in (0, %v]", keys[i], ttl, windowTTL)
		}
	}
	for _, i := range []int{4, 5} {
		if ttl := raw.TTL(ctx, keys[i]).Val(); ttl <= 0 {
			t.Errorf("%s TTL = %v, want set", keys[i], ttl)
		}
	}
}

func TestWindowWait(t *testing.T) {
	tests := []struct {
		name                 string
		cur, prev, limit     int64
		elapsed, wantAtLeast time.Duration
		wantAtMost           time.Duration
	}{
		{"full window", 5, 0, 5, 10 * time.Second, 50 * time.Second, 50*time.Second + time.Millisecond},
		{"fading previous", 3, 10, 10, 15 * time.Second, 3 * time.Second, 3*time.Second + 2*time.Millisecond},
		{"limit of one", 1, 1, 1, 59 * time.Second, time.Second, time.Second + time.Millisecond},
		{"overshoot", 20, 0, 10, 0, 90 * time.Second, 90*time.Second + time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := windowWait(tt.cur, tt.prev, tt.limit, tt.elapsed)
			if got < tt.wantAtLeast || got > tt.wantAtMost {
				t.Errorf("windowWait = %v, want in [%v, %v]", got, tt.wantAtLeast, tt.wantAtMost)
			}
		})
	}
}

func BenchmarkAdmit(b *testing.B) {
	r, _ := sharedRedis(b, Options{})
	l := NewLimiter(r, LimiterOptions{})
	tn := store.Tenant{ID: "bench", RequestsPerMinute: 1 << 40, TokensPerMinute: 1 << 40, DailyTokenBudget: 1 << 40, MonthlyCostBudgetUSD: 1e9}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		d, err := l.Admit(ctx, tn)
		if err != nil || !d.Allowed {
			b.Fatalf("Admit = %+v, %v", d, err)
		}
	}
	if !r.Available() {
		b.Fatal("Redis became unavailable: the benchmark measured the fallback")
	}
}
