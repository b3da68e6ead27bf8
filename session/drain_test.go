package session

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
)

// TestSendIdempotent: a send retried with its idempotency key gives back
// the first message and stores nothing; the key with another text is a
// conflict; another sender's same key is another message; racing retries
// store one message; and every message has its message.queued event.
func TestSendIdempotent(t *testing.T) {
	e := newEnv(t)
	ctx := testbin.Context(t)
	v := e.create("msg one")
	w := e.watch(v.ID)
	w.Finished("t1")

	send := func(o Outgoing) (*store.Message, error) { return e.m.SendMessage(ctx, "owner-1", v.ID, o) }
	first, err := send(Outgoing{Text: "msg two", Key: "k1", Sender: "tok-a"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := send(Outgoing{Text: "msg two", Key: "k1", Sender: "tok-a"})
	if err != nil || again.ID != first.ID || again.Seq != first.Seq {
		t.Fatalf("the retry: %+v, %v; want the first message %s back", again, err, first.ID)
	}
	if _, err := send(Outgoing{Text: "msg something else", Key: "k1", Sender: "tok-a"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("the key with another text: %v, want ErrConflict", err)
	}
	if _, err := send(Outgoing{Text: "msg two", Mode: ModeInterrupt, Key: "k1", Sender: "tok-a"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("the key with another mode: %v, want ErrConflict", err)
	}
	other, err := send(Outgoing{Text: "msg two", Key: "k1", Sender: "tok-b"})
	if err != nil || other.ID == first.ID {
		t.Fatalf("another sender's same key: %+v, %v; want a message of its own", other, err)
	}
	if _, err := send(Outgoing{Text: "msg x", Key: "has space", Sender: "tok-a"}); !IsInput(err) {
		t.Fatalf("a key with a space: %v, want an InputError", err)
	}

	const racers = 8
	ids := make(chan string, racers)
	var wg sync.WaitGroup
	for range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := send(Outgoing{Text: "msg raced", Key: "k-race", Sender: "tok-a"})
			if err != nil {
				t.Error(err)
				return
			}
			ids <- m.ID
		}()
	}
	wg.Wait()
	close(ids)
	var raced string
	for id := range ids {
		if raced != "" && id != raced {
			t.Fatalf("racing retries got messages %s and %s", raced, id)
		}
		raced = id
	}

	w.Finished("t4")
	msgs, err := e.st.Messages(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 4 {
		t.Fatalf("%d messages stored, want 4 (the prompt, msg two twice, msg raced once)", len(msgs))
	}
	queued, _ := stacktest.OfType[event.MessageQueued](stacktest.CheckGapless(t, e.st, v.ID))
	n := map[string]int{}
	for _, q := range queued {
		n[q.MessageID]++
	}
	for _, m := range msgs {
		if n[m.ID] != 1 {
			t.Errorf("message %s has %d message.queued events, want 1", m.ID, n[m.ID])
		}
	}
}

// TestDrain: while draining, new sessions and messages are refused with
// ErrUnavailable, the running turn goes on to turn.finished, the queued
// message is not delivered, and Drain's channel is closed once the turn
// is over. The next server delivers the queued message.
func TestDrain(t *testing.T) {
	e := newEnv(t)
	ctx := testbin.Context(t)
	v := e.create("long task")
	w := e.watch(v.ID)
	stacktest.Typed[event.ToolStarted](w, "t1", nil)
	queued := e.send(v.ID, "msg after the drain", "")

	drained := e.m.Drain()
	if again := e.m.Drain(); again != drained {
		t.Fatal("a second Drain returned another channel")
	}
	select {
	case <-drained:
		t.Fatal("drained while a turn runs")
	default:
	}
	if _, err := e.m.Send(ctx, "owner-1", v.ID, "msg refused", ""); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Send while draining: %v, want ErrUnavailable", err)
	}
	if _, err := e.m.Create(ctx, "owner-1", CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Prompt: "msg"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Create while draining: %v, want ErrUnavailable", err)
	}
	if _, err := e.m.Get(ctx, "owner-1", v.ID); err != nil {
		t.Fatalf("Get while draining: %v", err)
	}

	release(t, v)
	w.Finished("t1")
	select {
	case <-drained:
	case <-time.After(stacktest.WaitTimeout):
		t.Fatal("not drained after the turn finished")
	}
	w.State(store.StateIdle)
	if q := e.get(v.ID).Queue; len(q) != 1 || q[0].ID != queued.ID {
		t.Fatalf("queue after the drain: %+v, want %s still queued", q, queued.ID)
	}

	e.closeAndReopen()
	if err := e.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	w = e.watch(v.ID)
	if d := stacktest.Typed[event.MessageDelivered](w, "t2", nil); d.MessageID != queued.ID {
		t.Fatalf("t2 took %s, want %s", d.MessageID, queued.ID)
	}
	w.Finished("t2")
	evs := stacktest.CheckGapless(t, e.st, v.ID)
	if failed, _ := stacktest.OfType[event.TurnFailed](evs); len(failed) != 0 {
		t.Fatalf("a turn failed: %+v", failed)
	}
}
