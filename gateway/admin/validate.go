package admin

import (
	"math"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	pb "github.com/switchyard-ai/switchyard/proto/switchyard/v1"

	"github.com/switchyard-ai/switchyard/gateway/store"
)

const maxIDLen = 64

// validID checks the ids of tenants, vendors and nodes: they appear in URLs,
// metric labels and Redis keys, so they stay plain.
func validID(field, id string) error {
	if id == "" {
		return invalid(field, "is required")
	}
	if len(id) > maxIDLen {
		return invalid(field, "is longer than %d characters", maxIDLen)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return invalid(field, "%q may contain only letters, digits, '.', '_' and '-'", id)
		}
	}
	return nil
}

// validModelID allows what model names need (Ollama tags have ':', vendor
// names '/') but nothing that breaks a header, a log line or a label.
func validModelID(field, id string) error {
	if id == "" {
		return invalid(field, "is required")
	}
	if len(id) > 256 {
		return invalid(field, "is longer than 256 characters")
	}
	for _, r := range id {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == '"' || r == '\\' {
			return invalid(field, "%q contains a space, a quote or a control character", id)
		}
	}
	return nil
}

func validName(field, name string) error {
	if len(name) > 200 {
		return invalid(field, "is longer than 200 characters")
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return invalid(field, "contains a control character")
		}
	}
	return nil
}

func nonNegative(field string, v int64) error {
	if v < 0 {
		return invalid(field, "must not be negative (0 means unlimited), got %d", v)
	}
	return nil
}

func nonNegativeFloat(field string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return invalid(field, "must be a number ≥ 0")
	}
	return nil
}

func validateTenant(t *pb.Tenant) error {
	if t == nil {
		return invalid("tenant", "is required")
	}
	if err := validID("tenant.id", t.GetId()); err != nil {
		return err
	}
	if err := validName("tenant.name", t.GetName()); err != nil {
		return err
	}
	for i, m := range t.GetAllowedModels() {
		if err := validModelID(indexed("tenant.allowed_models", i), m); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"tenant.requests_per_minute", t.GetRequestsPerMinute()},
		{"tenant.tokens_per_minute", t.GetTokensPerMinute()},
		{"tenant.daily_token_budget", t.GetDailyTokenBudget()},
	} {
		if err := nonNegative(f.name, f.v); err != nil {
			return err
		}
	}
	return nonNegativeFloat("tenant.monthly_cost_budget_usd", t.GetMonthlyCostBudgetUsd())
}

func validateVendor(v *pb.Vendor) error {
	if v == nil {
		return invalid("vendor", "is required")
	}
	if err := validID("vendor.id", v.GetId()); err != nil {
		return err
	}
	if v.GetId() == store.LocalVendor {
		return invalid("vendor.id", "%q is reserved for models served by nodes", store.LocalVendor)
	}
	return validBaseURL("vendor.base_url", v.GetBaseUrl())
}

func validBaseURL(field, raw string) error {
	if raw == "" {
		return invalid(field, "is required (e.g. https://api.openai.com/v1)")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return invalid(field, "must be an http:// or https:// URL with a host")
	}
	if u.User != nil {
		return invalid(field, "must not carry credentials; set the key with SetVendorKey")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return invalid(field, "must not have a query or fragment")
	}
	return nil
}

func validateAPIKey(field, key string) error {
	if key == "" {
		return invalid(field, "is required")
	}
	if len(key) > 4096 {
		return invalid(field, "is longer than 4096 characters")
	}
	for _, r := range key {
		if r < 0x21 || r > 0x7e {
			return invalid(field, "must be printable ASCII without spaces")
		}
	}
	return nil
}

var effortWords = map[pb.Effort]bool{pb.Effort_EFFORT_LOW: true, pb.Effort_EFFORT_MEDIUM: true, pb.Effort_EFFORT_HIGH: true}

func validateModel(m *pb.Model) error {
	if m == nil {
		return invalid("model", "is required")
	}
	if err := validModelID("model.id", m.GetId()); err != nil {
		return err
	}
	if m.GetId() == "auto" || strings.HasPrefix(m.GetId(), "auto:") {
		return invalid("model.id", "%q is reserved: clients ask for \"auto\" to let the gateway choose", m.GetId())
	}
	if m.GetVendor() != store.LocalVendor {
		if err := validID("model.vendor", m.GetVendor()); err != nil {
			return err
		}
	}
	if m.GetUpstreamModel() != "" {
		if err := validModelID("model.upstream_model", m.GetUpstreamModel()); err != nil {
			return err
		}
	}
	for i, e := range m.GetEfforts() {
		if !effortWords[e] {
			return invalid(indexed("model.efforts", i), "unknown effort %s; use EFFORT_LOW, EFFORT_MEDIUM or EFFORT_HIGH", e)
		}
	}
	for i, c := range m.GetCapabilities() {
		if !capabilityWord(c) {
			return invalid(indexed("model.capabilities", i), "%q is not a capability word (lower-case letters, digits and '_')", c)
		}
	}
	for _, f := range []struct {
		name string
		v    int32
	}{
		{"model.context_window", m.GetContextWindow()},
		{"model.default_max_tokens", m.GetDefaultMaxTokens()},
		{"model.queue_timeout_ms", m.GetQueueTimeoutMs()},
	} {
		if err := nonNegative(f.name, int64(f.v)); err != nil {
			return err
		}
	}
	for i, f := range m.GetFallbacks() {
		if err := validModelID(indexed("model.fallbacks", i), f); err != nil {
			return err
		}
		if f == m.GetId() {
			return invalid(indexed("model.fallbacks", i), "a model cannot fall back to itself")
		}
	}
	if err := nonNegativeFloat("model.input_price_per_mtok", m.GetInputPricePerMtok()); err != nil {
		return err
	}
	return nonNegativeFloat("model.output_price_per_mtok", m.GetOutputPricePerMtok())
}

func capabilityWord(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

func indexed(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }
