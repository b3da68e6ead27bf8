package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// followEnv is a store with session s1, the forwarder of node b on it,
// and whatever nodes a test registers.
type followEnv struct {
	t  *testing.T
	st store.Store
	f  *forwarder
	b  *httptest.Server
}

const followTTL = time.Minute // the test moves leases itself

func newFollowEnv(t *testing.T, here http.Handler) *followEnv {
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.CreateSession(context.Background(), &store.Session{ID: "s1", Owner: "o", State: store.StateIdle}, nil); err != nil {
		t.Fatal(err)
	}
	const poll = 20 * time.Millisecond
	f := &forwarder{st: db, next: here, self: "b", events: true, every: poll, poll: poll, budget: time.Second,
		patience: 5 * time.Second, leases: &leaseCache{st: db, maxAge: poll}, log: slog.New(slog.DiscardHandler)}
	b := httptest.NewServer(f)
	t.Cleanup(b.Close)
	return &followEnv{t: t, st: db, f: f, b: b}
}

// node registers node id at addr, live for the test.
func (e *followEnv) node(id, addr string) {
	if _, err := e.st.HeartbeatNode(context.Background(), store.Node{ID: id, Addr: addr}, followTTL); err != nil {
		e.t.Fatal(err)
	}
}

// give moves s1's lease to node as a takeover does: once the holder's
// lease ran out (leaseTTL), so that no look-up finds it released.
func (e *followEnv) give(node string) {
	testbin.WaitFor(e.t, 10*time.Second, "node "+node+" to take s1's lease", func() bool {
		_, err := e.st.AcquireLease(context.Background(), "s1", node, leaseTTL)
		if err != nil && !errors.Is(err, store.ErrLocked) {
			e.t.Fatal(err)
		}
		return err == nil
	})
}

// leaseTTL is the test's leases': the checks that a request waits for
// the lease to move last less.
const leaseTTL = 400 * time.Millisecond

// paused is a node that accepts connections and never answers: a
// process stopped with SIGSTOP (the kernel still completes handshakes).
func paused(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	pausedListeners.Store(ln.Addr().String(), ln)
	return "http://" + ln.Addr().String()
}

// received is what a node's API got.
type received struct {
	mu   sync.Mutex
	reqs []string // method path key body
}

func (rc *received) add(r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.reqs = append(rc.reqs, fmt.Sprintf("%s %s key=%s by=%s %s", r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"), r.Header.Get(forwardedHeader), b))
}

func (rc *received) all() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.reqs...)
}

// TestForwardFollowsLease: a send forwarded to an owner that does not
// answer (paused) is cancelled when the lease moves, and sent again,
// body and all, to the new owner, which answers it within a few polls
// of the move; a send without an Idempotency-Key gets one, the same on
// every attempt.
func TestForwardFollowsLease(t *testing.T) {
	e := newFollowEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Errorf("served on b: %s %s", r.Method, r.URL.Path) }))
	var c received
	cs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.add(r)
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, "stored on c\n")
	}))
	defer cs.Close()
	e.node("a", paused(t))
	e.node("c", cs.URL)
	e.give("a")

	type answer struct {
		status int
		body   string
		at     time.Time
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := http.Post(e.b.URL+"/v1/sessions/s1/messages", "application/json", strings.NewReader(`{"text":"hello"}`))
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- answer{status: resp.StatusCode, body: string(b), at: time.Now()}
	}()
	select {
	case a := <-done:
		t.Fatalf("the send answered while its owner is paused and holds the lease: %+v", a)
	case <-time.After(300 * time.Millisecond):
	}
	e.give("c")
	movedAt := time.Now()
	a := <-done
	if a.err != nil || a.status != http.StatusAccepted || a.body != "stored on c\n" {
		t.Fatalf("the send after the lease moved to c: %+v", a)
	}
	took := a.at.Sub(movedAt)
	t.Logf("the send answered through c %s after the lease moved (poll %s)", took.Round(time.Millisecond), e.f.poll)
	if took > time.Second {
		t.Errorf("the send answered %s after the lease moved; want within a second", took)
	}
	got := c.all()
	if len(got) != 1 || !strings.HasPrefix(got[0], "POST /v1/sessions/s1/messages key=forwarded-") || !strings.HasSuffix(got[0], `by=b {"text":"hello"}`) {
		t.Errorf("c received %q, want the send once, with its body, a generated key and b's mark", got)
	}
}

// TestForwardDeadOwner: a send for a session whose owner refuses
// connections (killed) is not a 503: it waits for the lease to move and
// goes to the new owner; one whose owner left the node list (its
// heartbeat ran out) and whose lease is then released is served here.
func TestForwardDeadOwner(t *testing.T) {
	var here received
	e := newFollowEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		here.add(r)
		w.WriteHeader(http.StatusNoContent)
	}))
	var c received
	cs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.add(r)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer cs.Close()
	dead := paused(t)
	e.node("a", dead)
	e.give("a")
	closeListener(t, dead) // killed: nothing listens at its address
	e.node("c", cs.URL)

	done := make(chan int, 1)
	go func() {
		resp, err := http.Post(e.b.URL+"/v1/sessions/s1/cancel", "application/json", nil)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	select {
	case s := <-done:
		t.Fatalf("the cancel answered %d while the dead owner holds the lease", s)
	case <-time.After(200 * time.Millisecond):
	}
	e.give("c")
	if s := <-done; s != http.StatusNoContent || len(c.all()) != 1 {
		t.Fatalf("the cancel after the lease moved to c: %d, c received %q, here %q", s, c.all(), here.all())
	}

	// Node d holds the lease but is not live (no heartbeat): the request
	// waits, and is served here once the lease is released.
	e.give("d")
	go func() {
		resp, err := http.Post(e.b.URL+"/v1/sessions/s1/cancel", "application/json", nil)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	select {
	case s := <-done:
		t.Fatalf("the cancel answered %d while a dead node's lease is unexpired", s)
	case <-time.After(200 * time.Millisecond):
	}
	l, _ := e.st.GetLease(context.Background(), "s1")
	if err := e.st.ReleaseLease(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	if s := <-done; s != http.StatusNoContent || len(here.all()) != 1 {
		t.Fatalf("the cancel after the dead node's lease was released: %d, served here %q", s, here.all())
	}
}

// closeListener closes the paused listener at url (registered by paused).
func closeListener(t *testing.T, url string) {
	addr := strings.TrimPrefix(url, "http://")
	if ln, ok := pausedListeners.LoadAndDelete(addr); ok {
		ln.(net.Listener).Close()
		return
	}
	t.Fatalf("no paused listener at %s", addr)
}

var pausedListeners sync.Map

// TestFollowHandsOver: a follower's stream through b, from owner a, goes
// on from owner c when the lease moves, in the same response: c is
// asked for what follows the last event the client got (Last-Event-ID),
// the client sees every event once, in order, and the retry line once.
func TestFollowHandsOver(t *testing.T) {
	e := newFollowEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Errorf("served on b: %s %s", r.Method, r.URL.Path) }))
	sse := func(from, to int, hang bool, asked *string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if asked != nil {
				*asked = r.Header.Get("Last-Event-ID")
			}
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "retry: 1000\n\n")
			for i := from; i <= to; i++ {
				fmt.Fprintf(w, "id: %d\nevent: x\ndata: {}\n\n", i)
			}
			if hang {
				// A half-written event, then nothing: paused mid-write.
				io.WriteString(w, "id: 99\nevent: x\n")
				w.(http.Flusher).Flush()
				<-r.Context().Done()
				return
			}
			fmt.Fprintf(w, "event: stream.error\ndata: {\"error\":{\"code\":\"deleted\",\"message\":\"m\"}}\n\n")
		})
	}
	as := httptest.NewServer(sse(1, 3, true, nil))
	defer as.Close()
	var asked string
	cs := httptest.NewServer(sse(4, 6, false, &asked))
	defer cs.Close()
	e.node("a", as.URL)
	e.node("c", cs.URL)
	e.give("a")

	resp, err := http.Get(e.b.URL + "/v1/sessions/s1/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	var ids []string
	retries := 0
	read := func(until string) {
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("the stream ended (%v) before %q; ids %v", err, until, ids)
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case strings.HasPrefix(line, "id: "):
				ids = append(ids, line[4:])
			case strings.HasPrefix(line, "retry: "):
				retries++
			}
			if line == until {
				return
			}
		}
	}
	read("id: 3")
	e.give("c")
	read("event: stream.error")
	if got := strings.Join(ids, ","); got != "1,2,3,4,5,6" || retries != 1 {
		t.Errorf("the client saw ids %s and %d retry lines; want 1,2,3,4,5,6 and one", got, retries)
	}
	if asked != "3" {
		t.Errorf("c was asked for the events after %q, want 3", asked)
	}
}
