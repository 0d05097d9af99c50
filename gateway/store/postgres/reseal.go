package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-ai/switchyard/gateway/store"
)

// sealedRow is one sealed value ResealAll visits.
type sealedRow struct {
	ref    store.SealedRef
	sealed []byte
}

// resealSummary is what the audit log keeps of a rotation: counts, never
// values.
type resealSummary struct {
	Rewritten      int64            `json:"rewritten"`
	RowsPerVersion map[uint32]int64 `json:"rows_per_version"`
}

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
		var values []sealedRow
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
			got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sealedRow, error) {
				v := sealedRow{ref: store.SealedRef{Table: q.table, Column: q.column}}
				err := r.Scan(&v.ref.Row, &v.sealed)
				return v, err
			})
			if err != nil {
				return nil, err
			}
			values = append(values, got...)
		}

		before := map[uint32]int64{}
		after := map[uint32]int64{}
		type rewrite struct {
			ref     store.SealedRef
			sealed  []byte
			version uint32
		}
		var rewrites []rewrite
		for _, v := range values {
			old, err := fn.Version(v.sealed)
			if err != nil {
				rep.Failed = append(rep.Failed, store.ResealFailure{Ref: v.ref, Err: err})
				continue
			}
			before[old]++
			nv, err := fn.Reseal(v.ref, v.sealed)
			if err != nil {
				rep.Failed = append(rep.Failed, store.ResealFailure{Ref: v.ref, Err: err})
				continue
			}
			if nv == nil {
				after[old]++
				continue
			}
			ver, err := fn.Version(nv)
			if err != nil {
				rep.Failed = append(rep.Failed, store.ResealFailure{Ref: v.ref, Err: err})
				continue
			}
			after[ver]++
			rewrites = append(rewrites, rewrite{v.ref, nv, ver})
		}
		if len(rep.Failed) > 0 || dryRun {
			rep.RowsPerVersion = before
			if dryRun && len(rep.Failed) == 0 {
				rep.Rewritten = int64(len(rewrites))
			}
			return nil, nil // write rolls back
		}
		for _, r := range rewrites {
			var err error
			switch r.ref.Table {
			case "vendors":
				_, err = tx.Exec(ctx, `UPDATE vendors SET api_key_sealed = $2, key_version = $3, updated_at = now()
					WHERE id = $1`, r.ref.Row, r.sealed, int64(r.version))
			case "api_keys":
				_, err = tx.Exec(ctx, "UPDATE api_keys SET secret_sealed = $2 WHERE id = $1", r.ref.Row, r.sealed)
			}
			if err != nil {
				return nil, err
			}
		}
		rep.Rewritten = int64(len(rewrites))
		rep.RowsPerVersion = after
		if rep.Rewritten == 0 {
			return nil, nil
		}
		return []change{{"RotateEncryption", "keyring",
			resealSummary{RowsPerVersion: before},
			resealSummary{Rewritten: rep.Rewritten, RowsPerVersion: after}}}, nil
	})
	if err != nil {
		return store.ResealReport{}, err
	}
	return rep, nil
}
