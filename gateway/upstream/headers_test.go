package upstream

import (
	"net/http"
	"reflect"
	"testing"
)

func TestForwardHeaders(t *testing.T) {
	tests := []struct {
		name string
		in   http.Header
		want http.Header
	}{
		{
			name: "safe headers pass",
			in:   http.Header{"Accept": {"text/event-stream"}, "User-Agent": {"curl/8"}, "X-Stainless-Os": {"Linux"}, "Openai-Beta": {"assistants=v2"}},
			want: http.Header{"Accept": {"text/event-stream"}, "User-Agent": {"curl/8"}, "X-Stainless-Os": {"Linux"}, "Openai-Beta": {"assistants=v2"}},
		},
		{
			name: "hop-by-hop",
			in: http.Header{"Connection": {"keep-alive"}, "Keep-Alive": {"timeout=5"}, "Proxy-Connection": {"keep-alive"},
				"Proxy-Authorization": {"Basic x"}, "Te": {"trailers"}, "Trailer": {"X-T"}, "Transfer-Encoding": {"chunked"},
				"Upgrade": {"h2c"}, "Http2-Settings": {"AAA"}, "Accept": {"*/*"}},
			want: http.Header{"Accept": {"*/*"}},
		},
		{
			name: "named by Connection, in any case and list form",
			in:   http.Header{"Connection": {"x-one, X-TWO", "x-three"}, "X-One": {"1"}, "X-Two": {"2"}, "X-Three": {"3"}, "X-Four": {"4"}},
			want: http.Header{"X-Four": {"4"}},
		},
		{
			name: "credentials and ours",
			in: http.Header{"Authorization": {"Bearer syk_a_b"}, "Api-Key": {"syk_a_b"}, "X-Api-Key": {"k"}, "Cookie": {"a=b"},
				"Openai-Organization": {"org-1"}, "Openai-Project": {"proj-1"}, "X-Switchyard-Effort": {"high"},
				"X-Switchyard-Attr-Team": {"ml"}, "User-Agent": {"sdk"}},
			want: http.Header{"User-Agent": {"sdk"}},
		},
		{
			name: "the client's connection and body",
			in: http.Header{"Host": {"gw"}, "Content-Length": {"12"}, "Content-Type": {"text/plain"}, "Content-Encoding": {"gzip"},
				"Accept-Encoding": {"br"}, "Expect": {"100-continue"}, "Forwarded": {"for=1.2.3.4"},
				"X-Forwarded-For": {"1.2.3.4"}, "X-Forwarded-Proto": {"https"}, "X-Real-Ip": {"1.2.3.4"}, "Accept": {"*/*"}},
			want: http.Header{"Accept": {"*/*"}},
		},
		{
			name: "control characters in values",
			in: http.Header{"X-Cr": {"a\rb"}, "X-Lf": {"a\nInjected: 1"}, "X-Nul": {"a\x00b"}, "X-Del": {"a\x7fb"},
				"X-Second-Bad": {"fine", "bad\r\n"}, "X-Tab": {"a\tb"}, "X-Utf8": {"café"}},
			want: http.Header{"X-Tab": {"a\tb"}, "X-Utf8": {"café"}},
		},
		{
			name: "malformed names",
			in:   http.Header{"X-Bad\r\nName": {"1"}, "X Space": {"1"}, "X-Nul\x00": {"1"}, "": {"1"}, "X:Colon": {"1"}, "X-Ok": {"1"}},
			want: http.Header{"X-Ok": {"1"}},
		},
		{
			name: "non-canonical names are canonicalised and merged",
			in:   http.Header{"x-custom": {"a"}, "X-Custom": {"b"}, "authorization": {"Bearer x"}, "x-switchyard-policy": {"auto"}},
			want: http.Header{"X-Custom": {"a", "b"}},
		},
		{name: "nil", in: nil, want: http.Header{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ForwardHeaders(tt.in)
			if tt.name == "non-canonical names are canonicalised and merged" && len(got["X-Custom"]) == 2 {
				// Map order decides which comes first.
				got["X-Custom"] = sortedPair(got["X-Custom"])
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ForwardHeaders =\n %q\nwant\n %q", got, tt.want)
			}
		})
	}
}

func sortedPair(v []string) []string {
	if v[0] > v[1] {
		return []string{v[1], v[0]}
	}
	return v
}

func TestForwardHeadersDoesNotAlias(t *testing.T) {
	in := http.Header{"X-A": {"1"}}
	out := ForwardHeaders(in)
	out["X-A"][0] = "changed"
	if in["X-A"][0] != "1" {
		t.Error("ForwardHeaders shares value slices with its input")
	}
}

func TestCopyResponseHeaders(t *testing.T) {
	src := http.Header{
		"Content-Type":                   {"text/event-stream"},
		"Content-Length":                 {"99"},
		"Set-Cookie":                     {"__cf_bm=x"},
		"Connection":                     {"X-Hop"},
		"X-Hop":                          {"1"},
		"Transfer-Encoding":              {"chunked"},
		"Keep-Alive":                     {"timeout=5"},
		"Alt-Svc":                        {`h3=":443"`},
		"X-Switchyard-Target":            {"vendor:evil"},
		"X-Bad":                          {"a\r\nSet-Cookie: x"},
		"X-Ratelimit-Remaining-Requests": {"99"},
		"Openai-Processing-Ms":           {"120"},
		"Cache-Control":                  {"no-cache"},
	}
	dst := http.Header{"Cache-Control": {"old"}, "X-Request-Id": {"ours"}}
	CopyResponseHeaders(dst, src)
	want := http.Header{
		"Content-Type":                   {"text/event-stream"},
		"X-Ratelimit-Remaining-Requests": {"99"},
		"Openai-Processing-Ms":           {"120"},
		"Cache-Control":                  {"no-cache"},
		"X-Request-Id":                   {"ours"},
	}
	if !reflect.DeepEqual(dst, want) {
		t.Errorf("CopyResponseHeaders =\n %q\nwant\n %q", dst, want)
	}
}
