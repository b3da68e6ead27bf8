package netguard

import (
	"net/netip"
	"slices"
)

// Range is a network the guard does not dial, and what it is.
type Range struct {
	Prefix netip.Prefix
	// Class names the kind of address ("loopback", "private", ...), for
	// errors.
	Class string
}

// forbidden are the networks that are the host's own, its neighbours',
// the metadata service's, or no public server's. An address is checked
// after Unmap (so ::ffff:10.0.0.1 is 10.0.0.1); 6to4 and NAT64
// addresses are also judged by the IPv4 address inside (embedded4).
// The first match names the class, so the narrow ranges come first.
var forbidden = func() []Range {
	var rs []Range
	for _, r := range []struct{ cidr, class string }{
		{"127.0.0.0/8", "loopback"},      // the host itself
		{"::1/128", "loopback"},          //
		{"0.0.0.0/8", "unspecified"},     // "this network": 0.0.0.0 is the host itself to a dialer
		{"::/128", "unspecified"},        //
		{"169.254.0.0/16", "link-local"}, // the metadata service: 169.254.169.254
		{"fd00:ec2::/32", "metadata"},    // in fc00::/7 already; EC2's IPv6 metadata service
		{"fe80::/10", "link-local"},      //
		{"10.0.0.0/8", "private"},        // RFC 1918
		{"172.16.0.0/12", "private"},     //
		{"192.168.0.0/16", "private"},    //
		{"fc00::/7", "private"},          // unique local (ULA)
		{"fec0::/10", "private"},         // site-local (deprecated)
		{"100.64.0.0/10", "shared"},      // carrier NAT, tailnets
		{"192.0.0.0/24", "reserved"},     // IETF protocol assignments
		{"198.18.0.0/15", "reserved"},    // benchmarking
		{"240.0.0.0/4", "reserved"},      // reserved, and 255.255.255.255
		{"::/96", "reserved"},            // IPv4-compatible (deprecated)
		{"::ffff:0:0/96", "reserved"},    // IPv4-mapped: never matches after Unmap; listed for safety
		{"64:ff9b:1::/48", "reserved"},   // local-use NAT64
		{"100::/64", "reserved"},         // discard
		{"2001::/32", "reserved"},        // Teredo: tunnels to an obfuscated IPv4
		{"2001:db8::/32", "reserved"},    // documentation
		{"224.0.0.0/4", "multicast"},     //
		{"ff00::/8", "multicast"},        //
	} {
		rs = append(rs, Range{netip.MustParsePrefix(r.cidr), r.class})
	}
	return rs
}()

// Forbidden lists the networks the guard (and the egress proxy) never
// dials unless allowed.
func Forbidden() []Range { return slices.Clone(forbidden) }

// Public reports whether a may be dialed without an allowance: it is
// valid, has no zone, and is in no forbidden range, nor is an IPv4
// address in one written as 6to4 or NAT64.
func Public(a netip.Addr) bool { return Class(a) == "" }

// Class is why a may not be dialed ("loopback", "private",
// "link-local", ...), or "" when it may (Public).
func Class(a netip.Addr) string {
	if !a.IsValid() {
		return "invalid"
	}
	if a.Zone() != "" {
		return "scoped" // fe80::1%eth0: a link's, never a server's
	}
	a = a.Unmap()
	for _, r := range forbidden {
		if r.Prefix.Contains(a) {
			return r.Class
		}
	}
	if v4, ok := embedded4(a); ok {
		return Class(v4)
	}
	return ""
}

var (
	sixToFour = netip.MustParsePrefix("2002::/16")
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
)

// embedded4 is the IPv4 address a 6to4 (2002:AABB:CCDD::) or NAT64
// (64:ff9b::AABB:CCDD) address reaches.
func embedded4(a netip.Addr) (netip.Addr, bool) {
	b := a.As16()
	switch {
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	case nat64.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	}
	return netip.Addr{}, false
}
