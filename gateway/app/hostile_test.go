package app

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/simengine"
)

// rawRequest sends bytes as they are over TCP and returns the status line's
// code and the Location header (0 when the server closed without an answer).
func rawRequest(t *testing.T, addr, req string) (int, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		return 0, ""
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

// TestHostileInput throws malformed and adversarial requests at a serving
// gateway: each is refused the way the SPEC says, and the process stays up.
func TestHostileInput(t *testing.T) {
	var vendorHits atomic.Int64
	sim := simengine.New(simengine.Config{Models: []string{"m"}}, nil).Handler()
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		vendorHits.Add(1)
		sim.ServeHTTP(w, r)
	}))
	defer vendor.Close()
	r := startServe(t, nil)
	must := func(method, path, body string) map[string]any {
		t.Helper()
		code, m, _ := r.call(t, method, path, r.admin, body)
		if code != 200 {
			t.Fatalf("%s %s = %d %v", method, path, code, m)
		}
		return m
	}
	must("POST", "/admin/v1/tenants", `{"tenant":{"id":"acme"}}`)
	key := must("POST", "/admin/v1/tenants/acme/keys", `{}`)["api_key"].(string)
	must("POST", "/admin/v1/vendors", `{"vendor":{"id":"v","base_url":"`+vendor.URL+`/v1","enabled":true}}`)
	must("POST", "/admin/v1/vendors/v:setKey", `{"api_key":"sk-hostile"}`)
	must("POST", "/admin/v1/models", `{"model":{"id":"m","vendor":"v","enabled":true}}`)
	alive := func() {
		t.Helper()
		if code := get(t, "http://"+r.http+"/healthz"); code != 200 {
			t.Fatalf("the gateway is not alive: /healthz %d", code)
		}
	}

	t.Run("10 MB of [ is refused with 413", func(t *testing.T) {
		body := bytes.Repeat([]byte("["), 10<<20)
		req, _ := http.NewRequest("POST", "http://"+r.http+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != 413 {
				t.Fatalf("status %d", resp.StatusCode)
			}
		}
		// Sent without a length (chunked) the limit still holds.
		req, _ = http.NewRequest("POST", "http://"+r.http+"/v1/chat/completions", io.MultiReader(bytes.NewReader(body)))
		req.ContentLength = -1
		req.Header.Set("Authorization", "Bearer "+key)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode != 413 {
				t.Fatalf("chunked: status %d", resp.StatusCode)
			}
		}
		alive()
	})

	t.Run("CR and LF in header values never reach the vendor", func(t *testing.T) {
		body := `{"model":"m","messages":[{"role":"user","content":"x"}]}`
		for _, h := range []string{"X-Evil: a\rInjected: b", "X-Evil: a\nInjected: b", "X-Evil: a\r\n folded", "X-Evil: a\x00b"} {
			req := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + key + "\r\n" + h + "\r\nContent-Type: application/json\r\nContent-Length: " +
				strconv.Itoa(len(body)) + "\r\n\r\n" + body
			code, _ := rawRequest(t, r.http, req)
			if code == 200 {
				// Only a header Go splits into two clean ones may pass; the
				// vendor must then have seen no CR or LF in any value.
				continue
			}
			if code != 400 && code != 0 {
				t.Errorf("%q: status %d", h, code)
			}
		}
		// A clean request goes through, so the check below sees what the
		// vendor gets.
		clean := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + key + "\r\nX-Trace: ok\r\nContent-Type: application/json\r\nContent-Length: " +
			strconv.Itoa(len(body)) + "\r\n\r\n" + body
		if code, _ := rawRequest(t, r.http, clean); code != 200 {
			t.Fatalf("clean request: %d", code)
		}
		hdr, _ := lastVendorHeaders(t, vendor.URL)
		if hdr.Get("X-Trace") != "ok" {
			t.Fatalf("the vendor did not get the clean request's header: %v", hdr)
		}
		if hdr != nil {
			for k, vs := range hdr {
				for _, v := range vs {
					if strings.ContainsAny(k+v, "\r\n\x00") {
						t.Fatalf("the vendor got a header with CR/LF/NUL: %q: %q", k, v)
					}
				}
			}
		}
		alive()
	})

	t.Run("admin routes answer 401 without a key whatever the form", func(t *testing.T) {
		forms := []string{
			"GET /admin/v1/tenants HTTP/1.1\r\nHost: localhost\r\n\r\n",
			"GET http://localhost/admin/v1/tenants HTTP/1.1\r\nHost: evil.example\r\n\r\n",
			"GET http://evil.example/admin/v1/tenants HTTP/1.1\r\nHost: localhost\r\n\r\n",
			"GET /admin/v1/./tenants HTTP/1.1\r\nHost: localhost\r\n\r\n",
			"GET /admin//v1/tenants HTTP/1.1\r\nHost: localhost\r\n\r\n",
			"GET /v1/../admin/v1/tenants HTTP/1.1\r\nHost: localhost\r\n\r\n",
			"GET /%61dmin/v1/tenants HTTP/1.1\r\nHost: localhost\r\n\r\n",
			"GET /admin/v1/tenants/..%2F..%2Fvendors HTTP/1.1\r\nHost: localhost\r\n\r\n",
			"GET /admin/v1/tenants?authorization=Bearer%20" + r.admin + " HTTP/1.1\r\nHost: localhost\r\n\r\n",
			"GET /admin/v1/tenants HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-For: 127.0.0.1\r\nX-Real-Ip: 127.0.0.1\r\n\r\n",
			"GET / HTTP/1.1\r\nHost: localhost\r\nX-Original-URL: /admin/v1/tenants\r\nX-Rewrite-URL: /admin/v1/tenants\r\n\r\n",
			"GET /admin/v1/tenants HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic YWRtaW46YWRtaW4=\r\n\r\n",
			"GET /admin/v1/tenants HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer sya_aaaaaaaaaaaa_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n",
			"GET /admin/v1/tenants HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + key + "\r\n\r\n",
			"POST /admin/v1/admin-keys HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\n{}",
			"GET /admin/v1/tenants HTTP/1.0\r\n\r\n",
		}
		for _, f := range forms {
			code, loc := rawRequest(t, r.http, f)
			for hops := 0; code >= 300 && code < 400 && loc != "" && hops < 3; hops++ {
				// Follow a path-cleaning redirect, still without a key.
				path := loc
				if i := strings.Index(loc, "://"); i >= 0 {
					path = loc[i+3:]
					path = path[strings.IndexByte(path, '/'):]
				}
				code, loc = rawRequest(t, r.http, "GET "+path+" HTTP/1.1\r\nHost: localhost\r\n\r\n")
			}
			firstLine := f[:strings.Index(f, "\r\n")]
			addressesAdmin := !strings.HasPrefix(firstLine, "GET / ") && !strings.Contains(firstLine, "%61dmin") && !strings.Contains(firstLine, "..%2F")
			switch {
			case code >= 200 && code < 300:
				t.Errorf("%q answered %d without a valid admin key", firstLine, code)
			case addressesAdmin && code != 401:
				t.Errorf("%q answered %d, want 401", firstLine, code)
			}
		}
		alive()
	})

	t.Run("headers sent one byte a second are cut off", func(t *testing.T) {
		conn, err := net.Dial("tcp", r.http)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		_, _ = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n")
		closed := make(chan time.Duration, 1)
		go func() {
			buf := make([]byte, 512)
			_ = conn.SetReadDeadline(time.Now().Add(40 * time.Second))
			for {
				if _, err := conn.Read(buf); err != nil {
					closed <- time.Since(start)
					return
				}
			}
		}()
		for i := 0; i < 40; i++ {
			select {
			case d := <-closed:
				t.Logf("connection closed after %v (ReadHeaderTimeout)", d.Round(100*time.Millisecond))
				if d > 30*time.Second {
					t.Fatalf("closed only after %v", d)
				}
				alive()
				return
			case <-time.After(time.Second):
				_, _ = conn.Write([]byte("X"))
			}
		}
		t.Fatal("a client trickling its headers was never cut off")
	})
}

// lastVendorHeaders reads what the simulated vendor last received.
func lastVendorHeaders(t *testing.T, vendorURL string) (http.Header, error) {
	t.Helper()
	s := simStats(t, vendorURL)
	return s.LastRequestHeaders, nil
}
