package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-ai/switchyard/gateway/store"
)

var usageColumns = []string{
	"time", "request_id", "tenant_id", "key_id", "model", "target", "input_tokens", "output_tokens", "estimated",
	"cost_usd", "fallback_path", "ttft_ms", "tps", "status", "error_code", "attributes", "duration_ms",
}

// InsertUsage writes a batch with COPY: one round trip, and all or nothing.
func (p *Postgres) InsertUsage(ctx context.Context, events []store.UsageEvent) error {
	if len(events) == 0 {
		return nil
	}
	now := time.Now()
	_, err := p.pool.CopyFrom(ctx, pgx.Identifier{"usage_events"}, usageColumns,
		pgx.CopyFromSlice(len(events), func(i int) ([]any, error) {
			e := events[i]
			if e.Time.IsZero() {
				e.Time = now
			}
			attrs := e.Attributes
			if attrs == nil {
				attrs = map[string]string{}
			}
			return []any{
				e.Time, e.RequestID, e.TenantID, e.KeyID, e.Model, e.Target, e.InputTokens, e.OutputTokens, e.Estimated,
				e.CostUSD, orEmpty(e.FallbackPath), e.TTFTMillis, e.TokensPerSec, int32(e.Status), e.ErrorCode, attrs,
				e.DurationMillis,
			}, nil
		}))
	return fail("insert usage", err)
}

// QueryUsage sums usage per group. A dimension not grouped by is "" in
// every row; periods are UTC days (2006-01-02) or months (2006-01).
func (p *Postgres) QueryUsage(ctx context.Context, q store.UsageQuery) ([]store.UsageRow, error) {
	g, err := store.UsageGroups(q.GroupBy)
	if err != nil {
		return nil, err
	}
	pick := func(on bool, expr string) string {
		if on {
			return expr
		}
		return "''"
	}
	period := "''"
	switch {
	case g["day"]:
		period = `to_char(time AT TIME ZONE 'UTC', 'YYYY-MM-DD')`
	case g["month"]:
		period = `to_char(time AT TIME ZONE 'UTC', 'YYYY-MM')`
	}
	// Only the filters asked for go into the query, so that the planner
	// can use the (tenant_id, time) and time indexes on a large table.
	var where []string
	var args []any
	filter := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if q.TenantID != "" {
		filter("tenant_id = $%d", q.TenantID)
	}
	if q.Model != "" {
		filter("model = $%d", q.Model)
	}
	if !q.Since.IsZero() {
		filter("time >= $%d", q.Since)
	}
	if !q.Until.IsZero() {
		filter("time < $%d", q.Until)
	}
	cond := ""
	if len(where) > 0 {
		cond = "WHERE " + strings.Join(where, " AND ")
	}
	// Every piece of SQL here is one of the fixed strings above; input
	// travels only as arguments.
	sql := `SELECT * FROM (
		SELECT ` + pick(g["tenant"], "tenant_id") + ` AS tenant_id, ` + pick(g["model"], "model") + ` AS model,
			` + pick(g["target"], "target") + ` AS target, ` + period + ` AS period,
			count(*), coalesce(sum(input_tokens), 0)::bigint, coalesce(sum(output_tokens), 0)::bigint,
			coalesce(sum(cost_usd), 0)::double precision
		FROM usage_events ` + cond + `
		GROUP BY 1, 2, 3, 4
	) u ORDER BY u.period COLLATE "C", u.tenant_id COLLATE "C", u.model COLLATE "C", u.target COLLATE "C"`
	rows, err := p.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fail("query usage", err)
	}
	out, err := collect(rows, func(r scanner) (store.UsageRow, error) {
		var u store.UsageRow
		err := r.Scan(&u.TenantID, &u.Model, &u.Target, &u.Period, &u.Requests, &u.InputTokens, &u.OutputTokens, &u.CostUSD)
		return u, err
	})
	return out, fail("query usage", err)
}
