package upstream

import (
	"net/http"
	"strings"
)

// ForwardHeaders returns the client request headers that may travel to an
// upstream, under their canonical names. It drops:
//   - hop-by-hop headers (Connection, Keep-Alive, Proxy-*, TE, Trailer,
//     Transfer-Encoding, Upgrade, HTTP2-Settings) and any header the
//     Connection header names;
//   - the client's credentials and ones that mean something only to us or
//     to the vendor account (Authorization, Api-Key, X-Api-Key, Cookie,
//     OpenAI-Organization, OpenAI-Project): the target's key is injected
//     instead, and a client's organisation header would make our key fail
//     and pause the vendor for everybody;
//   - what describes the client's own connection or body rather than ours
//     (Host, Content-Length, Content-Type, Content-Encoding, Expect,
//     Accept-Encoding — the transport negotiates compression itself and
//     decodes it, so streams stay readable —, Forwarded, X-Forwarded-*,
//     X-Real-Ip);
//   - X-Switchyard-*, which are ours;
//   - any header whose name is not an HTTP token or whose value holds a
//     control character (CR, LF and NUL included), so nothing can be
//     smuggled into the upstream request and a malformed header cannot make
//     the call fail and count against the vendor.
func ForwardHeaders(in http.Header) http.Header {
	out := make(http.Header, len(in))
	named := connectionNamed(in)
	for name, values := range in {
		if !validHeader(name, values) {
			continue
		}
		ck := http.CanonicalHeaderKey(name)
		if hopByHop(ck) || named[ck] || dropRequest(ck) {
			continue
		}
		out[ck] = append(out[ck], values...)
	}
	return out
}

// CopyResponseHeaders copies the upstream response headers that may reach
// the client into dst, replacing what dst holds under those names (so the
// gateway sets its own headers after it). It drops hop-by-hop headers and
// those named by Connection, Set-Cookie (the upstream's session is not the
// client's), Content-Length (the body may be rewritten), Alt-Svc (it would
// point the client at the upstream's host), X-Switchyard-* (a node must not
// speak for the gateway), and any malformed name or control-character value.
func CopyResponseHeaders(dst, src http.Header) {
	named := connectionNamed(src)
	kept := make(map[string][]string, len(src))
	for name, values := range src {
		if !validHeader(name, values) {
			continue
		}
		ck := http.CanonicalHeaderKey(name)
		if hopByHop(ck) || named[ck] || dropResponse(ck) {
			continue
		}
		kept[ck] = append(kept[ck], values...)
	}
	for ck, values := range kept {
		dst[ck] = values
	}
}

func hopByHop(ck string) bool {
	switch ck {
	case "Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Http2-Settings":
		return true
	}
	return strings.HasPrefix(ck, "Proxy-")
}

func dropRequest(ck string) bool {
	switch ck {
	case "Authorization", "Api-Key", "X-Api-Key", "Cookie",
		"Openai-Organization", "Openai-Project",
		"Host", "Content-Length", "Content-Type", "Content-Encoding", "Expect", "Accept-Encoding",
		"Forwarded", "X-Real-Ip":
		return true
	}
	return strings.HasPrefix(ck, "X-Forwarded-") || strings.HasPrefix(ck, "X-Switchyard-")
}

func dropResponse(ck string) bool {
	switch ck {
	case "Set-Cookie", "Content-Length", "Alt-Svc":
		return true
	}
	return strings.HasPrefix(ck, "X-Switchyard-")
}

// connectionNamed returns the canonical names listed in Connection headers,
// which are hop-by-hop for this connection only.
func connectionNamed(h http.Header) map[string]bool {
	var named map[string]bool
	for name, values := range h {
		if !strings.EqualFold(name, "Connection") {
			continue
		}
		for _, v := range values {
			for _, tok := range strings.Split(v, ",") {
				if tok = strings.TrimSpace(tok); tok != "" {
					if named == nil {
						named = map[string]bool{}
					}
					named[http.CanonicalHeaderKey(tok)] = true
				}
			}
		}
	}
	return named
}

func validHeader(name string, values []string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return false
		}
	}
	for _, v := range values {
		for i := 0; i < len(v); i++ {
			// RFC 9110 field values: visible characters, spaces, tabs and
			// obs-text; no other control character, CR, LF and NUL included.
			if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
				return false
			}
		}
	}
	return true
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
