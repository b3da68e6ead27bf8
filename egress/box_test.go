package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/local"
)

// The acceptance point: a real local box (network none) with the proxy
// served on a box listener and Env's variables. curl in the box reaches
// an allowlisted HTTPS registry (verifying its certificate through the
// tunnel) and a plain-HTTP one, is refused (403) for another name, and
// without the proxy reaches nothing: not the registry's name, not the
// host's address, not the host's loopback.
func TestBoxCurl(t *testing.T) {
	cert, _, caPEM := testCert(t, "pkg.harvest.test")
	tlsSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("tarball of " + r.URL.Path))
	}))
	tlsSrv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	// The plain server listens on every address, so the box could reach
	// it directly if it had any network.
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	plainSrv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("Release of " + r.Host))
	})}}
	plainSrv.Start()
	defer plainSrv.Close()
	plainPort := ln.Addr().(*net.TCPAddr).Port

	nw := newNetwork()
	nw.route("pkg.harvest.test", "203.0.113.7", 443, tlsSrv.Listener.Addr().String())
	nw.route("deb.harvest.test", "203.0.113.8", 80, ln.Addr().String())
	nw.route("evil.harvest.example", "203.0.113.66", 443, tlsSrv.Listener.Addr().String())
	p, err := New(Config{Allow: []string{"pkg.harvest.test", "deb.harvest.test"}, Resolver: nw, Dial: nw.dial})
	if err != nil {
		t.Fatal(err)
	}
	stats := newStatsLog()
	tok, revoke := p.Grant("box", stats.add)
	defer revoke()

	ws := testbin.Workspace(t, sandbox.DefaultUID, sandbox.DefaultGID)
	if err := os.WriteFile(filepath.Join(ws, "ca.pem"), caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	sb := startBox(t, ws)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bl, err := sb.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening in the box: %v", err)
	}
	stop := serve(t, p, bl)
	defer stop()
	env := append(Env("http://harvest:"+tok+"@"+bl.Addr().String()), "CA="+sb.WorkspacePath("repo")+"/ca.pem")

	curl := func(args string, env []string) (string, bool) {
		t.Helper()
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "curl -sS --max-time 20 " + args},
			Env: env, Stdout: &out, Stderr: &out, Timeout: time.Minute})
		if err != nil {
			t.Fatalf("running curl %s in the box: %v", args, err)
		}
		return out.String(), st.Success()
	}

	if out, ok := curl(`--cacert "$CA" https://pkg.harvest.test/left-pad.tgz`, env); !ok || out != "tarball of /left-pad.tgz" {
		t.Errorf("https through the proxy: ok=%v %q", ok, out)
	}
	if st := stats.next(t); !st.Allowed || st.End != "closed" || st.BytesUp == 0 || st.BytesDown == 0 {
		t.Errorf("stats %+v", st)
	}
	if out, ok := curl(`http://deb.harvest.test/dists/bookworm/Release`, env); !ok || out != "Release of deb.harvest.test" {
		t.Errorf("http through the proxy: ok=%v %q", ok, out)
	}
	stats.next(t)
	if out, ok := curl(`--cacert "$CA" https://evil.harvest.example/`, env); ok || !strings.Contains(out, "403") {
		t.Errorf("a name not on the list: ok=%v %q, want curl to fail with the 403", ok, out)
	}
	if st := stats.next(t); st.Allowed || st.Status != 403 {
		t.Errorf("stats %+v", st)
	}
	if out, ok := curl(`-x "http://harvest:wrong@`+bl.Addr().String()+`" --cacert "$CA" https://pkg.harvest.test/`, nil); ok || !strings.Contains(out, "407") {
		t.Errorf("a wrong token: ok=%v %q, want the 407", ok, out)
	}

	// Without the proxy the box has no way out.
	direct := []string{`--cacert "$CA" https://pkg.harvest.test/`, "http://127.0.0.1:" + strconv.Itoa(plainPort) + "/"}
	if ip := hostIP(); ip != "" {
		direct = append(direct, "http://"+net.JoinHostPort(ip, strconv.Itoa(plainPort))+"/")
	} else {
		t.Log("no non-loopback address on the host: not trying it from the box")
	}
	for _, target := range direct {
		if out, ok := curl("--noproxy '*' "+target, env); ok {
			t.Errorf("the box reached %s directly: %q", target, out)
		} else {
			t.Logf("direct %s: %s", target, strings.TrimSpace(out))
		}
	}
	stats.none(t)
	if lookups, _ := nw.seen(); strings.Contains(strings.Join(lookups, " "), "evil") {
		t.Errorf("the proxy resolved a name not on the list: %v", lookups)
	}
}

// hostIP returns one of the host's non-loopback IPv4 addresses, or "".
func hostIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// startBox starts a local box as the box user with ws as
// /workspace/repo, destroyed when the test ends.
func startBox(t *testing.T, ws string) *sandbox.Sandbox {
	t.Helper()
	p := local.New(local.Config{RunDir: testbin.TempDir(t), AgentBinary: testbin.Agent(t)})
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Available(ctx); err != nil {
		testreq.Unavailable(t, testreq.Local, "the local sandbox backend is not available: %v", err)
	}
	sb, err := p.Start(ctx, sandbox.Spec{
		Workspaces: []sandbox.Workspace{{Name: "repo", HostPath: ws}},
		User:       sandbox.User{UID: sandbox.DefaultUID, GID: sandbox.DefaultGID},
	})
	if err != nil {
		t.Fatalf("starting a box: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("destroying the box: %v", err)
		}
	})
	return sb
}
