package upstream

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

func loopbackOnly() []netip.Prefix { return []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} }

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func TestNodeDialGuard(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{}`) })
	port := s.URL[strings.LastIndex(s.URL, ":")+1:]
	tests := []struct {
		name     string
		host     string
		networks []netip.Prefix
		blocked  bool
	}{
		{name: "loopback not listed", host: "127.0.0.1", networks: prefixes("10.0.0.0/8"), blocked: true},
		{name: "loopback listed", host: "127.0.0.1", networks: loopbackOnly()},
		{name: "loopback under everything is not explicit", host: "127.0.0.1", networks: prefixes("0.0.0.0/0", "::/0"), blocked: true},
		{name: "default networks", host: "127.0.0.1", blocked: true},
		{name: "localhost resolves to loopback", host: "localhost", networks: prefixes("10.0.0.0/8"), blocked: true},
		{name: "ipv6 loopback", host: "[::1]", networks: prefixes("10.0.0.0/8"), blocked: true},
		{name: "metadata though link-local listed", host: "169.254.169.254", networks: prefixes("169.254.0.0/16"), blocked: true},
		{name: "metadata though everything listed", host: "169.254.169.254", networks: prefixes("0.0.0.0/0"), blocked: true},
		{name: "ipv6 metadata though fd00::/8 listed", host: "[fd00:ec2::254]", networks: prefixes("fd00::/8"), blocked: true},
		{name: "link-local", host: "169.254.10.10", networks: prefixes("169.254.0.0/16"), blocked: true},
		{name: "unspecified", host: "0.0.0.0", networks: prefixes("0.0.0.0/0"), blocked: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := s.conns.Load()
			c := newTestClient(Options{NodeNetworks: tt.networks})
			tgt := Target{Kind: TargetNode, ID: "n1", BaseURL: "http://" + tt.host + ":" + port + "/v1", APIKey: testKey}
			resp, err := c.Send(context.Background(), tgt, "/chat/completions", []byte(`{}`), nil)
			if !tt.blocked {
				if err != nil {
					t.Fatalf("allowed node refused: %v", err)
				}
				resp.Body.Close()
				return
			}
			e := asError(t, err, Blocked)
			if !errors.Is(err, ErrBlockedAddress) || !e.Retryable() {
				t.Errorf("errors.Is(ErrBlockedAddress) = %v, Retryable = %v", errors.Is(err, ErrBlockedAddress), e.Retryable())
			}
			var be *BlockedAddressError
			if !errors.As(err, &be) {
				t.Errorf("no *BlockedAddressError in %v", err)
			}
			if n := s.conns.Load() - before; n != 0 {
				t.Errorf("the refused server saw %d connections", n)
			}
		})
	}
}

func TestVendorTargetsAreNotRestricted(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{}`) })
	c := newTestClient(Options{NodeNetworks: prefixes("10.0.0.0/8")})
	resp, err := c.Send(context.Background(), vendorAt(s), "/models", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

func TestNodeGuardCheck(t *testing.T) {
	def := nodeGuard{allowed: normalisePrefixes(DefaultNodeNetworks())}
	wide := nodeGuard{allowed: normalisePrefixes(prefixes("0.0.0.0/0", "::/0"))}
	mapped := nodeGuard{allowed: normalisePrefixes(prefixes("::ffff:10.0.0.0/104"))}
	tests := []struct {
		guard nodeGuard
		addr  string
		ok    bool
	}{
		{def, "10.1.2.3", true},
		{def, "172.16.0.9", true},
		{def, "192.168.1.20", true},
		{def, "fd12:3456::1", true},
		{def, "::ffff:10.0.0.1", true},
		{def, "8.8.8.8", false},
		{def, "172.32.0.1", false},
		{def, "100.100.1.1", false},
		{def, "127.0.0.1", false},
		{def, "::1", false},
		{def, "fd00:ec2::254", false},
		{wide, "8.8.8.8", true},
		{wide, "2001:db8::1", true},
		{wide, "127.0.0.1", false},
		{wide, "::ffff:127.0.0.1", false},
		{wide, "169.254.169.254", false},
		{wide, "::ffff:169.254.169.254", false},
		{wide, "100.100.100.200", false},
		{wide, "168.63.129.16", false},
		{wide, "fe80::1", false},
		{wide, "fe80::1%eth0", false},
		{wide, "0.0.0.0", false},
		{wide, "0.1.2.3", false},
		{wide, "::", false},
		{wide, "224.0.0.1", false},
		{wide, "255.255.255.255", false},
		{wide, "ff02::1", false},
		{mapped, "10.9.9.9", true},
		{mapped, "11.0.0.1", false},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			err := tt.guard.check(netip.MustParseAddr(tt.addr))
			if (err == nil) != tt.ok {
				t.Errorf("check(%s) = %v, want allowed=%v", tt.addr, err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrBlockedAddress) {
				t.Errorf("error %v does not match ErrBlockedAddress", err)
			}
		})
	}
}

func TestNodeGuardControlFailsClosed(t *testing.T) {
	g := nodeGuard{allowed: normalisePrefixes(prefixes("0.0.0.0/0"))}
	if err := g.control("tcp", "not-an-address", nil); !errors.Is(err, ErrBlockedAddress) {
		t.Errorf("control(unparsable) = %v", err)
	}
	if err := g.control("tcp", "10.0.0.1:8081", nil); err != nil {
		t.Errorf("control(10.0.0.1:8081) = %v", err)
	}
}
