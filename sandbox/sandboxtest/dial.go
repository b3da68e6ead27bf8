package sandboxtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/sandboxtest/pattern"
)

// boxServer runs the probe's serve (or stall) in the box and returns the
// address it listens on. It is killed when the test ends.
func boxServer(t *testing.T, sb *sandbox.Sandbox, pr string, args ...string) string {
	t.Helper()
	var out testbin.Buffer
	p, err := sb.Start(ctxFor(t), &sandbox.Cmd{Args: append([]string{pr}, args...), Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill(context.Background())
		p.Wait(context.Background())
	})
	var addr string
	testbin.WaitFor(t, 10*time.Second, "the box server "+strings.Join(args, " ")+" to listen", func() bool {
		line, _, _ := strings.Cut(out.String(), "\n")
		if strings.HasPrefix(line, "err") {
			t.Fatalf("box server %v: %s", args, line)
		}
		var ok bool
		addr, ok = strings.CutPrefix(line, "ok listening ")
		return ok
	})
	return addr
}

// testDial: the host reaches servers in the box through Dial: HTTP with a
// client whose transport dials into the box, big transfers both ways at
// once, half-close, a host that does not read, cancellation of a dial that
// hangs, clear errors for nothing listening and for addresses Dial refuses;
// nothing is left open in the agent or on the host afterwards.
func testDial(t *testing.T, sb *sandbox.Sandbox) {
	pr := installProbe(t, sb)
	ctx := ctxFor(t)

	t.Run("HTTP", func(t *testing.T) {
		addr := boxServer(t, sb, pr, "serve", "tcp", "127.0.0.1:0", "http")
		tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return sb.Dial(ctx, network, addr)
		}}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr, Timeout: Timeout}
		const down = 12 << 20
		resp, err := client.Get("http://" + addr + fmt.Sprintf("/bytes/%d", down))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		n, err := io.Copy(h, resp.Body)
		resp.Body.Close()
		if err != nil || n != down || hex.EncodeToString(h.Sum(nil)) != pattern.SHA256(down) {
			t.Fatalf("GET %d bytes from the box: %d bytes, %v, sha ok %v", down, n, err, hex.EncodeToString(h.Sum(nil)) == pattern.SHA256(down))
		}
		const up = 8 << 20
		resp, err = client.Post("http://"+addr+"/echo", "application/octet-stream", pattern.New(up))
		if err != nil {
			t.Fatal(err)
		}
		h.Reset()
		n, err = io.Copy(h, resp.Body)
		resp.Body.Close()
		if err != nil || n != up || hex.EncodeToString(h.Sum(nil)) != pattern.SHA256(up) {
			t.Fatalf("POST %d bytes echoed by the box: %d bytes, %v", up, n, err)
		}
	})
	t.Run("EchoHalfClose", func(t *testing.T) {
		for _, c := range []struct{ network, addr string }{
			{"tcp", "127.0.0.1:0"},
			{"unix", "/tmp/harvest-dial-" + randHex() + ".sock"},
		} {
			if c.network == "unix" {
				// In the box's /tmp, which is the host's for the host
				// backend: removed, whoever made it.
				t.Cleanup(func() { os.Remove(c.addr) })
			}
			addr := boxServer(t, sb, pr, "serve", c.network, c.addr, "echo")
			conn, err := sb.Dial(ctx, c.network, addr)
			if err != nil {
				t.Fatal(err)
			}
			if c.network == "tcp" {
				if ra, ok := conn.RemoteAddr().(*net.TCPAddr); !ok || ra.String() != addr {
					t.Errorf("RemoteAddr %v, want %s", conn.RemoteAddr(), addr)
				}
				if la, ok := conn.LocalAddr().(*net.TCPAddr); !ok || la.Port == 0 {
					t.Errorf("LocalAddr %v, want the agent's end in the box", conn.LocalAddr())
				}
			}
			// Several windows each way, both directions at once: the box
			// echoes while the host still writes.
			const n = 9<<20 + 7
			werr := make(chan error, 1)
			go func() {
				_, err := io.Copy(conn, pattern.New(n))
				if err == nil {
					err = conn.(interface{ CloseWrite() error }).CloseWrite()
				}
				werr <- err
			}()
			h := sha256.New()
			got, err := io.Copy(h, conn) // ends at the box's CloseWrite, after ours
			if err := <-werr; err != nil {
				t.Fatalf("%s: writing to the box: %v", c.network, err)
			}
			if err != nil || got != n || hex.EncodeToString(h.Sum(nil)) != pattern.SHA256(n) {
				t.Fatalf("%s: echoed %d bytes, %v; want %d, the same bytes", c.network, got, err, n)
			}
			if err := conn.Close(); err != nil {
				t.Error(err)
			}
		}
	})
	t.Run("SlowReader", func(t *testing.T) {
		const n = 64 << 20
		addr := boxServer(t, sb, pr, "serve", "tcp", "127.0.0.1:0", "send", fmt.Sprint(n))
		conn, err := sb.Dial(ctx, "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		checkAgentBounded(t, sb, "while the host does not read a dialed connection: forwarding is not bounded")
		h := sha256.New()
		if got, err := io.Copy(h, conn); err != nil || got != n || hex.EncodeToString(h.Sum(nil)) != pattern.SHA256(n) {
			t.Fatalf("host read %d bytes, %v (want %d, uncorrupted)", got, err, n)
		}
	})
	t.Run("Refused", func(t *testing.T) {
		l, err := sb.Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		_, err = sb.Dial(ctx, "tcp", addr)
		if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), sb.ID()) || !strings.Contains(err.Error(), addr) {
			t.Errorf("Dial to a closed port: %v; want ECONNREFUSED naming the box and the address", err)
		}
		_, err = sb.Dial(ctx, "unix", "/tmp/no-such-"+randHex()+".sock")
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Dial to a missing unix socket: %v; want fs.ErrNotExist", err)
		}
	})
	t.Run("Cancel", func(t *testing.T) {
		addr := boxServer(t, sb, pr, "stall", "127.0.0.1:0")
		// The first connection fills the accept queue of a listener that
		// never accepts; the kernel drops later SYNs: the next dial hangs.
		first, err := sb.Dial(ctx, "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer first.Close()
		dctx, cancel := context.WithCancelCause(ctx)
		errc := make(chan error, 1)
		go func() {
			c, err := sb.Dial(dctx, "tcp", addr)
			if c != nil {
				c.Close()
			}
			errc <- err
		}()
		waitBlocked(t, "(*Sandbox).Dial")
		why := errors.New("the test gave up")
		start := time.Now()
		cancel(why)
		if err := <-errc; !errors.Is(err, why) {
			t.Errorf("cancelled Dial: %v; want the context's cause", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("a cancelled Dial took %v to return", d)
		}
		// A deadline bounds the dial too.
		tctx, tcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer tcancel()
		_, err = sb.Dial(tctx, "tcp", addr)
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, syscall.ETIMEDOUT) {
			t.Errorf("Dial past its deadline: %v", err)
		}
		if _, err := sb.Dial(ctx, "tcp", "127.0.0.1:1"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("the agent still dials after a cancelled dial: %v", err)
		}
	})
	t.Run("BadAddresses", func(t *testing.T) {
		for _, c := range []struct{ network, addr, want string }{
			{"udp", "127.0.0.1:53", `use "tcp"`},
			{"tcp", "localhost:80", "use 127.0.0.1"},
			{"tcp", "127.0.0.1", "want IP:PORT"},
			{"tcp", "127.0.0.1:0", "port must be a number from 1"},
			{"tcp", "10.0.0.1:80", "only the box's own loopback"},
			{"tcp", "1.1.1.1:443", "only the box's own loopback"},
			{"tcp", "[::ffff:8.8.8.8]:53", "only the box's own loopback"},
			{"tcp", "example.com:80", "loopback IP address"},
			{"unix", "relative.sock", "absolute path"},
		} {
			if conn, err := sb.Dial(ctx, c.network, c.addr); err == nil || !strings.Contains(err.Error(), c.want) {
				if conn != nil {
					conn.Close()
				}
				t.Errorf("Dial(%q, %q): %v, want an error saying %q", c.network, c.addr, err, c.want)
			}
		}
	})
	// Everything the agent opened for these tests is gone, and nothing of
	// the host's end is left running.
	testbin.WaitFor(t, 10*time.Second, "the agent to close every dialed connection", func() bool {
		info, err := sb.Info(ctxFor(t))
		return err == nil && info.Forwards == 0
	})
	testbin.WaitFor(t, 10*time.Second, "the host's forwarding goroutines to end", func() bool {
		return forwardingGoroutines() == 0
	})
}

// testSplice: a box program that copies between two TCP connections with
// splice(2), as Go's io.Copy does, passes on exactly the bytes it got (the
// probe's echo server in splice mode, its client in the box too).
func (s *suite) testSplice(t *testing.T, sb *sandbox.Sandbox) {
	s.skipIfCannot(t, CheckTCPSplice)
	pr := installProbe(t, sb)
	addr := boxServer(t, sb, pr, "serve", "tcp", "127.0.0.1:0", "splice")
	const n = 9<<20 + 7
	want := fmt.Sprintf("ok %d %s", n, pattern.SHA256(n))
	if got := probe(t, sb, pr, "halfclose", "tcp", addr, fmt.Sprint(n)); got != want {
		t.Fatalf("echoed through splice(2): %s; want %s", got, want)
	}
}
