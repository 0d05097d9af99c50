package upstream

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestRedact(t *testing.T) {
	const key = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx"
	tests := []struct {
		name, in, want string
	}{
		{"whole key", "bad key " + key + "!", "bad key [redacted]!"},
		{"twice", key + "," + key, "[redacted],[redacted]"},
		{"first eight", "key sk-proj-**** refused", "key [redacted]**** refused"},
		{"last eight", "key ends …QrStUvWx.", "key ends …[redacted]."},
		{"inner run, maximal", "got EfGhIjKlMnO here", "got [redacted] here"},
		{"seven is not enough", "got EfGhIjK here", "got EfGhIjK here"},
		{"nothing to hide", "model not found", "model not found"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := redact(tt.in, key); got != tt.want {
				t.Errorf("redact(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
	if got := redact("short abc", "abc"); got != "short [redacted]" {
		t.Errorf("short key: %q", got)
	}
	if got := redact("anything", ""); got != "anything" {
		t.Errorf("empty key: %q", got)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	tests := []struct {
		name string
		h    http.Header
		want time.Duration
	}{
		{"none", http.Header{}, 0},
		{"seconds", http.Header{"Retry-After": {"30"}}, 30 * time.Second},
		{"spaces", http.Header{"Retry-After": {" 5 "}}, 5 * time.Second},
		{"zero", http.Header{"Retry-After": {"0"}}, 0},
		{"negative", http.Header{"Retry-After": {"-5"}}, 0},
		{"date", http.Header{"Retry-After": {now.Add(2 * time.Minute).Format(http.TimeFormat)}}, 2 * time.Minute},
		{"past date", http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}}, 0},
		{"garbage", http.Header{"Retry-After": {"soon"}}, 0},
		{"capped seconds", http.Header{"Retry-After": {"999999999999"}}, maxRetryAfter},
		{"capped date", http.Header{"Retry-After": {now.Add(48 * time.Hour).Format(http.TimeFormat)}}, maxRetryAfter},
		{"ms wins", http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"1"}}, 250 * time.Millisecond},
		{"ms fraction", http.Header{"Retry-After-Ms": {"1.5"}}, 1500 * time.Microsecond},
		{"ms garbage falls back", http.Header{"Retry-After-Ms": {"NaN"}, "Retry-After": {"4"}}, 4 * time.Second},
		{"ms huge", http.Header{"Retry-After-Ms": {"+Inf"}}, maxRetryAfter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := retryAfter(tt.h, now); got != tt.want {
				t.Errorf("retryAfter = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestUpstreamMessage(t *testing.T) {
	tests := []struct{ body, want string }{
		{`{"error":{"message":"m1","type":"x"}}`, "m1"},
		{`{"error":"m2"}`, "m2"},
		{`{"message":"m3"}`, "m3"},
		{`{"detail":"m4"}`, "m4"},
		{`{"detail":[{"loc":["body"]}]}`, `{"detail":[{"loc":["body"]}]}`},
		{"  plain text\n", "plain text"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := upstreamMessage([]byte(tt.body)); got != tt.want {
			t.Errorf("upstreamMessage(%q) = %q, want %q", tt.body, got, tt.want)
		}
	}
}

func TestStatusErrorBoundsMessage(t *testing.T) {
	e := statusError("vendor:x", 500, http.Header{}, []byte(strings.Repeat("é", 2000)), "", time.Now())
	if len(e.Message) > maxMessage+len("…") || !strings.HasSuffix(e.Message, "…") {
		t.Errorf("message of %d bytes not truncated", len(e.Message))
	}
	if !strings.HasPrefix(e.Error(), "upstream vendor:x: status_5xx (HTTP 500): ") {
		t.Errorf("Error() = %.60q", e.Error())
	}
}

func TestErrorRetryable(t *testing.T) {
	for _, k := range []ErrorKind{Connect, Timeout, Status5xx, RateLimited, Auth, Redirect, Blocked, Paused} {
		if !(&Error{Kind: k}).Retryable() {
			t.Errorf("%s not retryable", k)
		}
	}
	for _, k := range []ErrorKind{BadRequest, Canceled} {
		if (&Error{Kind: k}).Retryable() {
			t.Errorf("%s retryable", k)
		}
	}
}

func TestErrorUnwraps(t *testing.T) {
	e := &Error{Kind: Blocked, err: &BlockedAddressError{Reason: "x"}}
	if !errors.Is(e, ErrBlockedAddress) {
		t.Error("errors.Is(*Error, ErrBlockedAddress) = false")
	}
}
