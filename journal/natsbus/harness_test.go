package natsbus_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/journal/natsbus"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// patience bounds every wait of these tests: a test that needs longer has
// hung.
const patience = 60 * time.Second

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	t.Cleanup(cancel)
	return ctx
}

// natsServer is a real NATS server with JetStream, in this process.
type natsServer struct {
	t    testing.TB
	dir  string
	port int
	s    *server.Server
}

// startNATS starts a NATS server with JetStream storing under a temporary
// directory, on a free port.
func startNATS(t testing.TB) *natsServer {
	n := &natsServer{t: t, dir: t.TempDir(), port: -1}
	n.start()
	t.Cleanup(n.stop)
	return n
}

// start starts it (again: on the same port and store directory).
func (n *natsServer) start() {
	n.t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: n.port, JetStream: true, StoreDir: n.dir,
		NoLog: true, NoSigs: true,
	})
	if err != nil {
		n.t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(patience) {
		n.t.Fatal("the NATS server did not start")
	}
	n.s = s
	n.port = s.Addr().(*net.TCPAddr).Port
}

// stop shuts it down and waits until it is down.
func (n *natsServer) stop() {
	if n.s == nil {
		return
	}
	n.s.Shutdown()
	n.s.WaitForShutdown()
	n.s = nil
}

func (n *natsServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// streamMsgs is how many messages the events stream holds.
func (n *natsServer) streamMsgs(ctx context.Context) uint64 {
	n.t.Helper()
	nc, err := nats.Connect(n.url())
	if err != nil {
		n.t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		n.t.Fatal(err)
	}
	s, err := js.Stream(ctx, "HARVEST_EVENTS")
	if err != nil {
		n.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		n.t.Fatal(err)
	}
	return info.State.Msgs
}

// node is one Harvest server's share of the setup: its own connection to
// the shared SQLite file, a bus, and a journal publishing on it.
type node struct {
	st  *sqlite.Store
	bus *natsbus.Bus
	j   *journal.Journal
}

// config is the bus configuration of the tests: quick retries, and no
// healing by timer or polling while NATS is down unless a test asks (so
// what arrives came over NATS).
func config(url string, t testing.TB) natsbus.Config {
	return natsbus.Config{URL: url, RetryMin: 10 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		PublishTimeout: time.Second, HealEvery: time.Hour, PollDown: time.Hour, Logger: logTo(t)}
}

// newNode opens the store at path, connects a bus with cfg and starts a
// journal publishing through pub(bus) (the bus itself when pub is nil).
func newNode(t testing.TB, path string, cfg natsbus.Config, pub func(*natsbus.Bus) journal.Publisher) *node {
	t.Helper()
	st, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	bus, err := natsbus.Connect(testCtx(t), st, cfg)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	var p journal.Publisher = bus
	if pub != nil {
		p = pub(bus)
	}
	n := &node{st: st, bus: bus, j: journal.New(st, journal.Options{Logger: cfg.Logger, Publisher: p})}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := n.j.Close(ctx); err != nil {
			t.Errorf("closing the journal: %v", err)
		}
		n.bus.Close(ctx)
		n.st.Close()
	})
	return n
}

// dbWith makes a SQLite file with the sessions.
func dbWith(t testing.TB, sessions ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "harvest.db")
	st, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range sessions {
		if err := st.CreateSession(context.Background(), &store.Session{ID: id, Owner: "o", State: store.StateWorking}, nil); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// appendN appends n events to session and waits until they are stored
// (events stored one by one: live pieces are live_test.go's).
func (n *node) appendN(t testing.TB, session string, count int) {
	t.Helper()
	ctx := testCtx(t)
	for i := range count {
		if _, err := n.j.Append(event.Event{Session: session, Data: event.AssistantMessage{Text: fmt.Sprint(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.j.Flush(ctx, session); err != nil {
		t.Fatal(err)
	}
}

// expect reads seqs from..to from f, exactly those in that order: a gap, a
// repeat or an end fails the test.
func expect(t testing.TB, f *natsbus.Follower, from, to int64) {
	t.Helper()
	ctx := testCtx(t)
	for want := from; want <= to; want++ {
		select {
		case ev, ok := <-f.C:
			if !ok {
				t.Fatalf("the follower ended before seq %d: %v", want, f.Err())
			}
			if ev.Seq != want {
				t.Fatalf("got seq %d, want %d (no gap, no repeat)", ev.Seq, want)
			}
			if ev.Data == nil {
				t.Fatalf("seq %d has no payload", ev.Seq)
			}
		case <-ctx.Done():
			t.Fatalf("waiting for seq %d: %v", want, ctx.Err())
		}
	}
}

// waitFor polls cond (every few milliseconds) until it holds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	ctx := testCtx(t)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

func logTo(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlog{t}, nil))
}

type tlog struct{ t testing.TB }

func (w tlog) Write(b []byte) (int, error) {
	w.t.Logf("%s", bytes.TrimSpace(b))
	return len(b), nil
}

func openTestStore(t testing.TB) *sqlite.Store {
	st, err := sqlite.Open(dbWith(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
