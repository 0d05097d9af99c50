package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-ai/switchyard/gateway/store"
)

// ResealAll locks every row holding a sealed value (FOR UPDATE) before it
// reads them and keeps the locks until it commits or rolls back. A
// SetVendorKey or a node key revocation that comes meanwhile waits on the row
// lock, then applies on top of the rewritten value, so it is never lost; one
// that committed first is what ResealAll reads. The Resealer runs inside the
// transaction and must not use the store.
func (p *Postgres) ResealAll(ctx context.Context, a store.Actor, fn store.Resealer, dryRun bool) (store.ResealReport, error) {
	var rep store.ResealReport
	err := p.write(ctx, a, "reseal", func(tx pgx.Tx) ([]change, error) {
		rep = store.ResealReport{}
		var values []store.SealedValue
		for _, q := range []struct{ table, column string }{
			{"vendors", "api_key_sealed"},
			{"api_keys", "secret_sealed"},
		} {
			// Table and column are ours, never input.
			rows, err := tx.Query(ctx, "SELECT id, "+q.column+" FROM "+q.table+
				" WHERE "+q.column+` IS NOT NULL ORDER BY id COLLATE "C" FOR UPDATE`)
			if err != nil {
				return nil, err
			}
			got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.SealedValue, error) {
				v := store.SealedValue{Ref: store.SealedRef{Table: q.table, Column: q.column}}
				err := r.Scan(&v.Ref.Row, &v.Sealed)
				return v, err
			})
			if err != nil {
				return nil, err
			}
			values = append(values, got...)
		}

		rewrites, plan, before := store.PlanReseal(fn, values)
		rep = plan
		if !store.FinishReseal(rewrites, &rep, before, dryRun) {
			return nil, nil // write rolls back
		}
		for _, r := range rewrites {
			ref := values[r.Index].Ref
			var err error
			switch ref.Table {
			case "vendors":
				_, err = tx.Exec(ctx, `UPDATE vendors SET api_key_sealed = $2, key_version = $3, updated_at = now()
					WHERE id = $1`, ref.Row, r.Sealed, int64(r.Version))
			case "api_keys":
				_, err = tx.Exec(ctx, "UPDATE api_keys SET secret_sealed = $2 WHERE id = $1", ref.Row, r.Sealed)
			}
			if err != nil {
				return nil, err
			}
		}
		if rep.Rewritten == 0 {
			return nil, nil
		}
		return []change{{"RotateEncryption", "keyring",
			store.ResealSummary{RowsPerVersion: before},
			store.ResealSummary{Rewritten: rep.Rewritten, RowsPerVersion: rep.RowsPerVersion}}}, nil
	})
	if err != nil {
		return store.ResealReport{}, err
	}
	return rep, nil
}
