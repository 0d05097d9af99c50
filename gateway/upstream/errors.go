package upstream

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrorKind says why an upstream call failed. Its string value is stable and
// short, fit for a metric label or X-Switchyard-Fallback-Reason.
type ErrorKind string

const (
	Connect     ErrorKind = "connect"      // no connection, or it broke before an answer
	Timeout     ErrorKind = "timeout"      // no headers within the first-byte timeout, an idle stream, or 408
	Status5xx   ErrorKind = "status_5xx"   // the upstream failed
	RateLimited ErrorKind = "rate_limited" // 429
	Auth        ErrorKind = "auth"         // 401/403: the upstream refused our credentials
	Redirect    ErrorKind = "redirect"     // a 3xx, never followed
	Blocked     ErrorKind = "blocked"      // a node address outside the allowed networks
	BadRequest  ErrorKind = "bad_request"  // any other 4xx: the request itself is at fault
	Canceled    ErrorKind = "canceled"     // the caller's context ended
	Paused      ErrorKind = "paused"       // the vendor's breaker is open; nothing was sent
)

// Error is a failed upstream call. Its message never contains the target's
// key: whatever the upstream echoed is redacted first.
type Error struct {
	Kind   ErrorKind
	Target string // the target's label
	// Status is the upstream's HTTP status, 0 when there was no answer.
	Status int
	// RetryAfter is what the upstream asked for (Retry-After or
	// Retry-After-Ms), or how long a paused vendor stays paused; 0 if
	// unknown. It is capped at one hour.
	RetryAfter time.Duration
	// Message is a human-readable reason; for an answer with a status, the
	// upstream's own error message when it gave one.
	Message string

	err error
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("upstream %s: %s (HTTP %d): %s", e.Target, e.Kind, e.Status, e.Message)
	}
	return fmt.Sprintf("upstream %s: %s: %s", e.Target, e.Kind, e.Message)
}

func (e *Error) Unwrap() error { return e.err }

// Retryable reports whether the request should move on to the next
// candidate, provided nothing has reached the client yet. A bad request
// would be just as bad elsewhere, and a canceled one has nobody waiting.
func (e *Error) Retryable() bool {
	switch e.Kind {
	case BadRequest, Canceled:
		return false
	}
	return true
}

// failure reports whether the error counts against a vendor's breaker.
// Auth counts: a refused key fails every request until an operator fixes
// it, and pausing the vendor saves each of those requests a round trip (a
// SetVendorKey should call ResetVendor). A redirect counts too: the vendor
// is misconfigured or moved. BadRequest and Canceled say nothing about the
// vendor's health.
func (k ErrorKind) failure() bool {
	switch k {
	case Connect, Timeout, Status5xx, RateLimited, Auth, Redirect:
		return true
	}
	return false
}

// maxRetryAfter caps what an upstream may ask for, so that a buggy or hostile
// Retry-After cannot pause a vendor for days.
const maxRetryAfter = time.Hour

// maxMessage bounds Error.Message; an HTML error page is not a message.
const maxMessage = 1024

func statusError(label string, status int, h http.Header, body []byte, key string, now time.Time) *Error {
	e := &Error{Target: label, Status: status, RetryAfter: retryAfter(h, now)}
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.Kind = Auth
	case status == http.StatusTooManyRequests:
		e.Kind = RateLimited
	case status == http.StatusRequestTimeout:
		// The upstream gave up waiting on us: a transient condition of that
		// upstream, not a fault of the request.
		e.Kind = Timeout
	case status >= 300 && status < 400:
		e.Kind = Redirect
	case status >= 400 && status < 500:
		e.Kind = BadRequest
	default:
		e.Kind = Status5xx
	}
	if e.Kind == Redirect {
		// Location is not repeated: it is the upstream's to choose and may
		// carry anything.
		e.Message = "the upstream answered with a redirect, which is never followed"
		return e
	}
	msg := redact(upstreamMessage(body), key)
	if msg == "" {
		msg = http.StatusText(status)
	}
	e.Message = truncate(msg, maxMessage)
	return e
}

// upstreamMessage extracts the message of an OpenAI-style error body, or of
// the other common shapes ({"error":"…"}, {"message":"…"}, {"detail":"…"});
// anything else is taken as text.
func upstreamMessage(body []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &v) == nil {
		if len(v.Error) > 0 {
			var obj struct {
				Message string `json:"message"`
			}
			var s string
			if json.Unmarshal(v.Error, &obj) == nil && obj.Message != "" {
				return obj.Message
			}
			if json.Unmarshal(v.Error, &s) == nil && s != "" {
				return s
			}
		}
		if v.Message != "" {
			return v.Message
		}
		var s string
		if json.Unmarshal(v.Detail, &s) == nil && s != "" {
			return s
		}
	}
	return strings.TrimSpace(string(body))
}

func truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// minEcho is the shortest piece of a key that is redacted on its own. Vendors
// echo keys partly ("sk-abc…wxyz"); eight characters of a random key are
// already too many to show, and shorter pieces would start to match ordinary
// words.
const minEcho = 8

const redacted = "[redacted]"

// redact replaces the key, and every run of 8 or more characters that also
// occurs in the key, with "[redacted]".
func redact(s, key string) string {
	if key == "" || s == "" {
		return s
	}
	s = strings.ReplaceAll(s, key, redacted)
	if len(key) < minEcho {
		return s
	}
	grams := make(map[string]struct{}, len(key)-minEcho+1)
	for i := 0; i+minEcho <= len(key); i++ {
		grams[key[i:i+minEcho]] = struct{}{}
	}
	var b strings.Builder
	last := 0
	for i := 0; i+minEcho <= len(s); {
		if _, ok := grams[s[i:i+minEcho]]; !ok {
			i++
			continue
		}
		j := i + minEcho
		for j < len(s) && strings.Contains(key, s[i:j+1]) {
			j++
		}
		b.WriteString(s[last:i])
		b.WriteString(redacted)
		i, last = j, j
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// retryAfter reads Retry-After-Ms (Azure OpenAI's, more precise) or
// Retry-After in seconds or as an HTTP date.
func retryAfter(h http.Header, now time.Time) time.Duration {
	var d time.Duration
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		// NaN fails the comparison; +Inf is capped by min.
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			d = time.Duration(min(ms, float64(maxRetryAfter/time.Millisecond)) * float64(time.Millisecond))
		}
	}
	if v := strings.TrimSpace(h.Get("Retry-After")); d == 0 && v != "" {
		if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
			if secs > 0 {
				d = time.Duration(min(secs, int64(maxRetryAfter/time.Second))) * time.Second
			}
		} else if t, err := http.ParseTime(v); err == nil && t.After(now) {
			d = t.Sub(now)
		}
	}
	return min(d, maxRetryAfter)
}
