package admin

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/switchyard-ai/switchyard/proto/switchyard/v1"

	"github.com/switchyard-ai/switchyard/gateway/store"
)

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func tsPtr(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return ts(*t)
}

func fromTS(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

func tenantToPB(t store.Tenant) *pb.Tenant {
	return &pb.Tenant{
		Id:                   t.ID,
		Name:                 t.Name,
		AllowedModels:        t.AllowedModels,
		RequestsPerMinute:    t.RequestsPerMinute,
		TokensPerMinute:      t.TokensPerMinute,
		DailyTokenBudget:     t.DailyTokenBudget,
		MonthlyCostBudgetUsd: t.MonthlyCostBudgetUSD,
		Priority:             t.Priority,
		Interactive:          t.Interactive,
		CreatedAt:            ts(t.CreatedAt),
		UpdatedAt:            ts(t.UpdatedAt),
	}
}

func tenantFromPB(t *pb.Tenant) store.Tenant {
	return store.Tenant{
		ID:                   t.GetId(),
		Name:                 t.GetName(),
		AllowedModels:        t.GetAllowedModels(),
		RequestsPerMinute:    t.GetRequestsPerMinute(),
		TokensPerMinute:      t.GetTokensPerMinute(),
		DailyTokenBudget:     t.GetDailyTokenBudget(),
		MonthlyCostBudgetUSD: t.GetMonthlyCostBudgetUsd(),
		Priority:             t.GetPriority(),
		Interactive:          t.GetInteractive(),
	}
}

func clientKeyToPB(k store.Key) *pb.ClientKey {
	return &pb.ClientKey{Id: k.ID, TenantId: k.TenantID, Name: k.Name, CreatedAt: ts(k.CreatedAt), RevokedAt: tsPtr(k.RevokedAt)}
}

func adminKeyToPB(k store.Key) *pb.AdminKey {
	return &pb.AdminKey{Id: k.ID, Name: k.Name, CreatedAt: ts(k.CreatedAt), RevokedAt: tsPtr(k.RevokedAt)}
}

func vendorToPB(v store.Vendor, pausedUntil time.Time) *pb.Vendor {
	return &pb.Vendor{
		Id:          v.ID,
		BaseUrl:     v.BaseURL,
		Enabled:     v.Enabled,
		KeySet:      len(v.KeySealed) > 0,
		KeyVersion:  v.KeyVersion,
		PausedUntil: ts(pausedUntil),
		CreatedAt:   ts(v.CreatedAt),
		UpdatedAt:   ts(v.UpdatedAt),
	}
}

var effortNames = map[pb.Effort]string{
	pb.Effort_EFFORT_LOW:    "low",
	pb.Effort_EFFORT_MEDIUM: "medium",
	pb.Effort_EFFORT_HIGH:   "high",
}

func effortFromName(s string) pb.Effort {
	for e, n := range effortNames {
		if n == s {
			return e
		}
	}
	return pb.Effort_EFFORT_UNSPECIFIED
}

func modelToPB(m store.Model) *pb.Model {
	efforts := make([]pb.Effort, 0, len(m.Efforts))
	for _, e := range m.Efforts {
		efforts = append(efforts, effortFromName(e))
	}
	return &pb.Model{
		Id:                 m.ID,
		Vendor:             m.Vendor,
		UpstreamModel:      m.UpstreamModel,
		Efforts:            efforts,
		Capabilities:       m.Capabilities,
		ContextWindow:      m.ContextWindow,
		DefaultMaxTokens:   m.DefaultMaxTokens,
		QueueTimeoutMs:     m.QueueTimeoutMS,
		Fallbacks:          m.Fallbacks,
		InputPricePerMtok:  m.InputPricePerMTok,
		OutputPricePerMtok: m.OutputPricePerMTok,
		Enabled:            m.Enabled,
		CreatedAt:          ts(m.CreatedAt),
		UpdatedAt:          ts(m.UpdatedAt),
	}
}

func auditToPB(e store.AuditEntry) *pb.AuditEntry {
	return &pb.AuditEntry{
		Id:         e.ID,
		Time:       ts(e.Time),
		ActorKeyId: e.ActorKeyID,
		Action:     e.Action,
		Entity:     e.Entity,
		BeforeJson: e.BeforeJSON,
		AfterJson:  e.AfterJSON,
	}
}

func usageToPB(r store.UsageRow) *pb.UsageRow {
	return &pb.UsageRow{
		TenantId:     r.TenantID,
		Model:        r.Model,
		Target:       r.Target,
		Period:       r.Period,
		Requests:     r.Requests,
		InputTokens:  r.InputTokens,
		OutputTokens: r.OutputTokens,
		CostUsd:      r.CostUSD,
	}
}
