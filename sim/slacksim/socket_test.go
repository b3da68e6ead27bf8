package slacksim_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/slack-go/slack"

	"github.com/harvest-dev/harvest/sim/slacksim"
)

type frame struct {
	conn int
	f    map[string]any
	err  error
}

// rawSocket is a Socket Mode connection driven by hand: every frame it
// reads goes to frames, tagged with its number.
type rawSocket struct {
	ws *websocket.Conn
	id int
}

func dialSocket(t *testing.T, ctx context.Context, w *world, id int, frames chan<- frame, wg *sync.WaitGroup) *rawSocket {
	t.Helper()
	api := slack.New(w.tok.Bot, slack.OptionAPIURL(w.srv.APIURL()), slack.OptionAppLevelToken(w.tok.App))
	_, u, err := api.StartSocketModeContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ws, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				frames <- frame{conn: id, err: err}
				return
			}
			var f map[string]any
			json.Unmarshal(b, &f)
			frames <- frame{conn: id, f: f}
		}
	}()
	// A used ticket is refused.
	if _, _, err := websocket.Dial(ctx, u, nil); err == nil {
		t.Error("a ticket was taken twice")
	}
	return &rawSocket{ws: ws, id: id}
}

func (s *rawSocket) ack(t *testing.T, ctx context.Context, id string) {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"envelope_id": id})
	if err := s.ws.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
}

func next(t *testing.T, ctx context.Context, frames <-chan frame) frame {
	t.Helper()
	select {
	case f := <-frames:
		if f.err != nil {
			t.Fatalf("conn %d: %v", f.conn, f.err)
		}
		return f
	case <-ctx.Done():
		t.Fatal("no frame")
	}
	return frame{}
}

// TestSocketModeProtocol: hello; each envelope to one connection, in
// turn; an unacked envelope redelivered after 3 s with retry_attempt and
// retry_reason, on the clock; a dropped connection's envelopes
// redelivered elsewhere; a disconnect warning, then the close after its
// grace, and no envelope to that connection in between; an event given
// up after Slack's three retries.
func TestSocketModeProtocol(t *testing.T) {
	w := newWorld(t, slacksim.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	frames := make(chan frame, 64)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	s1 := dialSocket(t, ctx, w, 1, frames, &wg)
	if f := next(t, ctx, frames); f.f["type"] != "hello" || f.f["num_connections"] != 1.0 {
		t.Fatalf("hello: %v", f.f)
	}
	s2 := dialSocket(t, ctx, w, 2, frames, &wg)
	if f := next(t, ctx, frames); f.f["type"] != "hello" || f.f["num_connections"] != 2.0 || f.conn != 2 {
		t.Fatalf("hello: %v", f.f)
	}
	socks := map[int]*rawSocket{1: s1, 2: s2}

	// A mention is two events (message.channels, app_mention): one to each.
	if _, err := w.srv.Post(slacksim.PostSpec{User: w.alice.ID, Channel: w.general.ID, Text: w.mention() + " hi"}); err != nil {
		t.Fatal(err)
	}
	byConn := map[int]string{}
	for range 2 {
		f := next(t, ctx, frames)
		if f.f["type"] != "events_api" || f.f["retry_attempt"] != 0.0 || f.f["accepts_response_payload"] != false {
			t.Fatalf("envelope: %v", f.f)
		}
		byConn[f.conn] = f.f["envelope_id"].(string)
	}
	if len(byConn) != 2 {
		t.Fatalf("both envelopes went to one connection: %v", byConn)
	}
	// Conn 1 acks; conn 2 does not: 3 s later its envelope comes again.
	s1.ack(t, ctx, byConn[1])
	if _, err := w.srv.WaitEnvelope(ctx, func(es []slacksim.Envelope) bool { return es[0].Acks+es[1].Acks == 1 }); err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(2999 * time.Millisecond)
	w.clock.Advance(time.Millisecond)
	f := next(t, ctx, frames)
	if f.f["envelope_id"] != byConn[2] || f.f["retry_attempt"] != 1.0 || f.f["retry_reason"] != "timeout" {
		t.Fatalf("redelivery: %v", f.f)
	}
	// Dropped before acking: redelivered on the other connection, after
	// the second retry's backoff (a minute).
	w.srv.Drop(f.conn)
	other := 3 - f.conn
	w.clock.Advance(3 * time.Second)
	if _, err := w.srv.WaitEnvelope(ctx, func(es []slacksim.Envelope) bool { return es[1].State == slacksim.StateWaiting }); err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(time.Minute)
	var g frame
	for g.f == nil {
		select {
		case g = <-frames:
			if g.err != nil && g.conn == other {
				t.Fatalf("conn %d: %v", g.conn, g.err)
			}
		case <-ctx.Done():
			for _, e := range w.srv.Envelopes() {
				t.Logf("%s %s %+v", e.ID, e.State, e.Attempts)
			}
			t.Fatalf("no redelivery: %+v %v", w.srv.Connections(), w.clock.Now())
		}
	}
	if g.f["envelope_id"] != byConn[2] || g.f["retry_attempt"] != 2.0 {
		t.Fatalf("after the drop: %v", g.f)
	}
	socks[other].ack(t, ctx, byConn[2])
	es, err := w.srv.WaitEnvelopes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if e := es[1]; e.ID == byConn[2] && (e.State != slacksim.StateAcked || len(e.Attempts) != 3 || e.Attempts[0].Outcome != "timeout") {
		t.Errorf("envelope: %+v", e)
	}

	// A disconnect warning: nothing more to that connection; the next
	// envelope waits for a new one; the warned one closes after 10 s.
	if n, err := w.srv.Disconnect(slacksim.DisconnectSpec{Reason: "warning"}); err != nil || n != 1 {
		t.Fatalf("disconnect: %d %v", n, err)
	}
	if d := next(t, ctx, frames); d.f["type"] != "disconnect" || d.f["reason"] != "warning" {
		t.Fatalf("disconnect: %v", d.f)
	}
	if _, err := w.srv.Post(slacksim.PostSpec{User: w.bob.ID, Channel: w.general.ID, Text: "later"}); err != nil {
		t.Fatal(err)
	}
	s3 := dialSocket(t, ctx, w, 3, frames, &wg)
	if h := next(t, ctx, frames); h.f["type"] != "hello" || h.conn != 3 {
		t.Fatalf("hello: %v", h.f)
	}
	e3 := next(t, ctx, frames)
	if e3.conn != 3 || e3.f["type"] != "events_api" {
		t.Fatalf("after the warning: %v from conn %d", e3.f, e3.conn)
	}
	s3.ack(t, ctx, e3.f["envelope_id"].(string))
	if _, err := w.srv.WaitEnvelopes(ctx); err != nil {
		t.Fatal(err)
	}
	w.clock.Advance(10 * time.Second)
	closed := next2(t, ctx, frames)
	if closed.conn != other || websocket.CloseStatus(closed.err) != websocket.StatusNormalClosure {
		t.Fatalf("the warned connection: %d %v", closed.conn, closed.err)
	}

	// Never acked: three retries (0, 1 min, 5 min after each miss), then failed.
	if _, err := w.srv.Post(slacksim.PostSpec{User: w.bob.ID, Channel: w.general.ID, Text: "ignored"}); err != nil {
		t.Fatal(err)
	}
	for i, wait := range []time.Duration{0, time.Minute, 5 * time.Minute} {
		x := next(t, ctx, frames)
		if x.f["retry_attempt"] != float64(i) {
			t.Fatalf("attempt %d: %v", i, x.f)
		}
		w.clock.Advance(3 * time.Second)
		if wait > 0 {
			if _, err := w.srv.WaitEnvelope(ctx, func(es []slacksim.Envelope) bool { return es[len(es)-1].State == slacksim.StateWaiting }); err != nil {
				t.Fatal(err)
			}
			w.clock.Advance(wait)
		}
	}
	last := next(t, ctx, frames)
	if last.f["retry_attempt"] != 3.0 {
		t.Fatalf("last attempt: %v", last.f)
	}
	w.clock.Advance(3 * time.Second)
	es, err = w.srv.WaitEnvelopes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if e := es[len(es)-1]; e.State != slacksim.StateFailed || len(e.Attempts) != 4 {
		t.Errorf("given up: %+v", e)
	}
	checkExchanges(t, w.srv)
}

// next2 returns the next frame that is an error.
func next2(t *testing.T, ctx context.Context, frames <-chan frame) frame {
	t.Helper()
	for {
		select {
		case f := <-frames:
			if f.err != nil {
				return f
			}
		case <-ctx.Done():
			t.Fatal(errors.New("no close"))
		}
	}
}
