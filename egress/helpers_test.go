package egress

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
)

// The tests run the proxy for real on loopback (port 0) with real
// clients (net/http, raw CONNECTs, curl in a box). Only two things are
// injected: the resolver, which maps the test's names to public-looking
// addresses (TEST-NET-3, 203.0.113.0/24) or to forbidden ones, and the
// dial, which routes those public-looking addresses to loopback test
// servers and records what was dialed, so a test proves both the address
// check and that nothing was dialed when it must not be. Nothing reaches
// the internet. Waits are on conditions (a stats callback, a read
// returning), bounded by a generous timeout that only a hung test meets.

const waitLimit = 20 * time.Second

// network is the injected resolver and dial.
type network struct {
	mu      sync.Mutex
	names   map[string][]netip.Addr
	routes  map[string]string // "203.0.113.7:443" → a loopback server
	lookups []string
	dialed  []string
}

func newNetwork() *network {
	return &network{names: map[string][]netip.Addr{}, routes: map[string]string{}}
}

// route makes host resolve to ip, and ip:port lead to the server at to.
func (n *network) route(host, ip string, port int, to string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	a := netip.MustParseAddr(ip)
	n.names[host] = append(n.names[host], a)
	if to != "" {
		n.routes[netip.AddrPortFrom(a, uint16(port)).String()] = to
	}
}

func (n *network) LookupNetIP(ctx context.Context, nw, host string) ([]netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lookups = append(n.lookups, host)
	if as, ok := n.names[host]; ok {
		return as, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (n *network) dial(ctx context.Context, nw, addr string) (net.Conn, error) {
	n.mu.Lock()
	n.dialed = append(n.dialed, addr)
	to, ok := n.routes[addr]
	n.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("test network: no route to %s", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, nw, to)
}

func (n *network) seen() (lookups, dialed []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.lookups...), append([]string(nil), n.dialed...)
}

// harness is a proxy served on loopback with its network and log.
type harness struct {
	t    *testing.T
	p    *Proxy
	net  *network
	log  *testbin.Buffer
	addr string
	stop func() // cancels Serve and waits for it
}

// newHarness serves a proxy allowing allow (with cfg's other fields) on
// 127.0.0.1:0 until the test ends.
func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := &harness{t: t, net: newNetwork(), log: &testbin.Buffer{}}
	cfg.Resolver, cfg.Dial = h.net, h.net.dial
	cfg.Logger = slog.New(slog.NewTextHandler(h.log, nil))
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.p = p
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	h.stop = serve(t, p, ln)
	t.Cleanup(h.stop)
	return h
}

// serve runs p.Serve on ln; the function it returns stops it and checks
// that it returned nil.
func serve(t *testing.T, p *Proxy, ln net.Listener) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, ln) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
}

// statsLog collects a grant's Stats.
type statsLog struct{ ch chan Stats }

func newStatsLog() *statsLog { return &statsLog{ch: make(chan Stats, 100)} }

func (s *statsLog) add(st Stats) { s.ch <- st }

// EgressRequest makes a statsLog the proxy's Observer.
func (s *statsLog) EgressRequest(st Stats) { s.add(st) }

// next waits for the next Stats.
func (s *statsLog) next(t *testing.T) Stats {
	t.Helper()
	select {
	case st := <-s.ch:
		return st
	case <-time.After(waitLimit):
		t.Fatalf("no stats within %v", waitLimit)
		return Stats{}
	}
}

// none fails if a Stats is waiting.
func (s *statsLog) none(t *testing.T) {
	t.Helper()
	select {
	case st := <-s.ch:
		t.Errorf("unexpected stats %+v", st)
	default:
	}
}

func proxyURL(addr, token string) *url.URL {
	return &url.URL{Scheme: "http", User: url.UserPassword("harvest", token), Host: addr}
}

// client returns an HTTP client going through the proxy with token and
// trusting roots.
func client(addr, token string, roots *x509.CertPool) (*http.Client, *http.Transport) {
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL(addr, token)), TLSClientConfig: &tls.Config{RootCAs: roots}}
	return &http.Client{Transport: tr, Timeout: waitLimit}, tr
}

// tunnelConn is a CONNECT tunnel: reads go through the reader that read
// the proxy's answer.
type tunnelConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *tunnelConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// connect sends CONNECT target (with token unless empty) and returns the
// answer, its body, and, when it is 200, the tunnel.
func connect(t *testing.T, proxyAddr, target, auth string) (*http.Response, string, *tunnelConn) {
	t.Helper()
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(waitLimit))
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if auth != "" {
		req += "Proxy-Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		c.Close()
		return resp, string(b), nil
	}
	tc := &tunnelConn{Conn: c, r: br}
	t.Cleanup(func() { tc.Close() })
	return resp, "", tc
}

func basic(token string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte("harvest:"+token))
}

// testCert makes a self-signed certificate for names, and the pool and
// PEM that trust it.
func testCert(t *testing.T, names ...string) (tls.Certificate, *x509.CertPool, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: names[0]},
		DNSNames:              names,
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool,
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// echoServer is a TCP server that echoes each connection, closed and
// waited for when the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// onceServer is a TCP server that hands its first connection to serve,
// waited for when the test ends.
func onceServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		serve(c)
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return ln.Addr().String()
}

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
