package netguard

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// allowance is one Config.Allow entry (see the package doc for the
// forms): a name, or a network (an address is a /32 or /128), at a port
// or any (0).
type allowance struct {
	text   string
	name   string
	prefix netip.Prefix
	port   int
}

func (a allowance) matchesName(host string, port int) bool {
	return a.name != "" && a.name == host && (a.port == 0 || a.port == port)
}

func (a allowance) matchesAddr(addr netip.Addr, port int) bool {
	return a.name == "" && a.prefix.Contains(addr) && (a.port == 0 || a.port == port)
}

const allowForms = "give a host name, an IP address or a CIDR network, each optionally with :PORT (mcp.internal, 10.1.2.3:8080, 10.0.0.0/8, [fd00::5]:8080)"

// parseAllow parses an allowance (see the package doc), saying what to
// write instead when s is not one.
func parseAllow(s string) (allowance, error) {
	fail := func(why string) (allowance, error) {
		return allowance{}, fmt.Errorf("%q: %s: %s", s, why, allowForms)
	}
	in := strings.TrimSpace(s)
	switch {
	case in == "":
		return fail("empty")
	case strings.Contains(in, "://") || strings.ContainsAny(in, "@?#") || strings.ContainsAny(in, " \t\r\n"):
		return fail("not a URL nor anything with spaces")
	case strings.Contains(in, "*"):
		return fail("no wildcards (name each host, or give its network)")
	}
	host, port := in, ""
	switch {
	case strings.HasPrefix(in, "["):
		end := strings.Index(in, "]")
		if end < 0 {
			return fail("a [ without its ]")
		}
		host, port = in[1:end], in[end+1:]
		if port != "" && !strings.HasPrefix(port, ":") {
			return fail("after ] comes :PORT or nothing")
		}
		port = strings.TrimPrefix(port, ":")
		if port == "" && end+1 < len(in) {
			return fail("an empty port")
		}
		if !strings.Contains(host, ":") {
			return fail("brackets are for IPv6 addresses")
		}
	case strings.Count(in, ":") == 1:
		host, port, _ = strings.Cut(in, ":")
		if port == "" {
			return fail("an empty port")
		}
	}
	a := allowance{text: in}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return fail(fmt.Sprintf("port %q is not a TCP port (1-65535)", port))
		}
		a.port = n
	}
	switch {
	case strings.Contains(host, "/"):
		p, err := netip.ParsePrefix(host)
		if err != nil {
			if _, after, _ := strings.Cut(host, "/"); strings.Contains(after, ":") {
				return fail("an IPv6 network with a port goes in brackets, [fd00::/8]:8080")
			}
			return fail(fmt.Sprintf("%s is not a CIDR network", host))
		}
		if p != p.Masked() {
			return fail(fmt.Sprintf("%s has bits set past its /%d: write %s", host, p.Bits(), p.Masked()))
		}
		if p.Addr().Is4In6() {
			return fail("an IPv4 network written as IPv6: write it as IPv4")
		}
		a.prefix = p
	case strings.Contains(host, ":") || isIPv4ish(host):
		addr, err := netip.ParseAddr(host)
		if err != nil {
			return fail(fmt.Sprintf("%s is not an IP address", host))
		}
		if addr.Zone() != "" {
			return fail("an address with a zone (%eth0): scoped addresses are never dialed")
		}
		addr = addr.Unmap()
		a.prefix = netip.PrefixFrom(addr, addr.BitLen())
	default:
		name := strings.TrimSuffix(strings.ToLower(host), ".")
		if err := checkName(name); err != nil {
			return fail(err.Error())
		}
		a.name = name
	}
	return a, nil
}

// isIPv4ish: digits and dots only, which is an address or a mistake,
// never a host name worth resolving.
func isIPv4ish(s string) bool {
	return s != "" && strings.Trim(s, "0123456789.") == ""
}

// checkName checks a host name's syntax.
func checkName(name string) error {
	if name == "" {
		return errors.New("no host")
	}
	if len(name) > 253 {
		return errors.New("a host name is at most 253 characters")
	}
	for _, l := range strings.Split(name, ".") {
		if l == "" || len(l) > 63 {
			return errors.New("each dot-separated label of a host name is 1 to 63 characters")
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("%q is not allowed in a host name", c)
			}
		}
	}
	return nil
}
