package slacksim_test

import (
	"context"
	"sync"
	"testing"
	"time"

	gorilla "github.com/gorilla/websocket"
	"github.com/slack-go/slack"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sim/slacksim"
)

// TestSlackGoReconnects: slack-go's Socket Mode client comes back after
// the stand-in drops its connection and after a refresh_requested
// disconnect, and every event reaches the app once.
func TestSlackGoReconnects(t *testing.T) {
	w := newWorld(t, slacksim.Options{})
	ctx := ctxT(t)
	app := startSlackGoApp(t, ctx, w)
	app.want(t, ctx, "hello")
	m, err := w.srv.Post(slacksim.PostSpec{User: w.alice.ID, Channel: w.general.ID, Text: w.mention() + " start"})
	if err != nil {
		t.Fatal(err)
	}
	app.want(t, ctx, "mention:")

	// Each step waits for every envelope's ack first (the app's own
	// messages' events included): what this test counts is the client
	// coming back, not redeliveries (TestSocketModeProtocol has those).
	if _, err := w.srv.WaitEnvelopes(ctx); err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(3 * time.Second) // chat.postMessage's window
	if n := w.srv.Drop(0); n != 1 {
		t.Fatalf("dropped %d", n)
	}
	app.want(t, ctx, "hello")
	if _, err := w.srv.Post(slacksim.PostSpec{User: w.alice.ID, Channel: w.general.ID, Text: "after the drop", ThreadTS: m.TS}); err != nil {
		t.Fatal(err)
	}
	app.want(t, ctx, "reply:channel")
	if _, err := w.srv.WaitEnvelopes(ctx); err != nil {
		t.Fatal(err)
	}

	if n, err := w.srv.Disconnect(slacksim.DisconnectSpec{Reason: "refresh_requested"}); err != nil || n != 1 {
		t.Fatalf("disconnect: %d %v", n, err)
	}
	app.want(t, ctx, "hello")
	if _, err := w.srv.Post(slacksim.PostSpec{User: w.alice.ID, Channel: w.general.ID, Text: "after the refresh", ThreadTS: m.TS}); err != nil {
		t.Fatal(err)
	}
	app.want(t, ctx, "reply:channel")

	es, err := w.srv.WaitEnvelopes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.State != slacksim.StateAcked || len(e.Attempts) != 1 || e.Acks != 1 {
			t.Errorf("envelope %s: %s, %d attempts, %d acks", e.Topic, e.State, len(e.Attempts), e.Acks)
		}
	}
	var texts []string
	for _, r := range w.srv.Thread(w.general.ID, m.TS)[1:] {
		texts = append(texts, r.Text)
	}
	want := []string{"Step 1 of 2", "after the drop", "got: after the drop", "after the refresh", "got: after the refresh"}
	if len(texts) != len(want) {
		t.Fatalf("thread %q, want %q", texts, want)
	}
	for i := range want {
		if texts[i] != want[i] {
			t.Errorf("thread %q, want %q", texts, want)
			break
		}
	}
	calls := 0
	for _, c := range w.srv.Calls() {
		if c.Method == "apps.connections.open" {
			calls++
		}
	}
	if calls != 3 {
		t.Errorf("apps.connections.open called %d times, want 3", calls)
	}
	checkExchanges(t, w.srv)
}

// TestSocketPings: the stand-in pings each connection (as Slack does,
// so clients' dead-man timers do not fire), and closes one that stops
// answering.
func TestSocketPings(t *testing.T) {
	// Short, for the test, yet long enough for a pong under -race on a
	// loaded machine (20 ms was not: the live connection was closed).
	w := newWorld(t, slacksim.Options{PingInterval: 300 * time.Millisecond})
	ctx := ctxT(t)
	api := slack.New(w.tok.Bot, slack.OptionAPIURL(w.srv.APIURL()), slack.OptionAppLevelToken(w.tok.App))
	dial := func() *gorilla.Conn {
		_, u, err := api.StartSocketModeContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c, _, err := gorilla.DefaultDialer.DialContext(ctx, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	live := dial()
	pings := make(chan struct{}, 16)
	live.SetPingHandler(func(data string) error {
		select {
		case pings <- struct{}{}:
		default:
		}
		return live.WriteControl(gorilla.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if _, _, err := live.ReadMessage(); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { live.Close(); wg.Wait() })
	for range 3 {
		select {
		case <-pings:
		case <-ctx.Done():
			t.Fatal("no ping")
		}
	}
	// A client that never reads never answers a ping: closed.
	deaf := dial()
	_ = deaf
	testbin.WaitFor(t, 30*time.Second, "the deaf connection closed, the live one open", func() bool {
		c := w.srv.Connections()
		return len(c) == 1 && c[0].ID == 1
	})
	_ = context.Background
}
