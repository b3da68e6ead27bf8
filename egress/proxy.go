package egress

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Proxy is the egress proxy. Make one with New; it serves every session.
type Proxy struct {
	allow    *allowlist
	internal map[string]netip.AddrPort // Config.Internal, checked
	ports    []int
	help     string
	resolver Resolver
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	logger   *slog.Logger
	obs      Observer
	idle     time.Duration
	maxDur   time.Duration
	slots    chan struct{} // one per running tunnel or request
	forward  *httputil.ReverseProxy

	mu     sync.Mutex
	grants map[[sha256.Size]byte]*grant // by the token's SHA-256
}

// grant is one Grant: a session's token, its totals and its callback.
type grant struct {
	session string
	ctx     context.Context // cancelled by revoke: ends its tunnels
	cancel  context.CancelFunc
	allow   *allowlist // nil: the proxy's; else a narrower one for this session

	mu      sync.Mutex // serialises totals and onStats
	totals  Totals
	onStats func(Stats)
}

// Stats describes one request of a session when it ends.
type Stats struct {
	Session string
	Method  string // CONNECT, or the plain-HTTP request's method
	Host    string
	Port    int
	// Allowed is false when the proxy refused the request; Refusal says why.
	Allowed bool
	Refusal string
	// Status is what the proxy answered: 200 for an established tunnel,
	// the upstream's status for plain HTTP, 403, 502, 503 for its own.
	Status int
	// BytesUp went from the box to the target, BytesDown back (bodies
	// only for plain HTTP).
	BytesUp, BytesDown int64
	Duration           time.Duration
	// End says how an established tunnel ended: "closed" (by either
	// side, with a FIN or a reset: neither is an Error), "idle",
	// "max duration", "revoked" or "shutdown".
	End string
	// Error says what went wrong with an allowed request (a dial, the
	// upstream, a tunnel cut by an error), if anything did.
	Error string
	// Totals are the session's, this request included.
	Totals Totals
}

// Totals are a session's running counts.
type Totals struct {
	Requests           int // tunnels and plain-HTTP requests, refused ones included
	Refused            int
	BytesUp, BytesDown int64
}

// New checks cfg and returns a Proxy. Every bad allowlist entry is
// reported, with what to write instead.
func New(cfg Config) (*Proxy, error) {
	internal, err := parseInternal(cfg.Internal)
	if err != nil {
		return nil, err
	}
	entries := slices.Clone(cfg.Allow)
	for name := range internal {
		entries = append(entries, name)
	}
	allow, err := parseAllow(entries)
	if err != nil {
		return nil, err
	}
	ports := cfg.Ports
	if len(ports) == 0 {
		ports = DefaultPorts
	}
	for _, p := range ports {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("egress: port %d is not a TCP port (1-65535)", p)
		}
	}
	if cfg.MaxTunnels < 0 || cfg.IdleTimeout < 0 || cfg.MaxDuration < 0 {
		return nil, errors.New("egress: MaxTunnels, IdleTimeout and MaxDuration must not be negative (0 means the default)")
	}
	p := &Proxy{
		allow:    allow,
		internal: internal,
		ports:    slices.Clone(ports),
		help:     cfg.AllowHelp,
		resolver: cfg.Resolver,
		dial:     cfg.Dial,
		logger:   cfg.Logger,
		obs:      cfg.Observer,
		idle:     cmp(cfg.IdleTimeout, DefaultIdleTimeout),
		maxDur:   cmp(cfg.MaxDuration, DefaultMaxDuration),
		slots:    make(chan struct{}, cmp(cfg.MaxTunnels, DefaultMaxTunnels)),
		grants:   map[[sha256.Size]byte]*grant{},
	}
	if p.help == "" {
		p.help = "ask the operator to add it to the session's egress allowlist"
	}
	if p.resolver == nil {
		p.resolver = net.DefaultResolver
	}
	if p.dial == nil {
		p.dial = (&net.Dialer{Timeout: dialTimeout}).DialContext
	}
	if p.logger == nil {
		p.logger = slog.New(slog.DiscardHandler)
	}
	p.logger = p.logger.With("component", "egress")
	p.forward = p.newForwarder()
	return p, nil
}

func cmp[T int | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// Grant registers a session and returns its token and the function that
// revokes it (idempotent): its next requests get 407, its tunnels and
// requests in flight are ended. onStats, if not nil, is called once per
// request of the session as it ends, never concurrently for one grant.
func (p *Proxy) Grant(session string, onStats func(Stats)) (token string, revoke func()) {
	return p.grant(session, nil, onStats)
}

// GrantOnly is Grant for a session allowed less than the proxy allows:
// only allow's entries, each of which the proxy's allowlist must cover (an
// exact name it allows, or a wildcard at or under one of its wildcards).
// An entry it does not cover is an error that names it.
func (p *Proxy) GrantOnly(session string, allow []string, onStats func(Stats)) (token string, revoke func(), err error) {
	a, err := p.narrow(allow)
	if err != nil {
		return "", nil, err
	}
	token, revoke = p.grant(session, a, onStats)
	return token, revoke, nil
}

// CheckNarrow says whether GrantOnly would take allow: every entry valid
// and covered by the proxy's allowlist.
func (p *Proxy) CheckNarrow(allow []string) error {
	_, err := p.narrow(allow)
	return err
}

func (p *Proxy) narrow(allow []string) (*allowlist, error) {
	a, err := parseAllow(allow)
	if err != nil {
		return nil, err
	}
	var out []string
	for name := range a.exact {
		if !p.allow.allows(name) {
			out = append(out, name)
		}
	}
	for _, s := range a.suffixes {
		if !p.allow.coversSuffix(s) {
			out = append(out, "*"+s)
		}
	}
	if len(out) > 0 {
		slices.Sort(out)
		return nil, fmt.Errorf("egress: %s not on the server's egress allowlist (%s): a session can only narrow it", strings.Join(out, ", "), p.allow)
	}
	return a, nil
}

func (p *Proxy) grant(session string, allow *allowlist, onStats func(Stats)) (token string, revoke func()) {
	var b [32]byte
	rand.Read(b[:])
	token = "harvest-egress-" + hex.EncodeToString(b[:])
	key := sha256.Sum256([]byte(token))
	ctx, cancel := context.WithCancel(context.Background())
	g := &grant{session: session, ctx: ctx, cancel: cancel, onStats: onStats, allow: allow}
	p.mu.Lock()
	p.grants[key] = g
	p.mu.Unlock()
	return token, func() {
		p.mu.Lock()
		delete(p.grants, key)
		p.mu.Unlock()
		cancel()
	}
}

// lookup finds the live grant of the request's Proxy-Authorization.
func (p *Proxy) lookup(r *http.Request) *grant {
	h := r.Header.Get("Proxy-Authorization")
	scheme, cred, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return nil
	}
	// Reuse net/http's decoding of Basic credentials.
	rr := http.Request{Header: http.Header{"Authorization": {"Basic " + strings.TrimSpace(cred)}}}
	_, token, ok := rr.BasicAuth()
	if !ok {
		return nil
	}
	key := sha256.Sum256([]byte(token))
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.grants[key]
}

// record adds st to g's totals, logs the request, then calls onStats (so
// whoever learns of a request from onStats finds its log line written).
func (p *Proxy) record(g *grant, st Stats) {
	if g == nil {
		p.log(st)
		if p.obs != nil {
			p.obs.EgressRequest(st)
		}
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.totals.Requests++
	if !st.Allowed {
		g.totals.Refused++
	}
	g.totals.BytesUp += st.BytesUp
	g.totals.BytesDown += st.BytesDown
	st.Session = g.session
	st.Totals = g.totals
	p.log(st)
	if p.obs != nil {
		p.obs.EgressRequest(st)
	}
	if g.onStats != nil {
		g.onStats(st)
	}
}

func (p *Proxy) log(st Stats) {
	lvl := slog.LevelInfo
	if !st.Allowed {
		lvl = slog.LevelWarn
	}
	p.logger.Log(context.Background(), lvl, "egress",
		"session", st.Session, "method", st.Method, "host", st.Host, "port", st.Port,
		"allowed", st.Allowed, "refusal", st.Refusal, "status", st.Status,
		"up", st.BytesUp, "down", st.BytesDown, "duration", st.Duration, "end", st.End, "error", st.Error)
}

// ServeHTTP serves one proxy request: CONNECT or an absolute-URI
// plain-HTTP request, with a live token.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	st := Stats{Method: r.Method}
	var target string
	if r.Method == http.MethodConnect {
		target = r.Host
	} else {
		if r.URL.Host == "" || !r.URL.IsAbs() {
			http.Error(w, "harvest egress: this is a forward proxy: send absolute-URI requests (GET http://host/...) or CONNECT host:port, as tools do with HTTP_PROXY/HTTPS_PROXY set", http.StatusBadRequest)
			return
		}
		if r.URL.Scheme != "http" {
			http.Error(w, "harvest egress: only http:// URLs are forwarded; for https:// use CONNECT (set HTTPS_PROXY)", http.StatusBadRequest)
			return
		}
		target = r.URL.Host
		if r.URL.Port() == "" {
			target = net.JoinHostPort(strings.Trim(r.URL.Host, "[]"), "80")
		}
	}
	host, port, err := splitTarget(target)
	st.Host, st.Port = host, port
	g := p.lookup(r)
	if g == nil {
		w.Header().Set("Proxy-Authenticate", `Basic realm="harvest egress"`)
		http.Error(w, "harvest egress: proxy authentication required: use the proxy URL Harvest gave the session (http://harvest:TOKEN@...), whose token is live only while the session is", http.StatusProxyAuthRequired)
		st.Refusal, st.Status = "no live token", http.StatusProxyAuthRequired
		p.record(nil, st)
		return
	}
	var slot bool // held: release it before recording, so a caller seeing the stats finds it free
	release := func() {
		if slot {
			slot = false
			<-p.slots
		}
	}
	defer release()
	refuse := func(status int, reason, msg string) {
		release()
		w.Header().Set("X-Harvest-Egress", msg)
		http.Error(w, "harvest egress: "+msg, status)
		st.Refusal, st.Status, st.Duration = reason, status, time.Since(start)
		p.record(g, st)
	}
	if err != nil {
		refuse(http.StatusBadRequest, "bad target", fmt.Sprintf("bad target %q: %v", target, err))
		return
	}
	if !p.allow.allows(host) {
		refuse(http.StatusForbidden, "not allowed", fmt.Sprintf("%s is not on this session's egress allowlist of package registries; to reach it, %s (an entry %q, or %q for every name under a domain)", host, p.help, host, "*."+parentDomain(host)))
		return
	}
	if g.allow != nil && !g.allow.allows(host) {
		refuse(http.StatusForbidden, "not allowed", fmt.Sprintf("%s is not on this session's egress allowlist (%s), narrower than the server's; to reach it, create the session with it in egress", host, g.allow))
		return
	}
	if pin, ok := p.internal[host]; ok {
		if int(pin.Port()) != port {
			refuse(http.StatusForbidden, "port not allowed", fmt.Sprintf("%s is an internal registry at port %d: port %d is not allowed", host, pin.Port(), port))
			return
		}
	} else if !slices.Contains(p.ports, port) {
		refuse(http.StatusForbidden, "port not allowed", fmt.Sprintf("%s: port %d is not allowed (allowed: %v)", host, port, p.ports))
		return
	}
	select {
	case p.slots <- struct{}{}:
		slot = true
	default:
		w.Header().Set("Retry-After", "1")
		refuse(http.StatusServiceUnavailable, "too many tunnels", fmt.Sprintf("%s: too many connections through the proxy at once (%d): retry", host, cap(p.slots)))
		return
	}
	// The request ends with the grant (revoke), and after MaxDuration.
	parent := r.Context()
	if r.Method == http.MethodConnect {
		// A tunnel outlives its request's context as net/http sees it (the
		// connection is hijacked): it ends with Serve's.
		parent = context.WithoutCancel(parent)
		if sc, ok := r.Context().Value(serveKey{}).(context.Context); ok {
			parent = sc
		}
	}
	ctx, cancel := context.WithTimeoutCause(parent, p.maxDur, errMaxDuration)
	defer cancel()
	stop := context.AfterFunc(g.ctx, func() { cancel() })
	defer stop()

	addrs, err := p.resolve(ctx, host)
	if err != nil {
		var fe *forbiddenError
		if errors.As(err, &fe) {
			refuse(http.StatusForbidden, "forbidden address", err.Error())
		} else {
			refuse(http.StatusBadGateway, "resolve failed", err.Error())
		}
		return
	}
	st.Allowed = true
	if r.Method == http.MethodConnect {
		p.tunnel(ctx, g, w, r, addrs, port, &st)
	} else {
		p.forwardHTTP(ctx, w, r, addrs, port, &st)
	}
	st.Duration = time.Since(start)
	release()
	p.record(g, st)
}

var errMaxDuration = errors.New("max duration")

func splitTarget(target string) (string, int, error) {
	h, ps, err := net.SplitHostPort(target)
	if err != nil {
		return "", 0, errors.New("want host:port")
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not a TCP port", ps)
	}
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if h == "" {
		return "", 0, errors.New("no host")
	}
	return h, port, nil
}

// parentDomain is what a wildcard for host's siblings would name.
func parentDomain(host string) string {
	if _, rest, ok := strings.Cut(host, "."); ok && strings.Contains(rest, ".") {
		return rest
	}
	return host
}

// forbiddenError is a name that resolves only to addresses the proxy
// must not dial.
type forbiddenError struct {
	host  string
	addrs []netip.Addr
}

func (e *forbiddenError) Error() string {
	return fmt.Sprintf("%s resolves to %v, which the proxy does not dial (loopback, private, link-local or reserved): an allowlisted name must lead to a public registry", e.host, e.addrs)
}

// resolve returns the public addresses of host, or a forbiddenError when
// there are none.
func (p *Proxy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if pin, ok := p.internal[host]; ok {
		return []netip.Addr{pin.Addr()}, nil // the operator's pin: no lookup, no rebinding
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil, &forbiddenError{host: host} // never reached: IPs are never allowlisted
	}
	rctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	all, err := p.resolver.LookupNetIP(rctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", host, err)
	}
	var ok []netip.Addr
	for _, a := range all {
		if publicAddr(a) {
			ok = append(ok, a.Unmap())
		}
	}
	if len(ok) == 0 {
		return nil, &forbiddenError{host: host, addrs: all}
	}
	return ok, nil
}

// dialChecked dials the first of addrs that answers: addresses, never
// the name, so what was checked is what is dialed.
func (p *Proxy) dialChecked(ctx context.Context, addrs []netip.Addr, port int) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	var errs []error
	for _, a := range addrs {
		c, err := p.dial(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
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
