package netguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Every forbidden range, in IPv4 and IPv6, written plainly, mapped,
// as 6to4 and NAT64, has its class; public addresses have none.
func TestClass(t *testing.T) {
	for ip, want := range map[string]string{
		"127.0.0.1":              "loopback",
		"127.255.255.254":        "loopback",
		"::1":                    "loopback",
		"::ffff:127.0.0.1":       "loopback",
		"0.0.0.0":                "unspecified",
		"::":                     "unspecified",
		"169.254.169.254":        "link-local",
		"::ffff:169.254.169.254": "link-local",
		"fd00:ec2::254":          "metadata",
		"fe80::1":                "link-local",
		"fe80::1%eth0":           "scoped",
		"10.1.2.3":               "private",
		"172.20.0.1":             "private",
		"172.31.255.255":         "private",
		"192.168.1.1":            "private",
		"::ffff:10.0.0.1":        "private",
		"fd12:3456::1":           "private",
		"fec0::1":                "private",
		"100.64.0.1":             "shared",
		"100.127.255.255":        "shared",
		"192.0.0.8":              "reserved",
		"198.18.0.1":             "reserved",
		"240.0.0.1":              "reserved",
		"255.255.255.255":        "reserved",
		"::7f00:1":               "reserved", // IPv4-compatible ::127.0.0.1
		"64:ff9b:1::1":           "reserved",
		"100::1":                 "reserved",
		"2001::1":                "reserved",
		"2001:db8::1":            "reserved",
		"224.0.0.1":              "multicast",
		"ff02::1":                "multicast",
		"2002:7f00:1::1":         "loopback",   // 6to4 of 127.0.0.1
		"2002:a9fe:a9fe::":       "link-local", // 6to4 of 169.254.169.254
		"2002:c0a8:101::1":       "private",    // 6to4 of 192.168.1.1
		"64:ff9b::a9fe:a9fe":     "link-local", // NAT64 of 169.254.169.254
		"64:ff9b::a00:1":         "private",    // NAT64 of 10.0.0.1
		// Public.
		"203.0.113.9":          "",
		"151.101.0.223":        "",
		"8.8.8.8":              "",
		"172.32.0.1":           "", // just past 172.16/12
		"100.128.0.1":          "", // just past 100.64/10
		"::ffff:151.101.0.223": "",
		"2a04:4e42::223":       "",
		"2002:9765:df::1":      "", // 6to4 of 151.101.0.223
		"64:ff9b::9765:df":     "", // NAT64 of 151.101.0.223
	} {
		a := netip.MustParseAddr(ip)
		if got := Class(a); got != want {
			t.Errorf("Class(%s) = %q, want %q", ip, got, want)
		}
		if Public(a) != (want == "") {
			t.Errorf("Public(%s) = %v", ip, Public(a))
		}
	}
	if Public(netip.Addr{}) {
		t.Error("the zero Addr counts as public")
	}
	if len(Forbidden()) != len(forbidden) {
		t.Error("Forbidden lists another set")
	}
}

// resolver answers from a table, counting the lookups; a name not in it
// does not resolve.
type resolver struct {
	mu    sync.Mutex
	names map[string][]string
	calls int
}

func (r *resolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	ips, ok := r.names[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, s := range ips {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

func (r *resolver) set(host string, ips ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names[host] = ips
}

func newResolver() *resolver {
	return &resolver{names: map[string][]string{
		"localhost":      {"127.0.0.1", "::1"},
		"public.test":    {"203.0.113.7", "2a04:4e42::7"},
		"mixed.test":     {"203.0.113.8", "10.0.0.5"},
		"mapped.test":    {"::ffff:169.254.169.254"},
		"internal.test":  {"10.1.2.3"},
		"mcp.corp.test":  {"10.9.9.9"},
		"metadata.test":  {"169.254.169.254"},
		"loopback6.test": {"::1"},
	}}
}

func mustGuard(t *testing.T, cfg Config) *Guard {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// A name is refused when any address it resolves to is forbidden (a mixed
// answer included), or when it does not resolve; the error given to the
// requester says neither which nor to what, Detail does.
func TestResolve(t *testing.T) {
	ctx := t.Context()
	g := mustGuard(t, Config{Resolver: newResolver()})
	addrs, err := g.Resolve(ctx, "Public.Test.", 443)
	if err != nil || len(addrs) != 2 || addrs[0] != netip.MustParseAddr("203.0.113.7") {
		t.Fatalf("public: %v, %v", addrs, err)
	}
	for host, detail := range map[string]string{
		"localhost":      "resolves to 127.0.0.1, a loopback address",
		"mixed.test":     "resolves to 10.0.0.5, a private address",
		"mapped.test":    "resolves to 169.254.169.254, a link-local address",
		"metadata.test":  "169.254.169.254",
		"internal.test":  "10.1.2.3, a private address",
		"loopback6.test": "::1, a loopback address",
		"nowhere.test":   "does not resolve",
	} {
		_, err := g.Resolve(ctx, host, 80)
		re, ok := errors.AsType[*RefusedError](err)
		if !ok {
			t.Errorf("%s: %v, want a RefusedError", host, err)
			continue
		}
		if !strings.Contains(re.Detail(), detail) || Detail(err) != re.Detail() {
			t.Errorf("%s: detail %q, want %q in it", host, re.Detail(), detail)
		}
		msg := err.Error()
		if !strings.Contains(msg, host+" does not resolve to public addresses only") || !strings.Contains(msg, "harvest serve --mcp-allow "+host+":80") {
			t.Errorf("%s: %q", host, msg)
		}
		for _, leak := range []string{"127.0.0.1", "10.0.0.5", "169.254", "10.1.2.3", "no such host"} {
			if strings.Contains(msg, leak) {
				t.Errorf("%s: the requester's message names %s: %q", host, leak, msg)
			}
		}
	}
	for ip, class := range map[string]string{"127.0.0.1": "a loopback", "[::1]": "a loopback", "169.254.169.254": "a link-local",
		"10.0.0.1": "a private", "::ffff:192.168.0.1": "a private", "fd00:ec2::254": "a metadata", "0.0.0.0": "an unspecified"} {
		_, err := g.Resolve(ctx, ip, 8080)
		if re, ok := errors.AsType[*RefusedError](err); !ok || !re.Literal || !strings.Contains(err.Error(), "is "+class+" address") {
			t.Errorf("%s: %v", ip, err)
		}
	}
	if _, err := g.Resolve(ctx, "", 80); err == nil {
		t.Error("an empty host passed")
	}
	var nilGuard *Guard
	if _, err := nilGuard.Resolve(ctx, "127.0.0.1", 80); err == nil {
		t.Error("a nil Guard let loopback through: it must be the default policy")
	}
}

// The allowance forms: names, addresses and networks, with or without a
// port; a bad one is refused saying what to write.
func TestAllow(t *testing.T) {
	ctx := t.Context()
	g := mustGuard(t, Config{Resolver: newResolver(), Allow: []string{
		"localhost:3000", "10.1.2.3", "169.254.0.0/16:80", "[fd00::5]:8080", "fd12::/16", "MCP.corp.test.",
	}})
	for _, tt := range []struct {
		host string
		port int
		ok   bool
	}{
		{"localhost", 3000, true},         // by name at its port: 127.0.0.1 and ::1
		{"localhost", 3001, false},        // another port
		{"127.0.0.1", 3000, false},        // the name's allowance is not the address's
		{"internal.test", 9999, true},     // 10.1.2.3 at any port, whatever the name
		{"10.1.2.3", 1, true},             //
		{"10.1.2.4", 1, false},            //
		{"169.254.169.254", 80, true},     // a network at a port
		{"metadata.test", 80, true},       //
		{"169.254.169.254", 443, false},   //
		{"fd00::5", 8080, true},           //
		{"fd00::5", 8081, false},          //
		{"fd12:1::9", 5, true},            // an IPv6 network
		{"mcp.corp.test", 443, true},      // a name, any port, case and dot ignored
		{"mixed.test", 443, false},        // 10.0.0.5 is allowed by nothing
		{"::ffff:10.1.2.3", 7, true},      // mapped: the IPv4 allowance
		{"loopback6.test", 3000, false},   //
		{"nowhere.test", 3000, false},     //
		{"public.test", 443, true},        // public: no allowance needed
		{"mcp.corp.test.other", 1, false}, // not a suffix match
	} {
		_, err := g.Resolve(ctx, tt.host, tt.port)
		if (err == nil) != tt.ok {
			t.Errorf("%s:%d: %v, want allowed=%v", tt.host, tt.port, err, tt.ok)
		}
	}
	if got := strings.Join(g.Allowed(), " "); got != "localhost:3000 10.1.2.3 169.254.0.0/16:80 [fd00::5]:8080 fd12::/16 MCP.corp.test." {
		t.Errorf("Allowed() = %q", got)
	}

	// An IPv6 network at a port, in brackets.
	g6 := mustGuard(t, Config{Resolver: newResolver(), Allow: []string{"[fd00::/8]:8080"}})
	if _, err := g6.Resolve(ctx, "fd00::9", 8080); err != nil {
		t.Error(err)
	}
	if _, err := g6.Resolve(ctx, "fd00::9", 8081); err == nil {
		t.Error("[fd00::/8]:8080 allowed port 8081")
	}

	// localhost resolves to both loopbacks: 127.0.0.1 alone lets it not.
	g4 := mustGuard(t, Config{Resolver: newResolver(), Allow: []string{"127.0.0.1"}})
	if _, err := g4.Resolve(ctx, "localhost", 80); err == nil {
		t.Error("localhost passed with only 127.0.0.1 allowed")
	}
	if _, err := g4.Resolve(ctx, "127.0.0.1", 80); err != nil {
		t.Error(err)
	}

	for in, want := range map[string]string{
		"":                      "empty",
		"http://mcp.corp/":      "not a URL",
		"user@host":             "not a URL",
		"*.corp.test":           "no wildcards",
		"host:":                 "an empty port",
		"host:http":             `port "http" is not a TCP port`,
		"host:70000":            `port "70000"`,
		"10.0.0.1/8":            "write 10.0.0.0/8",
		"10.0.0.0/33":           "is not a CIDR network",
		"300.1.2.3":             "is not an IP address",
		"fe80::1%eth0":          "with a zone",
		"[10.0.0.1]:80":         "brackets are for IPv6",
		"[fd00::5":              "without its ]",
		"[fd00::5]x":            "after ] comes :PORT",
		"fd00::/8:80":           "goes in brackets, [fd00::/8]:8080",
		"bad host":              "not a URL nor anything with spaces",
		"ex!ample.com":          "'!' is not allowed in a host name",
		"a..b":                  "label",
		"::ffff:10.0.0.0/104":   "write it as IPv4",
		"[::ffff:10.0.0.0/104]": "write it as IPv4",
	} {
		_, err := New(Config{Allow: []string{"ok.test", in}})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), allowForms) || !strings.Contains(err.Error(), fmt.Sprintf("%q", in)) {
			t.Errorf("%q: %v, want an error saying %q", in, err, want)
		}
	}
	// Every bad entry is reported at once.
	if _, err := New(Config{Allow: []string{"a b", "ok.test", "*.x"}}); err == nil || !strings.Contains(err.Error(), `"a b"`) || !strings.Contains(err.Error(), `"*.x"`) {
		t.Errorf("two bad entries: %v", err)
	}
}

// DialContext dials the addresses it checked, never the name: a resolver
// that answers a public address to the first lookup and loopback to the
// next (DNS rebinding) gets the public one dialed, then a refusal with
// nothing dialed.
func TestDialChecked(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted sync.WaitGroup
	accepted.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	})
	defer accepted.Wait()
	defer ln.Close()
	res := newResolver()
	res.set("rebind.test", "203.0.113.50")
	var mu sync.Mutex
	var dialed []string
	g := mustGuard(t, Config{Resolver: res, Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dialed = append(dialed, addr)
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, network, ln.Addr().String()) // every public address is this listener
	}})
	c, err := g.DialContext(t.Context(), "tcp", "rebind.test:8443")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	res.set("rebind.test", "127.0.0.1")
	if _, err := g.DialContext(t.Context(), "tcp", "rebind.test:8443"); err == nil {
		t.Fatal("the rebound name was dialed")
	}
	// A name's addresses are tried in turn, each the checked one.
	res.set("two.test", "203.0.113.1", "203.0.113.2")
	g2 := mustGuard(t, Config{Resolver: res, Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dialed = append(dialed, addr)
		mu.Unlock()
		if addr == "203.0.113.1:80" {
			return nil, errors.New("connection refused")
		}
		var d net.Dialer
		return d.DialContext(ctx, network, ln.Addr().String())
	}})
	c, err = g2.DialContext(t.Context(), "tcp", "two.test:80")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	mu.Lock()
	if strings.Join(dialed, " ") != "203.0.113.50:8443 203.0.113.1:80 203.0.113.2:80" {
		t.Errorf("dialed %q, want exactly the checked addresses, once each", dialed)
	}
	mu.Unlock()
	if res.calls != 3 {
		t.Errorf("%d lookups, want one per dial", res.calls)
	}
	for _, bad := range []string{"rebind.test", "rebind.test:0", "rebind.test:x"} {
		if _, err := g.DialContext(t.Context(), "tcp", bad); err == nil {
			t.Errorf("%q dialed", bad)
		}
	}
}

// Transport's connections are the guard's, and no proxy from the
// environment is used: a loopback server is refused without an allowance
// (the proxy named in HTTP_PROXY sees nothing either), and reached with
// one.
func TestTransport(t *testing.T) {
	var hits, proxied atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "hello")
	}))
	defer srv.Close()
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxied.Add(1)
		http.Error(w, "the proxy", http.StatusBadGateway)
	}))
	defer proxy.Close()
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("http_proxy", proxy.URL)
	t.Setenv("NO_PROXY", "")

	get := func(g *Guard) (string, error) {
		tr := g.Transport()
		defer tr.CloseIdleConnections()
		if tr.Proxy != nil {
			t.Fatal("the transport has a proxy")
		}
		resp, err := (&http.Client{Transport: tr}).Get(srv.URL + "/x")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	var def *Guard
	if _, err := get(def); err == nil || !strings.Contains(err.Error(), "is a loopback address") {
		t.Fatalf("the default guard: %v", err)
	}
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	if body, err := get(mustGuard(t, Config{Allow: []string{fmt.Sprintf("127.0.0.1:%d", port)}})); err != nil || body != "hello" {
		t.Fatalf("allowed: %q, %v", body, err)
	}
	if hits.Load() != 1 || proxied.Load() != 0 {
		t.Fatalf("the server saw %d requests (want 1), the proxy %d (want 0)", hits.Load(), proxied.Load())
	}
}

// CheckURL: the scheme's port when the URL gives none, what is not an
// http(s) URL refused.
func TestCheckURL(t *testing.T) {
	ctx := t.Context()
	g := mustGuard(t, Config{Resolver: newResolver(), Allow: []string{"internal.test:443", "[::1]:8080"}})
	for u, ok := range map[string]bool{
		"https://public.test/mcp":        true,
		"https://internal.test/mcp":      true,
		"http://internal.test/mcp":       false, // port 80
		"https://internal.test:8443/mcp": false,
		"http://[::1]:8080/mcp":          true,
		"http://localhost:8080/mcp":      false, // and 127.0.0.1
		"http://127.0.0.1:8080/":         false,
		"http://169.254.169.254/latest/": false,
		"http://[fd00:ec2::254]/":        false,
		"http://[fe80::1%25eth0]:8080/":  false,
		"http://0x7f.1/":                 false, // does not resolve here
		"ftp://public.test/":             false,
		"https://public.test:99999/":     false,
		"https:///mcp":                   false,
		"http://public.test:80\x00/":     false,
	} {
		if err := g.CheckURL(ctx, u); (err == nil) != ok {
			t.Errorf("%q: %v, want ok=%v", u, err, ok)
		}
	}
}
