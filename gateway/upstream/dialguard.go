package upstream

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
)

// ErrBlockedAddress is matched (errors.Is) by every *BlockedAddressError.
var ErrBlockedAddress = errors.New("address not allowed for nodes")

// BlockedAddressError is a node dial refused before it was attempted.
type BlockedAddressError struct {
	Addr   netip.Addr // the resolved address; invalid when it did not parse
	Reason string
}

func (e *BlockedAddressError) Error() string {
	if !e.Addr.IsValid() {
		return "node address refused: " + e.Reason
	}
	return fmt.Sprintf("node address %s refused: %s", e.Addr, e.Reason)
}

func (e *BlockedAddressError) Is(target error) bool { return target == ErrBlockedAddress }

// DefaultNodeNetworks returns the private ranges: RFC 1918 and IPv6 unique
// local addresses. Carrier-grade NAT space (100.64.0.0/10, which Tailscale
// uses) is not included and must be listed where nodes live there.
func DefaultNodeNetworks() []netip.Prefix {
	return []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("fc00::/7"),
	}
}

// nodeGuard checks node dials. It runs as the dialer's Control function, so
// it sees the address after DNS resolution, for every address the dialer
// tries, just before connect(2): a name that resolves somewhere else on the
// next lookup (DNS rebinding) is checked again, and a refused address never
// sees a packet.
type nodeGuard struct {
	allowed []netip.Prefix
}

func (g nodeGuard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		// Fail closed: an address we cannot read is not one we allow.
		return &BlockedAddressError{Reason: "not an IP address"}
	}
	return g.check(ap.Addr())
}

func (g nodeGuard) check(ip netip.Addr) error {
	ip = ip.Unmap() // ::ffff:169.254.169.254 is 169.254.169.254
	refuse := func(reason string) error { return &BlockedAddressError{Addr: ip, Reason: reason} }
	switch {
	case !ip.IsValid():
		return refuse("not an IP address")
	case ip.IsUnspecified() || ip.Is4() && ip.As4()[0] == 0:
		return refuse("unspecified address")
	case ip.IsMulticast() || ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return refuse("multicast or broadcast address")
	case metadataAddr(ip):
		return refuse("cloud metadata address")
	case ip.IsLinkLocalUnicast():
		return refuse("link-local address")
	}
	for _, p := range g.allowed {
		if !p.Contains(ip) {
			continue
		}
		// 0.0.0.0/0 contains loopback too, but loopback is for dev and
		// tests only and must be asked for by name.
		if ip.IsLoopback() && !p.Addr().IsLoopback() {
			continue
		}
		return nil
	}
	if ip.IsLoopback() {
		return refuse("loopback is allowed only when a loopback network is listed")
	}
	return refuse("not in the allowed node networks")
}

// metadataAddr reports the instance-metadata endpoints of the big clouds.
// The IPv4 link-local ones are refused as link-local anyway; the others sit
// in ranges an operator may well list (fd00::/8, 100.64.0.0/10).
func metadataAddr(ip netip.Addr) bool {
	switch ip {
	case netip.AddrFrom4([4]byte{169, 254, 169, 254}), // AWS, GCP, Azure, OpenStack
		netip.AddrFrom4([4]byte{100, 100, 100, 200}),                           // Alibaba Cloud
		netip.AddrFrom4([4]byte{168, 63, 129, 16}),                             // Azure wire server
		netip.AddrFrom16([16]byte{0xfd, 0x00, 0x0e, 0xc2, 14: 0x02, 15: 0x54}): // AWS IPv6
		return true
	}
	return false
}

// normalisePrefixes unmaps IPv4-mapped prefixes, as addresses are unmapped
// before they are checked.
func normalisePrefixes(in []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(in))
	for _, p := range in {
		if !p.IsValid() {
			continue
		}
		if p.Addr().Is4In6() {
			bits := p.Bits() - 96
			if bits < 0 {
				// Wider than the mapped range: it covers no IPv4 address
				// as a whole, keep it as written.
				out = append(out, p.Masked())
				continue
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), bits)
		}
		out = append(out, p.Masked())
	}
	return out
}
