package cluster

import (
	"bufio"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// TestForwardable: the requests that act on a running session are the
// ones forwarded to its owner; reads of the store never are, and event
// streams only when Streams is on.
func TestForwardable(t *testing.T) {
	for _, c := range []struct {
		method, path string
		streams      bool
		want         string
	}{
		{"POST", "/v1/sessions/s1/messages", false, "s1"},
		{"POST", "/v1/sessions/s1/cancel", false, "s1"},
		{"POST", "/v1/sessions/s1/unlock", false, "s1"},
		{"DELETE", "/v1/sessions/s1", false, "s1"},
		{"GET", "/v1/sessions/s1/diff", false, "s1"},
		{"GET", "/v1/sessions/s1/shell", false, "s1"},
		{"GET", "/v1/sessions/s1/events", true, "s1"},
		{"GET", "/v1/sessions/s1/events", false, ""},
		{"GET", "/v1/sessions/s1", true, ""},
		{"GET", "/v1/sessions/s1/log", true, ""},
		{"GET", "/v1/sessions", true, ""},
		{"POST", "/v1/sessions", true, ""}, // placed (PlaceNew), not forwarded to an owner
		{"POST", "/v1/sessions//messages", true, ""},
		{"GET", "/v1/tokens", true, ""},
	} {
		f := &forwarder{events: c.streams}
		r := httptest.NewRequest(c.method, c.path, nil)
		id, ok := f.forwardable(r)
		if ok != (c.want != "") || id != c.want {
			t.Errorf("%s %s (streams %v): forwardable %q, %v; want %q", c.method, c.path, c.streams, id, ok, c.want)
		}
	}
}

// leaseReads counts GetLease on a real store.
type leaseReads struct {
	store.Store
	n atomic.Int64
}

func (s *leaseReads) GetLease(ctx context.Context, id string) (store.Lease, error) {
	s.n.Add(1)
	return s.Store.GetLease(ctx, id)
}

// TestStreamHandOver: an event stream this node serves (here one another
// node forwarded) goes on while this node holds the session's lease, and
// ends once another node takes it, so that the client reconnects and is
// forwarded to the new owner.
func TestStreamHandOver(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st := &leaseReads{Store: db}
	if err := st.CreateSession(ctx, &store.Session{ID: "s1", Owner: "o", State: store.StateIdle}, nil); err != nil {
		t.Fatal(err)
	}
	const ttl = time.Minute
	mine, err := st.AcquireLease(ctx, "s1", "b", ttl)
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/sessions/s1/events" {
			w.Write([]byte("api\n"))
			return
		}
		defer close(ended)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte(": open\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	f := &forwarder{st: st, next: api, self: "b", events: true, every: 5 * time.Millisecond, poll: 5 * time.Millisecond,
		leases: &leaseCache{st: st, maxAge: 5 * time.Millisecond}, log: slog.New(slog.DiscardHandler)}
	srv := httptest.NewServer(f)
	defer srv.Close()

	get := func(path string) (*http.Response, *bufio.Reader) {
		req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(forwardedHeader, "a")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp, bufio.NewReader(resp.Body)
	}
	resp, body := get("/v1/sessions/s1")
	if line, _ := body.ReadString('\n'); line != "api\n" {
		t.Errorf("a forwarded read: %q, want the API's answer", line)
	}
	resp.Body.Close()

	resp, body = get("/v1/sessions/s1/events")
	defer resp.Body.Close()
	if line, err := body.ReadString('\n'); line != ": open\n" {
		t.Fatalf("the stream: %q, %v", line, err)
	}
	// This node holds the lease: the stream goes on however often it is
	// checked (its heartbeat renewed here, as the node's renewer would).
	seen := st.n.Load()
	testbin.WaitFor(t, 10*time.Second, "the stream's lease read three times", func() bool {
		if n, err := st.HeartbeatNode(ctx, store.Node{ID: "b", Gen: mine.Gen}, ttl); err != nil || n.Gen != mine.Gen {
			t.Fatalf("b's heartbeat in generation %d: %+v, %v", mine.Gen, n, err)
		}
		return st.n.Load() >= seen+3
	})
	select {
	case <-ended:
		t.Fatal("the stream ended while this node held the session's lease")
	default:
	}
	// Node b gives the session up and node a takes it.
	if err := st.ReleaseLease(ctx, mine); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireLease(ctx, "s1", "a", ttl); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end after another node took the session")
	}
	if _, err := body.ReadString('\n'); err == nil {
		t.Error("the client's stream did not end")
	}
}
