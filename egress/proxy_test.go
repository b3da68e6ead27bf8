package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// An allowlisted name, resolved to a public-looking address that the
// injected dial routes to a loopback TLS server: the tunnel carries TLS
// end to end (the client verifies the server's certificate for the name),
// bytes flow both ways, the proxy dials the checked address (not the
// name), and the stats and the log line count it.
func TestTunnel(t *testing.T) {
	cert, roots, _ := testCert(t, "pkg.harvest.test")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write([]byte("got " + r.URL.Path + " "))
		w.Write(b)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()

	h := newHarness(t, Config{Allow: []string{"pkg.harvest.test"}})
	h.net.route("pkg.harvest.test", "203.0.113.7", 443, srv.Listener.Addr().String())
	stats := newStatsLog()
	tok, _ := h.p.Grant("s1", stats.add)

	c, tr := client(h.addr, tok, roots)
	body := bytes.Repeat([]byte("0123456789"), 10000)
	resp, err := c.Post("https://pkg.harvest.test/tarball", "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := "got /tarball " + string(body); string(got) != want {
		t.Fatalf("through the tunnel: %d bytes %.40q, want %d bytes", len(got), got, len(want))
	}
	tr.CloseIdleConnections() // the client closes the tunnel
	st := stats.next(t)
	if !st.Allowed || st.Session != "s1" || st.Method != "CONNECT" || st.Host != "pkg.harvest.test" || st.Port != 443 ||
		st.Status != 200 || st.End != "closed" || st.Error != "" {
		t.Errorf("stats %+v", st)
	}
	if st.BytesUp < int64(len(body)) || st.BytesDown < int64(len(body)) || st.Duration <= 0 {
		t.Errorf("bytes up %d down %d duration %v: want each way over %d", st.BytesUp, st.BytesDown, st.Duration, len(body))
	}
	if st.Totals != (Totals{Requests: 1, BytesUp: st.BytesUp, BytesDown: st.BytesDown}) {
		t.Errorf("totals %+v", st.Totals)
	}
	if _, dialed := h.net.seen(); !slices.Equal(dialed, []string{"203.0.113.7:443"}) {
		t.Errorf("dialed %v, want the checked address only", dialed)
	}
	if log := h.log.String(); !contains(log, "session=s1", "host=pkg.harvest.test", "port=443", "allowed=true", "end=closed") || strings.Contains(log, tok) {
		t.Errorf("log line missing fields, or holding the token:\n%s", log)
	}
}

// A plain-HTTP request (absolute URI, like apt's) is forwarded to the
// checked address; the client's Proxy-Authorization does not travel
// upstream; the stats count the bodies.
func TestPlainHTTP(t *testing.T) {
	var upstreamAuth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamAuth = append(upstreamAuth, r.Header.Get("Proxy-Authorization"))
		w.Write([]byte("Release file for " + r.Host + r.URL.Path))
	}))
	defer srv.Close()
	h := newHarness(t, Config{Allow: []string{"*.debian.harvest.test"}})
	h.net.route("deb.debian.harvest.test", "203.0.113.8", 80, srv.Listener.Addr().String())
	stats := newStatsLog()
	tok, _ := h.p.Grant("s2", stats.add)

	c, _ := client(h.addr, tok, nil)
	resp, err := c.Get("http://deb.debian.harvest.test/debian/dists/bookworm/Release")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := "Release file for deb.debian.harvest.test/debian/dists/bookworm/Release"
	if resp.StatusCode != 200 || string(got) != want {
		t.Fatalf("%d %q, want 200 %q", resp.StatusCode, got, want)
	}
	st := stats.next(t)
	if !st.Allowed || st.Method != "GET" || st.Port != 80 || st.Status != 200 || st.BytesDown != int64(len(want)) || st.BytesUp != 0 {
		t.Errorf("stats %+v", st)
	}
	if len(upstreamAuth) != 1 || upstreamAuth[0] != "" {
		t.Errorf("upstream saw Proxy-Authorization %q", upstreamAuth)
	}
	if _, dialed := h.net.seen(); !slices.Equal(dialed, []string{"203.0.113.8:80"}) {
		t.Errorf("dialed %v", dialed)
	}
}

// A host not on the list, a port not allowed, or an IP address as the
// target is refused with 403 naming the host and how to allow it;
// nothing is resolved or dialed, and the refusal is counted.
func TestNotAllowed(t *testing.T) {
	h := newHarness(t, Config{Allow: []string{"pkg.harvest.test"}, AllowHelp: "add it to egress.allow"})
	stats := newStatsLog()
	tok, _ := h.p.Grant("s3", stats.add)

	for _, tc := range []struct{ target, want string }{
		{"evil.example.net:443", `evil.example.net is not on this session's egress allowlist of package registries; to reach it, add it to egress.allow (an entry "evil.example.net", or "*.example.net"`},
		{"pkg.harvest.test:22", "pkg.harvest.test: port 22 is not allowed"},
		{"203.0.113.7:443", "203.0.113.7 is not on this session's egress allowlist"},
		{"[::1]:443", "::1 is not on this session's egress allowlist"},
	} {
		resp, body, _ := connect(t, h.addr, tc.target, basic(tok))
		if resp.StatusCode != 403 || !strings.Contains(body, tc.want) || !strings.Contains(resp.Header.Get("X-Harvest-Egress"), tc.want) {
			t.Errorf("CONNECT %s: %d %q, want 403 with %q", tc.target, resp.StatusCode, body, tc.want)
		}
		if st := stats.next(t); st.Allowed || st.Status != 403 || st.Refusal == "" || st.BytesUp+st.BytesDown != 0 {
			t.Errorf("CONNECT %s: stats %+v", tc.target, st)
		}
	}
	c, _ := client(h.addr, tok, nil)
	resp, err := c.Get("http://evil.example.net/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(body), "evil.example.net is not on") {
		t.Errorf("GET: %d %q", resp.StatusCode, body)
	}
	st := stats.next(t)
	if st.Totals != (Totals{Requests: 5, Refused: 5}) {
		t.Errorf("totals %+v", st.Totals)
	}
	if lookups, dialed := h.net.seen(); len(lookups)+len(dialed) != 0 {
		t.Errorf("resolved %v and dialed %v for refused targets", lookups, dialed)
	}
}

// An allowlisted name that resolves to the host's network — loopback,
// private, ULA, link-local, the metadata service, shared, a mapped IPv4 —
// is refused and not dialed; of a mixed answer only the public address
// is dialed.
func TestForbiddenAddresses(t *testing.T) {
	upstream := echoServer(t)
	h := newHarness(t, Config{Allow: []string{"*.harvest.test"}})
	bad := []string{"127.0.0.1", "10.1.2.3", "172.20.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1",
		"0.0.0.0", "::1", "fd00::1", "fe80::1", "::ffff:192.168.1.1", "fd00:ec2::254", "2002:c0a8:101::1", "224.0.0.1"}
	for _, ip := range bad {
		// Every forbidden address has a route: only the check stops it.
		h.net.route("rebind.harvest.test", ip, 443, upstream)
	}
	stats := newStatsLog()
	tok, _ := h.p.Grant("s4", stats.add)
	resp, body, _ := connect(t, h.addr, "rebind.harvest.test:443", basic(tok))
	if resp.StatusCode != 403 || !contains(body, "rebind.harvest.test resolves to", "169.254.169.254", "does not dial") {
		t.Errorf("%d %q", resp.StatusCode, body)
	}
	if st := stats.next(t); st.Allowed || st.Refusal != "forbidden address" {
		t.Errorf("stats %+v", st)
	}
	if _, dialed := h.net.seen(); len(dialed) != 0 {
		t.Errorf("dialed %v", dialed)
	}

	h.net.route("mixed.harvest.test", "10.0.0.5", 443, upstream)
	h.net.route("mixed.harvest.test", "203.0.113.9", 443, upstream)
	resp, _, tc := connect(t, h.addr, "mixed.harvest.test:443", basic(tok))
	if resp.StatusCode != 200 {
		t.Fatalf("mixed: %d", resp.StatusCode)
	}
	tc.Close()
	stats.next(t)
	if _, dialed := h.net.seen(); !slices.Equal(dialed, []string{"203.0.113.9:443"}) {
		t.Errorf("dialed %v, want the public address only", dialed)
	}

	for _, ip := range bad {
		if publicAddr(netip.MustParseAddr(ip)) {
			t.Errorf("%s counts as public", ip)
		}
	}
	for _, ip := range []string{"203.0.113.9", "151.101.0.223", "2a04:4e42::223", "::ffff:151.101.0.223"} {
		if !publicAddr(netip.MustParseAddr(ip)) {
			t.Errorf("%s counts as forbidden", ip)
		}
	}
}

// Without a live token the answer is 407 with a Basic challenge, before
// anything is resolved or dialed; revoking a token refuses its next
// request and closes its open tunnel.
func TestToken(t *testing.T) {
	upstream := echoServer(t)
	observed := newStatsLog()
	h := newHarness(t, Config{Allow: []string{"pkg.harvest.test"}, Observer: observed})
	h.net.route("pkg.harvest.test", "203.0.113.7", 443, upstream)
	stats := newStatsLog()
	tok, revoke := h.p.Grant("s5", stats.add)
	other, _ := h.p.Grant("s6", nil)

	for name, auth := range map[string]string{
		"none":   "",
		"wrong":  basic("harvest-egress-guess"),
		"bearer": "Bearer " + tok,
		"junk":   "Basic !!!",
	} {
		resp, body, _ := connect(t, h.addr, "pkg.harvest.test:443", auth)
		if resp.StatusCode != 407 || resp.Header.Get("Proxy-Authenticate") == "" || !strings.Contains(body, "proxy authentication required") {
			t.Errorf("%s: %d %q", name, resp.StatusCode, body)
		}
	}
	if lookups, dialed := h.net.seen(); len(lookups)+len(dialed) != 0 {
		t.Errorf("resolved %v, dialed %v without a token", lookups, dialed)
	}
	stats.none(t)
	// The proxy's Observer hears of them, which no grant does.
	for range 4 {
		if st := observed.next(t); st.Allowed || st.Status != 407 || st.Session != "" || st.Method != "CONNECT" {
			t.Errorf("a request without a live token, observed as %+v", st)
		}
	}

	_, _, tc := connect(t, h.addr, "pkg.harvest.test:443", basic(tok))
	if _, err := tc.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(tc, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo %q %v", buf, err)
	}
	revoke()
	if n, err := tc.Read(buf); err == nil {
		t.Errorf("the tunnel still reads (%d bytes) after revoke", n)
	}
	if st := stats.next(t); st.End != "revoked" || st.BytesUp != 4 || st.BytesDown != 4 {
		t.Errorf("stats %+v", st)
	}
	if st := observed.next(t); st.Session != "s5" || st.End != "revoked" || !st.Allowed {
		t.Errorf("the tunnel, observed as %+v", st)
	}
	revoke() // idempotent
	if resp, _, _ := connect(t, h.addr, "pkg.harvest.test:443", basic(tok)); resp.StatusCode != 407 {
		t.Errorf("revoked token: %d", resp.StatusCode)
	}
	if resp, _, _ := connect(t, h.addr, "pkg.harvest.test:443", basic(other)); resp.StatusCode != 200 {
		t.Errorf("another session's token after the revoke: %d", resp.StatusCode)
	}
}

// A side that closes its connection with a reset (SO_LINGER 0, or any
// close with unread bytes, as a TLS client does when the server's
// close_notify is still on its way) closes the tunnel normally: End
// "closed" and no Error, whichever side it is. The proxy's own closes
// (net.ErrClosed) are no error either; a failure of the tunnel is.
func TestTunnelReset(t *testing.T) {
	resetting := func(tc *net.TCPConn) {
		tc.SetLinger(0) // Close sends a RST, not a FIN
		tc.Close()
	}
	for _, side := range []string{"client", "target"} {
		t.Run(side+" resets", func(t *testing.T) {
			upstream := echoServer(t)
			if side == "target" {
				upstream = onceServer(t, func(c net.Conn) {
					buf := make([]byte, 4)
					if _, err := io.ReadFull(c, buf); err == nil {
						c.Write(buf)
					}
					resetting(c.(*net.TCPConn))
				})
			}
			h := newHarness(t, Config{Allow: []string{"pkg.harvest.test"}})
			h.net.route("pkg.harvest.test", "203.0.113.7", 443, upstream)
			stats := newStatsLog()
			tok, _ := h.p.Grant("s8", stats.add)
			_, _, tc := connect(t, h.addr, "pkg.harvest.test:443", basic(tok))
			if _, err := tc.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4)
			if _, err := io.ReadFull(tc, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("echo %q %v", buf, err)
			}
			if side == "client" {
				resetting(tc.Conn.(*net.TCPConn))
			}
			st := stats.next(t)
			if st.End != "closed" || st.Error != "" || st.BytesUp != 4 || st.BytesDown != 4 {
				t.Errorf("stats %+v, want closed with no error and 4 bytes each way", st)
			}
			if log := h.log.String(); !contains(log, "end=closed", `error=""`) {
				t.Errorf("log line calls the close an error:\n%s", log)
			}
		})
	}

	wrap := func(err error) error {
		return &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", err)}
	}
	for _, tc := range []struct {
		err    error
		normal bool
	}{
		{nil, true},
		{wrap(syscall.ECONNRESET), true},
		{&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}, true},
		{wrap(syscall.ETIMEDOUT), false},
		{wrap(syscall.EHOSTUNREACH), false},
		{errors.New("tls: something else"), false},
	} {
		if got := closedNormally(tc.err); got != tc.normal {
			t.Errorf("closedNormally(%v) = %v, want %v", tc.err, got, tc.normal)
		}
	}
}

// MaxTunnels caps tunnels at once: one more gets 503 with Retry-After,
// and a slot frees when a tunnel ends.
func TestTunnelCap(t *testing.T) {
	upstream := echoServer(t)
	h := newHarness(t, Config{Allow: []string{"pkg.harvest.test"}, MaxTunnels: 2})
	h.net.route("pkg.harvest.test", "203.0.113.7", 443, upstream)
	stats := newStatsLog()
	tok, _ := h.p.Grant("s7", stats.add)
	_, _, a := connect(t, h.addr, "pkg.harvest.test:443", basic(tok))
	_, _, b := connect(t, h.addr, "pkg.harvest.test:443", basic(tok))
	if a == nil || b == nil {
		t.Fatal("the first two tunnels were refused")
	}
	resp, body, _ := connect(t, h.addr, "pkg.harvest.test:443", basic(tok))
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "too many connections") {
		t.Errorf("third: %d %q", resp.StatusCode, body)
	}
	if st := stats.next(t); st.Refusal != "too many tunnels" {
		t.Errorf("stats %+v", st)
	}
	a.Close()
	if st := stats.next(t); st.End != "closed" {
		t.Errorf("stats %+v", st)
	}
	if resp, _, _ := connect(t, h.addr, "pkg.harvest.test:443", basic(tok)); resp.StatusCode != 200 {
		t.Errorf("after one ended: %d", resp.StatusCode)
	}
}

// A tunnel with no byte either way for IdleTimeout is closed; one that
// lasts MaxDuration is closed however busy.
func TestTimeouts(t *testing.T) {
	upstream := echoServer(t)
	for _, tc := range []struct {
		name string
		cfg  Config
		end  string
	}{
		{"idle", Config{IdleTimeout: 50 * time.Millisecond}, "idle"},
		{"max duration", Config{MaxDuration: 50 * time.Millisecond}, "max duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Allow = []string{"pkg.harvest.test"}
			h := newHarness(t, tc.cfg)
			h.net.route("pkg.harvest.test", "203.0.113.7", 443, upstream)
			stats := newStatsLog()
			tok, _ := h.p.Grant("s8", stats.add)
			_, _, c := connect(t, h.addr, "pkg.harvest.test:443", basic(tok))
			c.Write([]byte("ping"))
			buf := make([]byte, 4)
			if _, err := io.ReadFull(c, buf); err != nil {
				t.Fatal(err)
			}
			// The proxy closes the tunnel: the read ends (the deadline
			// is connect's, only a hung test meets it).
			if _, err := c.Read(buf); !errors.Is(err, io.EOF) {
				t.Errorf("read after the timeout: %v, want EOF", err)
			}
			if st := stats.next(t); st.End != tc.end {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// Ending Serve's context closes its open tunnels and Serve returns once
// their handlers have.
func TestServeShutdown(t *testing.T) {
	upstream := echoServer(t)
	h := newHarness(t, Config{Allow: []string{"pkg.harvest.test"}})
	h.net.route("pkg.harvest.test", "203.0.113.7", 443, upstream)
	stats := newStatsLog()
	tok, _ := h.p.Grant("s9", stats.add)
	_, _, c := connect(t, h.addr, "pkg.harvest.test:443", basic(tok))
	h.stop() // returns only when the tunnel's handler has
	select {
	case st := <-stats.ch:
		if st.End != "shutdown" {
			t.Errorf("stats %+v", st)
		}
	default:
		t.Error("Serve returned before the tunnel ended")
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the tunnel is still open")
	}
	if _, err := net.Dial("tcp", h.addr); err == nil {
		t.Error("still listening")
	}
}

// A request that is not a proxy request is told how to use the proxy.
func TestNotAProxyRequest(t *testing.T) {
	h := newHarness(t, Config{Allow: []string{"pkg.harvest.test"}})
	resp, err := http.Get("http://" + h.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "forward proxy") {
		t.Errorf("%d %q", resp.StatusCode, b)
	}
}

func TestAllowlist(t *testing.T) {
	a, err := parseAllow([]string{"Registry.NPMjs.org.", "*.pythonhosted.org", " pypi.org "})
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"registry.npmjs.org":       true,
		"pypi.org":                 true,
		"files.pythonhosted.org":   true,
		"a.b.pythonhosted.org":     true,
		"pythonhosted.org":         false,
		"evilpythonhosted.org":     false,
		"npmjs.org":                false,
		"registry.npmjs.org.evil":  false,
		"xregistry.npmjs.org":      false,
		"files.pythonhosted.org.x": false,
	} {
		if got := a.allows(host); got != want {
			t.Errorf("%s: allowed %v, want %v", host, got, want)
		}
	}
	if _, err := New(Config{Allow: DefaultRegistries}); err != nil {
		t.Errorf("DefaultRegistries: %v", err)
	}
	_, err = New(Config{})
	if err == nil || !strings.Contains(err.Error(), "DefaultRegistries") {
		t.Errorf("empty allowlist: %v", err)
	}
	_, err = New(Config{Allow: []string{"*", "https://pypi.org/simple", "10.0.0.1", "pypi.org:443", "*.org", "a.*.org", "bad name.org", "ok.org"}})
	for _, want := range []string{
		`"*": empty or "*"`,
		`"https://pypi.org/simple": a host name only`,
		`"10.0.0.1": an IP address`,
		`"pypi.org:443": a host name without a port`,
		`"*.org": too broad`,
		`"a.*.org": a wildcard only as the first label`,
		`"bad name.org": ' ' is not allowed`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %s", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), `"ok.org"`) {
		t.Errorf("a good entry is reported: %v", err)
	}
	if _, err := New(Config{Allow: []string{"a.org"}, Ports: []int{0}}); err == nil {
		t.Error("port 0 accepted")
	}
}

func TestEnv(t *testing.T) {
	env := Env("http://harvest:tok@127.0.0.1:9")
	for _, want := range []string{"HTTP_PROXY=http://harvest:tok@127.0.0.1:9", "https_proxy=http://harvest:tok@127.0.0.1:9",
		"NO_PROXY=127.0.0.1,localhost,::1", "npm_config_https_proxy=http://harvest:tok@127.0.0.1:9", "PIP_PROXY=http://harvest:tok@127.0.0.1:9"} {
		if !slices.Contains(env, want) {
			t.Errorf("Env lacks %s: %v", want, env)
		}
	}
}

// A session granted a narrower allowlist reaches only its own hosts; the
// rest of the server's are refused with its own message. Entries the
// server does not allow are refused at grant time, named.
func TestGrantOnly(t *testing.T) {
	h := newHarness(t, Config{Allow: []string{"pkg.harvest.test", "other.harvest.test", "*.mirror.test"}})
	for _, bad := range [][]string{{"evil.example.net"}, {"*.harvest.test"}, {"pkg.harvest.test", "*.harvest.test"}} {
		if _, _, err := h.p.GrantOnly("s", bad, nil); err == nil || !strings.Contains(err.Error(), "not on the server's egress allowlist") {
			t.Errorf("GrantOnly(%q): %v", bad, err)
		}
	}
	if err := h.p.CheckNarrow([]string{"other.harvest.test", "a.mirror.test", "*.eu.mirror.test"}); err != nil {
		t.Errorf("a narrower list: %v", err)
	}
	stats := newStatsLog()
	tok, revoke, err := h.p.GrantOnly("s4", []string{"other.harvest.test"}, stats.add)
	if err != nil {
		t.Fatal(err)
	}
	defer revoke()
	resp, body, _ := connect(t, h.addr, "pkg.harvest.test:443", basic(tok))
	if resp.StatusCode != 403 || !strings.Contains(body, "pkg.harvest.test is not on this session's egress allowlist (other.harvest.test), narrower than the server's") {
		t.Errorf("a host of the server's list, not the session's: %d %q", resp.StatusCode, body)
	}
	if st := stats.next(t); st.Allowed || st.Status != 403 {
		t.Errorf("stats %+v", st)
	}
	// The session's own host passes the allowlist checks (and then fails
	// to resolve in this test network: a 502, not a 403).
	resp, body, _ = connect(t, h.addr, "other.harvest.test:443", basic(tok))
	if resp.StatusCode == 403 {
		t.Errorf("the session's own host: %d %q", resp.StatusCode, body)
	}
}

// An internal registry (Config.Internal) is dialed at exactly its pinned
// private address and port, with no lookup (so no rebinding); its other
// ports are refused; and a pin to loopback, link-local or without a port
// is refused when the proxy is made, saying why.
func TestInternalRegistry(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("index of " + r.Host))
	}))
	defer srv.Close()
	h := newHarness(t, Config{Allow: []string{"pkg.harvest.test"}, Internal: map[string]netip.AddrPort{
		"PyPI.Corp.Test": netip.MustParseAddrPort("10.9.8.7:8080"),
	}})
	h.net.route("pypi.corp.test", "10.9.8.7", 8080, srv.Listener.Addr().String())
	// What DNS says is ignored: the pin is what is dialed.
	h.net.route("pypi.corp.test", "203.0.113.50", 8080, "")
	stats := newStatsLog()
	tok, _ := h.p.Grant("s9", stats.add)
	c, _ := client(h.addr, tok, nil)
	resp, err := c.Get("http://pypi.corp.test:8080/simple/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "index of pypi.corp.test:8080" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	stats.next(t)
	lookups, dialed := h.net.seen()
	if len(lookups) != 0 || !slices.Equal(dialed, []string{"10.9.8.7:8080"}) {
		t.Errorf("looked up %v and dialed %v; want no lookup and the pin", lookups, dialed)
	}
	resp, body2, _ := connect(t, h.addr, "pypi.corp.test:443", basic(tok))
	if resp.StatusCode != 403 || !strings.Contains(body2, "internal registry at port 8080: port 443 is not allowed") {
		t.Errorf("another port: %d %q", resp.StatusCode, body2)
	}
	stats.next(t)

	for pin, want := range map[string]string{
		"127.0.0.1:3141":     "the Harvest host itself",
		"169.254.169.254:80": "metadata service",
		"10.0.0.1:0":         "want an address and a port",
	} {
		_, err := New(Config{Allow: []string{"pkg.harvest.test"}, Internal: map[string]netip.AddrPort{"pypi.corp.test": netip.MustParseAddrPort(pin)}})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("pin %s: %v, want %q", pin, err, want)
		}
	}
	for s, want := range map[string]string{
		"pypi.corp.test":                "want NAME=IP:PORT",
		"pypi.corp.test=pypi.corp:8080": "is not IP:PORT",
	} {
		if _, _, err := ParseInternal(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseInternal(%q): %v, want %q", s, err, want)
		}
	}
	if n, ap, err := ParseInternal("pypi.corp.test=10.0.0.5:8080"); err != nil || n != "pypi.corp.test" || ap.Port() != 8080 {
		t.Errorf("ParseInternal: %s %v %v", n, ap, err)
	}
}
