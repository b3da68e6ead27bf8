package slacksim_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sim/slacksim"
)

// TestSocketLoseAcks: an ack LoseAcks loses takes its connection with
// it; the envelope comes again on the other connection when its ack
// deadline passes, and the ack there is recorded with the connection it
// came on.
func TestSocketLoseAcks(t *testing.T) {
	w := newWorld(t, slacksim.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	frames := make(chan frame, 64)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	socks := map[int]*rawSocket{}
	for i := 1; i <= 2; i++ {
		socks[i] = dialSocket(t, ctx, w, i, frames, &wg)
		if f := next(t, ctx, frames); f.f["type"] != "hello" {
			t.Fatalf("hello: %v", f.f)
		}
	}
	w.srv.LoseAcks(slacksim.LoseSpec{N: 1, Containing: "hello"})
	if _, err := w.srv.Post(slacksim.PostSpec{User: w.alice.ID, Channel: w.general.ID, Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	f := next(t, ctx, frames)
	id, _ := f.f["envelope_id"].(string)
	if f.f["type"] != "events_api" || id == "" {
		t.Fatalf("envelope: %v", f.f)
	}
	socks[f.conn].ack(t, ctx, id)
	if dropped := next2(t, ctx, frames); dropped.conn != f.conn {
		t.Fatalf("connection %d ended, want %d (the one whose ack was lost)", dropped.conn, f.conn)
	}
	if es := w.srv.Envelopes(); es[0].State != slacksim.StateSent || es[0].Acks != 0 {
		t.Fatalf("after a lost ack: %+v", es[0])
	}
	w.clock.Advance(3 * time.Second)
	other := 3 - f.conn
	g := next(t, ctx, frames)
	if g.conn != other || g.f["envelope_id"] != id || g.f["retry_attempt"] != 1.0 {
		t.Fatalf("the redelivery: %v on connection %d, want %s on %d", g.f, g.conn, id, other)
	}
	socks[other].ack(t, ctx, id)
	es, err := w.srv.WaitEnvelopes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := es[0]
	if e.State != slacksim.StateAcked || len(e.Attempts) != 2 || e.Attempts[0].AckConn != 0 || e.Attempts[1].AckConn != other || e.Attempts[1].Conn != other {
		t.Errorf("envelope: %+v", e)
	}
	checkExchanges(t, w.srv)
}
