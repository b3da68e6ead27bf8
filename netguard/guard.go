package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Timeouts of a Guard's lookups and dials, and of its Transport.
const (
	LookupTimeout       = 15 * time.Second
	DialTimeout         = 30 * time.Second
	TLSHandshakeTimeout = 10 * time.Second
	IdleConnTimeout     = 90 * time.Second
)

// Resolver looks names up; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a Guard. The zero Config is the default policy.
type Config struct {
	// Allow are the operator's allowances (see the package doc for the
	// forms): hosts, addresses and networks dialed although forbidden.
	Allow []string
	// AllowHint is how an operator allows a host, as the start of a
	// command line the refused host is appended to ("harvest serve
	// --mcp-allow"); DefaultAllowHint when empty.
	AllowHint string
	// Resolver resolves names; net.DefaultResolver when nil.
	Resolver Resolver
	// Dial dials the checked addresses ("IP:port", never a name); a
	// net.Dialer's when nil. Tests use it to see what is dialed.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// DefaultAllowHint is Config.AllowHint's default.
const DefaultAllowHint = "harvest serve --mcp-allow"

// Guard resolves, checks and dials hosts by the address policy (see the
// package doc). A nil *Guard is the default policy. Its methods are safe
// for concurrent use.
type Guard struct {
	allow    []allowance
	hint     string
	resolver Resolver
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
}

// defaultGuard is what a nil *Guard does.
var defaultGuard = func() *Guard {
	g, err := New(Config{})
	if err != nil {
		panic(err)
	}
	return g
}()

// New makes a Guard, checking every allowance and reporting every bad
// one, each with what to write instead.
func New(cfg Config) (*Guard, error) {
	g := &Guard{hint: cfg.AllowHint, resolver: cfg.Resolver, dial: cfg.Dial}
	if g.hint == "" {
		g.hint = DefaultAllowHint
	}
	if g.resolver == nil {
		g.resolver = net.DefaultResolver
	}
	if g.dial == nil {
		d := &net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second}
		g.dial = d.DialContext
	}
	var errs []error
	for _, s := range cfg.Allow {
		a, err := parseAllow(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		g.allow = append(g.allow, a)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return g, nil
}

func (g *Guard) orDefault() *Guard {
	if g == nil {
		return defaultGuard
	}
	return g
}

// Allowed lists the allowances, as given (trimmed).
func (g *Guard) Allowed() []string {
	var out []string
	for _, a := range g.orDefault().allow {
		out = append(out, a.text)
	}
	return out
}

// RefusedError is a host the guard does not dial. Its Error is meant for
// whoever gave the host: for a name it says only that the name does not
// lead to public addresses, not whether it resolves nor to what (that
// would map the host's network for them); Detail says which, for the
// operator's log.
type RefusedError struct {
	// Host and Port are the target as given (Host lower-cased).
	Host string
	Port int
	// Literal: Host is an IP address.
	Literal bool
	// Addr is the refused address and Class why (Class); Addr is not
	// valid when the name did not resolve.
	Addr  netip.Addr
	Class string
	// Lookup is the resolver's error when the name did not resolve.
	Lookup error

	hint string
}

func (e *RefusedError) Error() string {
	allow := e.Host
	if strings.Contains(allow, ":") {
		allow = "[" + allow + "]"
	}
	allow = fmt.Sprintf("%s %s:%d", e.hint, allow, e.Port)
	if e.Literal {
		return fmt.Sprintf("%s is %s address, which Harvest does not dial on anyone's behalf (loopback, private, link-local, shared and reserved addresses are refused); an operator who trusts it allows it with `%s`", e.Host, article(e.Class), allow)
	}
	return fmt.Sprintf("%s does not resolve to public addresses only, so Harvest does not dial it (loopback, private, link-local, shared and reserved addresses are refused, as are names that do not resolve); an operator who trusts it allows it with `%s`", e.Host, allow)
}

// Detail is Error with what the name resolved to, for the operator.
func (e *RefusedError) Detail() string {
	switch {
	case e.Literal:
		return e.Error()
	case e.Lookup != nil:
		return fmt.Sprintf("%s does not resolve (%v)", e.Host, e.Lookup)
	}
	return fmt.Sprintf("%s resolves to %s, %s address: refused", e.Host, e.Addr, article(e.Class))
}

// article is class with "a" or "an" before it.
func article(class string) string {
	if class != "" && strings.ContainsRune("aeiou", rune(class[0])) {
		return "an " + class
	}
	return "a " + class
}

// Detail is err's RefusedError's Detail, or err's text ("" for nil).
func Detail(err error) string {
	if err == nil {
		return ""
	}
	if re, ok := errors.AsType[*RefusedError](err); ok {
		return re.Detail()
	}
	return err.Error()
}

// Resolve returns the addresses to dial for host at port: host itself
// when it is an address, else what it resolves to, once. It is a
// *RefusedError when any of them is forbidden and not allowed, or when
// the name does not resolve. The addresses are unmapped (::ffff:a.b.c.d
// is a.b.c.d) and each listed once.
func (g *Guard) Resolve(ctx context.Context, host string, port int) ([]netip.Addr, error) {
	g = g.orDefault()
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "" {
		return nil, errors.New("no host to dial")
	}
	refuse := func(e *RefusedError) error {
		e.Host, e.Port, e.hint = host, port, g.hint
		return e
	}
	var addrs []netip.Addr
	a, err := netip.ParseAddr(host)
	literal := err == nil
	if literal {
		addrs = []netip.Addr{a}
	} else {
		lctx, cancel := context.WithTimeout(ctx, LookupTimeout)
		addrs, err = g.resolver.LookupNetIP(lctx, "ip", host)
		cancel()
		if err == nil && len(addrs) == 0 {
			err = errors.New("no addresses")
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("resolving %s: %w", host, ctx.Err())
			}
			return nil, refuse(&RefusedError{Lookup: err})
		}
	}
	byName := slices.ContainsFunc(g.allow, func(al allowance) bool { return al.matchesName(host, port) })
	var out []netip.Addr
	for _, a := range addrs {
		class := Class(a)
		a = a.Unmap()
		if class != "" && !byName && !slices.ContainsFunc(g.allow, func(al allowance) bool { return al.matchesAddr(a, port) }) {
			return nil, refuse(&RefusedError{Literal: literal, Addr: a, Class: class})
		}
		if a.Zone() != "" { // allowed by name or network, but a zone is never dialed
			return nil, refuse(&RefusedError{Literal: literal, Addr: a, Class: "scoped"})
		}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out, nil
}

// DialContext dials addr ("host:port") as Resolve checks it: each of the
// checked addresses in turn, never the name, so what was checked is what
// is dialed.
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	g = g.orDefault()
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", addr, err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return nil, fmt.Errorf("dialing %s: port %q is not a TCP port", addr, ps)
	}
	addrs, err := g.Resolve(ctx, host, port)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	var errs []error
	for i, a := range addrs {
		// Like net.Dialer with a name: the time left is shared among the
		// addresses left (2 s at least each), so one that never answers
		// (an IPv6 route that drops) does not use it all.
		actx, acancel := ctx, context.CancelFunc(func() {})
		if left := len(addrs) - i; left > 1 {
			actx, acancel = context.WithTimeout(ctx, max(time.Until(deadline)/time.Duration(left), 2*time.Second))
		}
		c, err := g.dial(actx, network, netip.AddrPortFrom(a, uint16(port)).String())
		acancel()
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// Transport is an HTTP transport whose every connection is DialContext's:
// no proxy (HTTP_PROXY and friends would have the proxy dial the host
// unchecked), the usual timeouts for dialing, TLS and idle connections,
// none for a response, whose context bounds it. The caller closes its
// idle connections when done.
func (g *Guard) Transport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           g.orDefault().DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       IdleConnTimeout,
		TLSHandshakeTimeout:   TLSHandshakeTimeout,
		ExpectContinueTimeout: time.Second,
	}
}

// CheckURL checks that rawURL is an http:// or https:// URL whose host
// the guard would dial now (Resolve at its port, the scheme's when it
// gives none). The dial checks again: this is to refuse early.
func (g *Guard) CheckURL(ctx context.Context, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %w", rawURL, err)
	}
	var port int
	switch u.Scheme {
	case "http":
		port = 80
	case "https":
		port = 443
	default:
		return fmt.Errorf("%q: give an http:// or https:// URL", rawURL)
	}
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil || port < 1 || port > 65535 {
			return fmt.Errorf("%q: port %q is not a TCP port", rawURL, p)
		}
	}
	if u.Hostname() == "" {
		return fmt.Errorf("%q has no host", rawURL)
	}
	_, err = g.Resolve(ctx, u.Hostname(), port)
	return err
}
