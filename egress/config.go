package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/netguard"
)

// DefaultRegistries are the hosts the common package managers fetch from:
// npm (and Yarn's mirror of it, and repo.yarnpkg.com, where corepack gets
// Yarn 2 and later), PyPI, the Go module proxy and checksum database,
// crates.io, RubyGems, and Debian's mirrors. Git hosts are deliberately
// not here: a git host is also a place to push to.
var DefaultRegistries = []string{
	"registry.npmjs.org",
	"registry.yarnpkg.com",
	"repo.yarnpkg.com",
	"pypi.org",
	"files.pythonhosted.org",
	"proxy.golang.org",
	"sum.golang.org",
	"crates.io",
	"static.crates.io",
	"index.crates.io",
	"rubygems.org",
	"index.rubygems.org",
	"deb.debian.org",
	"security.debian.org",
}

// Expand returns entries with "registries" replaced by DefaultRegistries
// and blanks dropped.
func Expand(entries []string) []string {
	out := []string{}
	for _, e := range entries {
		switch e = strings.TrimSpace(e); e {
		case "":
		case "registries":
			out = append(out, DefaultRegistries...)
		default:
			out = append(out, e)
		}
	}
	return out
}

// Defaults for Config's zero values.
const (
	DefaultMaxTunnels  = 128
	DefaultIdleTimeout = 2 * time.Minute
	DefaultMaxDuration = 30 * time.Minute
	dialTimeout        = 15 * time.Second
)

// DefaultPorts are the ports a target may have when Config.Ports is empty.
var DefaultPorts = []int{443, 80}

// Resolver looks names up; *net.Resolver is one.
type Resolver = netguard.Resolver

// Observer hears of the proxy's requests. EgressRequest runs on the
// request's goroutine, after its log line, and must return at once.
type Observer interface {
	EgressRequest(Stats)
}

// Config configures a Proxy. Only Allow is required.
type Config struct {
	// Allow lists the hosts a box may reach: exact names
	// ("registry.npmjs.org") and "*.suffix" for every name under suffix
	// ("*.pythonhosted.org" matches files.pythonhosted.org, not
	// pythonhosted.org). DefaultRegistries is a start.
	Allow []string
	// Ports a target may have; DefaultPorts when empty.
	Ports []int
	// Internal are registries on the operator's own network (a company's
	// package mirror), each a name the proxy dials at exactly the address
	// and port given, without resolving it, although the address is
	// private. The name is allowed at that port only. Loopback, link-local
	// (the metadata service), unspecified and multicast addresses are
	// refused: the first is the Harvest host itself.
	Internal map[string]netip.AddrPort
	// AllowHelp ends a 403's message, saying how an operator allows a
	// host, e.g. `add it to egress.allow in harvest.yaml`. Default: a
	// generic sentence.
	AllowHelp string

	// Resolver resolves target names; net.DefaultResolver when nil.
	Resolver Resolver
	// Dial dials the checked addresses ("IP:port"); a net.Dialer's when
	// nil. Tests use it to reach a loopback server behind a public-looking
	// address.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	Logger *slog.Logger
	// Observer, when set, hears of every request once it has ended, as
	// the grant's onStats does, and of those without a token too
	// (package telemetry counts them).
	Observer Observer

	// MaxTunnels caps the tunnels and plain-HTTP requests running at once
	// across all sessions; DefaultMaxTunnels when 0.
	MaxTunnels int
	// IdleTimeout closes a tunnel that carried no byte either way for this
	// long; DefaultIdleTimeout when 0.
	IdleTimeout time.Duration
	// MaxDuration closes a tunnel, or ends a request, this long after it
	// began; DefaultMaxDuration when 0.
	MaxDuration time.Duration
}

// allowlist is Config.Allow, checked and normalised.
type allowlist struct {
	exact    map[string]bool
	suffixes []string // ".example.org" for "*.example.org"
}

func (a *allowlist) allows(host string) bool {
	if a.exact[host] {
		return true
	}
	for _, s := range a.suffixes {
		if strings.HasSuffix(host, s) && len(host) > len(s) {
			return true
		}
	}
	return false
}

// coversSuffix reports whether a wildcard for suffix (".example.com") asks
// for nothing a allows no more: a has the same wildcard or one for a parent
// domain.
func (a *allowlist) coversSuffix(suffix string) bool {
	for _, s := range a.suffixes {
		if suffix == s || strings.HasSuffix(suffix, s) {
			return true
		}
	}
	return false
}

// String lists the entries, sorted.
func (a *allowlist) String() string {
	var out []string
	for name := range a.exact {
		out = append(out, name)
	}
	for _, s := range a.suffixes {
		out = append(out, "*"+s)
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// parseAllow checks every entry and reports every bad one, saying what
// to write instead.
func parseAllow(entries []string) (*allowlist, error) {
	if len(entries) == 0 {
		return nil, errors.New("egress: the allowlist is empty, so the proxy would refuse everything: list the registries to allow (egress.DefaultRegistries is a start), or do not run the proxy")
	}
	a := &allowlist{exact: map[string]bool{}}
	var errs []error
	for _, e := range entries {
		name := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(e)), ".")
		wild := strings.HasPrefix(name, "*.")
		if wild {
			name = name[2:]
		}
		if err := checkName(name, wild); err != nil {
			errs = append(errs, fmt.Errorf("egress: allowlist entry %q: %w", e, err))
			continue
		}
		if wild {
			a.suffixes = append(a.suffixes, "."+name)
		} else {
			a.exact[name] = true
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return a, nil
}

func checkName(name string, wild bool) error {
	switch {
	case name == "" || name == "*":
		return errors.New(`empty or "*": name the hosts to allow`)
	case strings.Contains(name, "://") || strings.ContainsAny(name, "/?#@"):
		return errors.New(`a host name only, without scheme, path or user (e.g. "registry.npmjs.org")`)
	case strings.Contains(name, "*"):
		return errors.New(`a wildcard only as the first label ("*.example.org")`)
	}
	if _, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil {
		return errors.New("an IP address: name the host (the proxy allows names, and resolves them itself)")
	}
	if strings.Contains(name, ":") {
		return errors.New("a host name without a port (ports are Config.Ports)")
	}
	if wild && !strings.Contains(name, ".") {
		return errors.New(`too broad: a wildcard must be under a domain ("*.example.org"), not a top-level domain`)
	}
	if len(name) > 253 {
		return errors.New("longer than 253 characters")
	}
	for _, l := range strings.Split(name, ".") {
		if l == "" || len(l) > 63 {
			return errors.New("each dot-separated label must be 1 to 63 characters")
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("%q is not allowed in a host name", c)
			}
		}
	}
	return nil
}

// parseInternal checks Config.Internal's pins.
func parseInternal(pins map[string]netip.AddrPort) (map[string]netip.AddrPort, error) {
	out := map[string]netip.AddrPort{}
	var errs []error
	for name, ap := range pins {
		n := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(name)), ".")
		if err := checkName(n, false); err != nil {
			errs = append(errs, fmt.Errorf("egress: internal registry %q: %w", name, err))
			continue
		}
		a := ap.Addr().Unmap()
		switch {
		case !ap.IsValid() || ap.Port() == 0:
			errs = append(errs, fmt.Errorf("egress: internal registry %s: want an address and a port (%s=10.0.0.5:8080)", name, name))
		case a.IsLoopback():
			errs = append(errs, fmt.Errorf("egress: internal registry %s at %v: a loopback address is the Harvest host itself, which boxes must not reach; serve the registry on the host's network address instead", name, ap))
		case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast(), a.IsUnspecified(), a.IsMulticast(), a.Zone() != "":
			errs = append(errs, fmt.Errorf("egress: internal registry %s at %v: a link-local, unspecified or multicast address is never dialed (the metadata service lives there)", name, ap))
		default:
			out[n] = netip.AddrPortFrom(a, ap.Port())
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// ParseInternal parses NAME=IP:PORT, an internal registry pin (see
// Config.Internal), saying what to write instead when it is not one.
func ParseInternal(s string) (string, netip.AddrPort, error) {
	name, addr, ok := strings.Cut(s, "=")
	if !ok || name == "" || addr == "" {
		return "", netip.AddrPort{}, fmt.Errorf("%q: want NAME=IP:PORT, like pypi.internal=10.0.0.5:8080", s)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return "", netip.AddrPort{}, fmt.Errorf("%q: %s is not IP:PORT (an address, not a name: the proxy dials exactly it)", s, addr)
	}
	return name, ap, nil
}

// publicAddr reports whether a target may be dialed: netguard's policy,
// the one every connection Harvest makes for someone else follows.
func publicAddr(a netip.Addr) bool { return netguard.Public(a) }
