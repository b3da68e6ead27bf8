package sandboxtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/sandboxtest/pattern"
)

// barrier answers its requests only once n of them are in flight at once.
type barrier struct {
	n     int
	mu    sync.Mutex
	count int
	all   chan struct{}
}

func (b *barrier) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.count++
	if b.count == b.n {
		close(b.all)
	}
	b.mu.Unlock()
	t := time.NewTimer(Timeout)
	defer t.Stop()
	select {
	case <-b.all:
		io.WriteString(w, "released")
	case <-r.Context().Done():
	case <-t.C:
		http.Error(w, "the barrier was never reached", http.StatusServiceUnavailable)
	}
}

// serveHTTP serves the test handlers on l until the test ends.
func serveHTTP(t *testing.T, l net.Listener, concurrent int) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /bytes/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.ParseInt(r.PathValue("n"), 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		io.Copy(w, pattern.New(n))
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Write(body)
	})
	mux.Handle("GET /barrier", &barrier{n: concurrent, all: make(chan struct{})})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: Timeout}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		// ErrServerClosed, or net.ErrClosed when the test closed the
		// listener first.
		if err := <-done; !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			t.Errorf("http.Serve on the box listener: %v", err)
		}
	})
}

// testListen: a host HTTP server serves clients in the box through a box
// listener; raw connections half-close, apply backpressure, honour
// deadlines; closing the listener fails a pending Accept.
func testListen(t *testing.T, sb *sandbox.Sandbox, isolated bool) {
	ctx := ctxFor(t)
	pr := installProbe(t, sb)
	l, err := sb.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ta, ok := l.Addr().(*net.TCPAddr)
	if !ok || ta.Port == 0 || !ta.IP.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("Addr() = %v, want 127.0.0.1 and the port chosen", l.Addr())
	}
	const concurrent = 20
	serveHTTP(t, l, concurrent)
	url := "http://" + l.Addr().String()

	t.Run("HTTPBigBodies", func(t *testing.T) {
		const up, down = 8 << 20, 12 << 20 // several windows each way
		if got, want := probe(t, sb, pr, "http", url+"/echo", "1", fmt.Sprint(up)), fmt.Sprintf("ok 200 %d %s", up, pattern.SHA256(up)); got != want {
			t.Errorf("POST %d bytes, echoed: %q, want %q", up, got, want)
		}
		if got, want := probe(t, sb, pr, "http", url+"/bytes/"+fmt.Sprint(down), "1", "0"), fmt.Sprintf("ok 200 %d %s", down, pattern.SHA256(down)); got != want {
			t.Errorf("GET %d bytes: %q, want %q", down, got, want)
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		// The barrier answers only once all of them are in flight.
		want := fmt.Sprintf("ok 200 8 %x", sha256.Sum256([]byte("released")))
		if got := probe(t, sb, pr, "http", url+"/barrier", fmt.Sprint(concurrent), "0"); got != want {
			t.Errorf("%d concurrent requests: %q, want %q", concurrent, got, want)
		}
	})
	t.Run("HalfClose", func(t *testing.T) {
		testHalfClose(t, sb, pr, "tcp", "127.0.0.1:0")
		testHalfClose(t, sb, pr, "unix", "/tmp/harvest-listen-"+randHex()+".sock")
		if l6, err := sb.Listen(ctx, "tcp", "[::1]:0"); err == nil {
			l6.Close()
			testHalfClose(t, sb, pr, "tcp", "[::1]:0")
		} else {
			t.Logf("no IPv6 loopback in this box: %v", err)
		}
	})
	t.Run("SlowReader", func(t *testing.T) { testSlowReader(t, sb, pr) })
	t.Run("Deadlines", func(t *testing.T) { testDeadlines(t, sb, pr) })
	t.Run("CloseFailsAccept", func(t *testing.T) { testCloseAccept(t, sb, pr) })
	t.Run("BadAddresses", func(t *testing.T) {
		for _, c := range []struct{ network, addr, want string }{
			{"udp", "127.0.0.1:0", `use "tcp"`},
			{"tcp", "localhost:0", "use 127.0.0.1"},
			{"tcp", "127.0.0.1", "want IP:PORT"},
			{"tcp", "127.0.0.1:99999", "port must be a number"},
			{"tcp", "example.com:80", "must be an IP address"},
			{"unix", "relative.sock", "absolute path"},
			{"tcp", l.Addr().String(), "in use"},
		} {
			if bl, err := sb.Listen(ctx, c.network, c.addr); err == nil || !strings.Contains(err.Error(), c.want) {
				if bl != nil {
					bl.Close()
				}
				t.Errorf("Listen(%q, %q): %v, want an error saying %q", c.network, c.addr, err, c.want)
			}
		}
	})
	if isolated {
		t.Run("NetworkStillNone", func(t *testing.T) {
			// The listener forwards to the host; it opens no other way out.
			if got := probe(t, sb, pr, "ifaces"); got != "ok lo" {
				t.Errorf("interfaces in the box: %q (want only lo)", got)
			}
			hl, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer hl.Close()
			denied(t, "TCP to a host port while a box listener is open", probe(t, sb, pr, "tcp", hl.Addr().String()))
		})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Everything the agent opened for these tests is gone.
	testbin.WaitFor(t, 10*time.Second, "the agent to close every listener and connection", func() bool {
		info, err := sb.Info(ctxFor(t))
		return err == nil && info.Listeners == 0 && info.Forwards == 0
	})
}

// testHalfClose: the box sends, shuts its writing half and reads; the host
// reads to EOF, then answers and closes.
func testHalfClose(t *testing.T, sb *sandbox.Sandbox, pr, network, addr string) {
	l, err := sb.Listen(ctxFor(t), network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const n = 3<<20 + 5
	var out testbin.Buffer
	p, err := sb.Start(ctxFor(t), &sandbox.Cmd{Args: []string{pr, "halfclose", network, l.Addr().String(), fmt.Sprint(n)}, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if network == "tcp" && c.RemoteAddr().(*net.TCPAddr).Port == 0 {
		t.Errorf("RemoteAddr %v: want the box client's address", c.RemoteAddr())
	}
	got, err := io.ReadAll(c) // returns at the box's CloseWrite
	if err != nil || len(got) != n {
		t.Fatalf("%s: host read %d bytes, %v; want %d", network, len(got), err, n)
	}
	if _, err := io.Copy(c, bytes.NewReader(got)); err != nil { // the box still reads
		t.Fatal(err)
	}
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("ok %d %s", n, pattern.SHA256(n)); strings.TrimSpace(out.String()) != want {
		t.Errorf("%s: the box read back %q, want %q", network, out.String(), want)
	}
}

// testSlowReader: a host that does not read stops the box's sender; the
// agent's memory stays bounded meanwhile, the box stays responsive, and
// every byte arrives once the host reads.
func testSlowReader(t *testing.T, sb *sandbox.Sandbox, pr string) {
	l, err := sb.Listen(ctxFor(t), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const n = 64 << 20
	var out testbin.Buffer
	p, err := sb.Start(ctxFor(t), &sandbox.Cmd{Args: []string{pr, "send", "tcp", l.Addr().String(), fmt.Sprint(n)}, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkAgentBounded(t, sb, "while the host does not read: forwarding is not bounded")
	select {
	case <-p.Done():
		t.Fatalf("the box sent %d bytes although the host read none: %s", n, out.String())
	default:
	}
	h := sha256.New()
	if got, err := io.Copy(h, c); err != nil || got != n {
		t.Fatalf("host read %d bytes, %v", got, err)
	}
	if hex.EncodeToString(h.Sum(nil)) != pattern.SHA256(n) {
		t.Error("the bytes arrived corrupted")
	}
	if st, err := p.Wait(ctxFor(t)); err != nil || !st.Success() {
		t.Errorf("sender: %v %v %s", st, err, out.String())
	}
}

// testDeadlines: read and write deadlines end blocked calls with
// os.ErrDeadlineExceeded and can be cleared; a past deadline wakes at once.
func testDeadlines(t *testing.T, sb *sandbox.Sandbox, pr string) {
	l, err := sb.Listen(ctxFor(t), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var out testbin.Buffer
	p, err := sb.Start(ctxFor(t), &sandbox.Cmd{Args: []string{pr, "idle", "tcp", l.Addr().String()}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill(ctxFor(t))
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := c.Read(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Read past the deadline: %v", err)
	}
	// A deadline in the past wakes a blocked Read (http.Server relies on it).
	readErr := make(chan error, 1)
	c.SetReadDeadline(time.Time{})
	go func() {
		_, err := c.Read(make([]byte, 10))
		readErr <- err
	}()
	waitBlocked(t, "(*boxConn).Read")
	c.SetReadDeadline(time.Unix(1, 0))
	if err := <-readErr; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Read after SetReadDeadline(past): %v", err)
	}
	c.SetReadDeadline(time.Time{})

	// The box client never reads: a Write fills the window, then blocks until
	// its deadline (long enough that a loaded machine writes something).
	c.SetWriteDeadline(time.Now().Add(time.Second))
	big := make([]byte, 64<<20)
	n, err := c.Write(big)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n == 0 || n == len(big) {
		t.Errorf("Write to a box client that does not read: %d bytes, %v", n, err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("the write timeout is not a net.Error with Timeout(): %#v", err)
	}
}

// testCloseAccept: Close fails a pending Accept with net.ErrClosed and
// stops listening in the box.
func testCloseAccept(t *testing.T, sb *sandbox.Sandbox, pr string) {
	l, err := sb.Listen(ctxFor(t), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	acceptErr := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if c != nil {
			c.Close()
		}
		acceptErr <- err
	}()
	waitBlocked(t, "(*Listener).Accept")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-acceptErr; !errors.Is(err, net.ErrClosed) {
		t.Errorf("pending Accept after Close: %v", err)
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if v := probe(t, sb, pr, "tcp", l.Addr().String()); !strings.HasPrefix(v, "err ECONNREFUSED") {
		t.Errorf("connecting to a closed listener in the box: %q", v)
	}
}

// waitBlocked waits until some goroutine is inside fn (a method of package
// sandbox), blocked.
func waitBlocked(t *testing.T, fn string) {
	t.Helper()
	testbin.WaitFor(t, 10*time.Second, "a goroutine blocked in "+fn, func() bool {
		for _, g := range goroutineStacks() {
			if strings.Contains(g, "harvest/sandbox."+fn) && strings.Contains(g, "select") {
				return true
			}
		}
		return false
	})
}

func goroutineStacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(buf[:n]), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// forwardingGoroutines counts goroutines inside the host end of box
// listeners.
func forwardingGoroutines() int {
	n := 0
	for _, g := range goroutineStacks() {
		if strings.Contains(g, "harvest/sandbox.(*boxConn)") || strings.Contains(g, "harvest/sandbox.(*Listener)") {
			n++
		}
	}
	return n
}

// testListenBoxGone: a box destroyed with a forwarded connection open fails
// the host's blocked Read, Write and Accept with ErrClosed, and leaves no
// goroutine behind.
func (s *suite) testListenBoxGone(t *testing.T) {
	spec, _ := withWorkspace(t)
	sb := s.startUnmanaged(t, spec)
	pr := installProbe(t, sb)
	before := runtime.NumGoroutine()

	l, err := sb.Listen(ctxFor(t), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Start(ctxFor(t), &sandbox.Cmd{Args: []string{pr, "hold", "tcp", l.Addr().String()}}); err != nil {
		t.Fatal(err)
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	hello := make([]byte, 6)
	if _, err := io.ReadFull(c, hello); err != nil || string(hello) != "hello\n" {
		t.Fatalf("first bytes: %q %v", hello, err)
	}
	errs := make(chan error, 3)
	go func() {
		_, err := c.Read(make([]byte, 10))
		errs <- fmt.Errorf("read: %w", err)
	}()
	go func() {
		buf := make([]byte, 1<<20)
		for {
			if _, err := c.Write(buf); err != nil {
				errs <- fmt.Errorf("write: %w", err)
				return
			}
		}
	}()
	go func() {
		_, err := l.Accept()
		errs <- fmt.Errorf("accept: %w", err)
	}()
	waitBlocked(t, "(*boxConn).Read")
	waitBlocked(t, "(*Listener).Accept")

	if err := sb.Destroy(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	deadline := time.NewTimer(Timeout)
	defer deadline.Stop()
	for range 3 {
		select {
		case err := <-errs:
			if !errors.Is(err, sandbox.ErrClosed) || !strings.Contains(err.Error(), sb.ID()) {
				t.Errorf("after the box was destroyed: %v (want ErrClosed, naming the box)", err)
			}
		case <-deadline.C:
			t.Fatalf("a Read, Write or Accept still blocks %v after the box was destroyed", Timeout)
		}
	}
	c.Close()
	l.Close()
	testbin.WaitFor(t, 10*time.Second, "goroutines to end", func() bool {
		return forwardingGoroutines() == 0 && runtime.NumGoroutine() <= before
	})
}
