package openai

import (
	"encoding/json"
	"net/http"
)

type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// serveModels lists the models this key may use, plus "auto".
func (h *Handler) serveModels(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Request-Id", requestID(r))
	snap := h.o.Config.Current()
	_, tenant, aerr := h.authenticate(r.Context(), r, snap)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	models := snap.Routes.Models(tenant)
	out := struct {
		Object string       `json:"object"`
		Data   []modelEntry `json:"data"`
	}{Object: "list", Data: make([]modelEntry, 0, len(models)+1)}
	out.Data = append(out.Data, modelEntry{ID: "auto", Object: "model", OwnedBy: "switchyard"})
	for _, m := range models {
		owner := m.Vendor
		created := m.CreatedAt.Unix()
		if m.CreatedAt.IsZero() {
			created = 0
		}
		out.Data = append(out.Data, modelEntry{ID: m.ID, Object: "model", Created: created, OwnedBy: owner})
	}
	b, _ := json.Marshal(out)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
