package store

import (
	"encoding/json"
	"fmt"
)

// This file holds what every implementation of Store decides the same way,
// so that they cannot drift apart: input checks, audit action names and
// JSON, usage groupings and the plan of a re-seal.

// KindError is an error with a message a person can act on and the sentinel
// (ErrInvalid, ErrConflict, …) the edge maps it by.
type KindError struct {
	Msg  string
	Kind error
}

func (e *KindError) Error() string { return e.Msg }
func (e *KindError) Unwrap() error { return e.Kind }

// Invalidf is an ErrInvalid with a message.
func Invalidf(format string, args ...any) error {
	return &KindError{Msg: fmt.Sprintf(format, args...), Kind: ErrInvalid}
}

// ValidateKey checks a key before it is stored.
func ValidateKey(k Key) error {
	switch {
	case k.ID == "":
		return Invalidf("a key needs an id")
	case len(k.SecretHash) == 0:
		return Invalidf("key %q has no secret hash", k.ID)
	}
	switch k.Kind {
	case KeyClient:
		if k.TenantID == "" {
			return Invalidf("client key %q needs a tenant", k.ID)
		}
	case KeyAdmin:
	case KeyNode:
		if k.NodeID == "" {
			return Invalidf("node key %q needs a node id", k.ID)
		}
	default:
		return Invalidf("key kind %q is not one of client, admin, node", k.Kind)
	}
	return nil
}

// CreateKeyAction is the audit action of creating a key of a kind.
func CreateKeyAction(kind KeyKind) string {
	switch kind {
	case KeyClient:
		return "CreateClientKey"
	case KeyAdmin:
		return "CreateAdminKey"
	}
	return "MintNodeKey"
}

// RevokeKeyAction is the audit action of revoking a key of a kind.
func RevokeKeyAction(kind KeyKind) string {
	switch kind {
	case KeyClient:
		return "RevokeClientKey"
	case KeyAdmin:
		return "RevokeAdminKey"
	}
	return "RevokeNodeKey"
}

// AuditJSON renders an entity for the audit log; the store types' JSON tags
// leave every secret out. nil renders as "" (nothing before a create,
// nothing after a delete).
func AuditJSON(v any) string {
	if v == nil {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		// The store types always marshal; say so rather than lose the entry.
		return fmt.Sprintf(`{"error":%q}`, err.Error())
	}
	return string(b)
}

// UsageGroups checks a query's GroupBy and fills the default (tenant,
// model).
func UsageGroups(groupBy []string) (map[string]bool, error) {
	if len(groupBy) == 0 {
		groupBy = []string{"tenant", "model"}
	}
	g := map[string]bool{}
	for _, name := range groupBy {
		switch name {
		case "tenant", "model", "target", "day", "month":
			g[name] = true
		default:
			return nil, Invalidf("usage cannot be grouped by %q: use tenant, model, target, day or month", name)
		}
	}
	if g["day"] && g["month"] {
		return nil, Invalidf("usage is grouped by day or by month, not both")
	}
	return g, nil
}

// SealedValue is one sealed value a re-seal visits.
type SealedValue struct {
	Ref    SealedRef
	Sealed []byte
}

// Rewrite is a value a re-seal replaces, with the version it is now under.
type Rewrite struct {
	Index   int // into the values planned
	Sealed  []byte
	Version uint32
}

// ResealSummary is what the audit log keeps of a rotation: counts, never
// values.
type ResealSummary struct {
	Rewritten      int64            `json:"rewritten"`
	RowsPerVersion map[uint32]int64 `json:"rows_per_version"`
}

// PlanReseal runs fn over every value and says what to write. It writes
// nothing: the store writes the rewrites only when the report has no
// failure and the call is not a dry run. The report's RowsPerVersion is the
// count after the rewrites; before is the count as stored now.
func PlanReseal(fn Resealer, values []SealedValue) (rewrites []Rewrite, rep ResealReport, before map[uint32]int64) {
	before = map[uint32]int64{}
	after := map[uint32]int64{}
	for i, v := range values {
		old, err := fn.Version(v.Sealed)
		if err != nil {
			rep.Failed = append(rep.Failed, ResealFailure{Ref: v.Ref, Err: err})
			continue
		}
		before[old]++
		nv, err := fn.Reseal(v.Ref, v.Sealed)
		if err != nil {
			rep.Failed = append(rep.Failed, ResealFailure{Ref: v.Ref, Err: err})
			continue
		}
		if nv == nil {
			after[old]++
			continue
		}
		ver, err := fn.Version(nv)
		if err != nil {
			rep.Failed = append(rep.Failed, ResealFailure{Ref: v.Ref, Err: err})
			continue
		}
		after[ver]++
		rewrites = append(rewrites, Rewrite{Index: i, Sealed: nv, Version: ver})
	}
	rep.RowsPerVersion = after
	return rewrites, rep, before
}

// FinishReseal fills the report of a re-seal that wrote nothing (a failure
// or a dry run) and says whether the rewrites should be written.
func FinishReseal(rewrites []Rewrite, rep *ResealReport, before map[uint32]int64, dryRun bool) (write bool) {
	if len(rep.Failed) > 0 || dryRun {
		rep.RowsPerVersion = before
		if dryRun && len(rep.Failed) == 0 {
			rep.Rewritten = int64(len(rewrites))
		}
		return false
	}
	rep.Rewritten = int64(len(rewrites))
	return true
}
