package openai

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Stable error codes (SPEC §3.3). Clients and dashboards match on them.
const (
	CodeInvalidRequest  = "invalid_request"
	CodeInvalidAPIKey   = "invalid_api_key"
	CodeModelNotFound   = "model_not_found"
	CodeModelNotAllowed = "model_not_allowed"
	CodeRateLimit       = "rate_limit_exceeded"
	CodeBudget          = "budget_exceeded"
	CodeNoCapacity      = "no_capacity"
	CodeUpstreamError   = "upstream_error"
	CodeUpstreamTimeout = "upstream_timeout"
	CodeAuthUnavailable = "auth_unavailable"
	CodeInternal        = "internal_error"
)

// apiError is an error as the client sees it: an HTTP status and OpenAI's
// error JSON. Messages are written for people and never carry a key, a
// vendor's credentials or a stack trace.
type apiError struct {
	status     int
	code       string
	message    string
	param      string
	retryAfter time.Duration
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func errorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Code    string  `json:"code"`
	Param   *string `json:"param"`
}

func (e *apiError) body() []byte {
	d := errorDetail{Message: e.message, Type: errorType(e.status), Code: e.code}
	if e.param != "" {
		d.Param = &e.param
	}
	b, _ := json.Marshal(errorBody{Error: d})
	return b
}

func writeError(w http.ResponseWriter, e *apiError) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfterSeconds(e.retryAfter)))
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(e.body())
}

// retryAfterSeconds rounds up: a client told 0 would retry at once.
func retryAfterSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}

func badRequest(msg, param string) *apiError {
	return &apiError{status: http.StatusBadRequest, code: CodeInvalidRequest, message: msg, param: param}
}
