package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/store"
)

// 100 sessions at once, 10 messages each sent as fast as the callers can:
// every message is answered, in order, and none is lost.
//
// The backend is local with a pool of warm boxes, as harvest serve runs
// it: real isolation, and a box costs a claim (about a millisecond) rather
// than a bwrap start, so the test measures the session layer, not bwrap.
// 100 boxes idle at once cost about 1.5 GB of RSS (agent and shim each);
// HARVEST_SESSION_LOAD=N changes the number of sessions.
func TestManySessions(t *testing.T) {
	n := 100
	if v := envInt("HARVEST_SESSION_LOAD"); v > 0 {
		n = v
	}
	const messages = 10
	e := newEnv(t, withPool(4))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	start := time.Now()
	ids := make([]string, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			v, err := e.m.Create(ctx, "owner-1", CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Prompt: "msg 1"})
			if err != nil {
				errs <- err
				return
			}
			ids[i] = v.ID
			for k := 2; k <= messages; k++ {
				if _, err := e.m.Send(ctx, "owner-1", v.ID, fmt.Sprintf("msg %d", k), ""); err != nil {
					errs <- fmt.Errorf("session %s, message %d: %w", v.ID, k, err)
					return
				}
			}
			// Every message answered: one turn.finished per message.
			sub, err := e.m.Subscribe(ctx, "", v.ID, 0)
			if err != nil {
				errs <- err
				return
			}
			defer sub.Close()
			done := 0
			for ev := range sub.C {
				switch p := ev.Data.(type) {
				case event.TurnFinished:
					done++
				case event.TurnFailed, event.TurnCancelled:
					errs <- fmt.Errorf("session %s: turn %s ended with %+v", v.ID, ev.Turn, p)
					return
				}
				if done == messages {
					return
				}
			}
			errs <- fmt.Errorf("session %s: events ended after %d answers: %v", v.ID, done, sub.Err())
		})
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if err := errors.Join(all...); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)

	for _, id := range ids {
		msgs, err := e.st.Messages(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != messages {
			t.Fatalf("session %s has %d messages, want %d", id, len(msgs), messages)
		}
		for i, m := range msgs {
			if m.State != store.MessageDelivered || m.Turn != turnID(i+1) || m.Text != fmt.Sprintf("msg %d", i+1) {
				t.Fatalf("session %s message %d: %q %s in %q, want msg %d delivered in %s", id, i+1, m.Text, m.State, m.Turn, i+1, turnID(i+1))
			}
		}
		stacktest.CheckGapless(t, e.st, id)
	}
	if got := len(e.Sim.Load().Requests()); got != n*messages {
		t.Fatalf("the model got %d requests, want %d", got, n*messages)
	}
	t.Logf("%d sessions x %d messages: %s (%.0f turns/s)", n, messages, elapsed.Round(time.Millisecond), float64(n*messages)/elapsed.Seconds())
}
