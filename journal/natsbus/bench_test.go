package natsbus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/journal/natsbus"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/postgres"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// BenchmarkStoresAppendDeliver appends b.N events over 10 sessions (one
// producer each) through the journal, and waits until each of 10
// subscribers per session has every event of its session, on the two
// setups a server runs:
//
//   - sqlite: one server; the journal commits to the SQLite file and fans
//     out in process (journal.Subscribe).
//   - postgres+nats: the journal of node A commits to PostgreSQL and
//     publishes on NATS JetStream (a Bus); the subscribers are followers
//     on node B (its own Bus and its own connections to the database), as
//     an SSE client connected to another server is.
//
// It reports events appended per second (until all were committed) and
// delivered per second (until every subscriber had all of them), and
// deliveries per second (events times subscribers).
//
//	go test -run '^$' -bench StoresAppendDeliver -benchtime 50000x ./journal/natsbus
func BenchmarkStoresAppendDeliver(b *testing.B) {
	const sessions, subsPer = 10, 10
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%d", i)
	}
	b.Run("sqlite", func(b *testing.B) {
		st, err := sqlite.Open(dbWith(b, ids...))
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		j := journal.New(st, journal.Options{})
		subscribe := func(ctx context.Context, id string, after int64) (<-chan event.Event, func() error, error) {
			s, err := j.Subscribe(ctx, id, after)
			if err != nil {
				return nil, nil, err
			}
			return s.C, func() error { err := s.Err(); s.Close(); return err }, nil
		}
		benchStores(b, j, ids, subsPer, subscribe)
	})
	b.Run("postgres+nats", func(b *testing.B) {
		ctx := testCtx(b)
		url := testbin.Postgres(b)
		n := startNATS(b)
		open := func() *postgres.Store {
			st, err := postgres.Open(ctx, url)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			return st
		}
		stA, stB := open(), open()
		for _, id := range ids {
			if err := stA.CreateSession(ctx, &store.Session{ID: id, Owner: "o", State: store.StateWorking}, nil); err != nil {
				b.Fatal(err)
			}
		}
		cfg := natsbus.Config{URL: n.url()}
		busA, err := natsbus.Connect(ctx, stA, cfg)
		if err != nil {
			b.Fatal(err)
		}
		busB, err := natsbus.Connect(ctx, stB, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			busB.Close(ctx)
			busA.Close(ctx)
		})
		j := journal.New(stA, journal.Options{Publisher: busA})
		subscribe := func(ctx context.Context, id string, after int64) (<-chan event.Event, func() error, error) {
			f, err := busB.Follow(ctx, id, after)
			if err != nil {
				return nil, nil, err
			}
			return f.C, func() error { err := f.Err(); f.Close(); return err }, nil
		}
		benchStores(b, j, ids, subsPer, subscribe)
	})
}

// subscribeFunc subscribes to a session's events after a seq: their
// channel, and a function that ends the subscription and says why it had
// ended (nil: it had not).
type subscribeFunc func(ctx context.Context, id string, after int64) (<-chan event.Event, func() error, error)

func benchStores(b *testing.B, j *journal.Journal, ids []string, subsPer int, subscribe subscribeFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	defer j.Close(ctx)
	per := max(b.N/len(ids), 1)
	total := per * len(ids)
	errs := make(chan error, len(ids)*(subsPer+1))
	var subs sync.WaitGroup
	for _, id := range ids {
		for k := range subsPer {
			c, end, err := subscribe(ctx, id, 0)
			if err != nil {
				b.Fatal(err)
			}
			subs.Add(1)
			go func() {
				defer subs.Done()
				var last int64
				for last < int64(per) {
					ev, ok := <-c
					if ok {
						last = ev.Seq
						continue
					}
					// The in-process journal cuts off a subscriber too far
					// behind: it comes back after its last seq, as an SSE
					// client does.
					if err := end(); !errors.Is(err, journal.ErrTooSlow) {
						errs <- fmt.Errorf("subscriber %d of %s ended at seq %d: %v", k, id, last, err)
						return
					}
					if c, end, err = subscribe(ctx, id, last); err != nil {
						errs <- err
						return
					}
				}
				end()
			}()
		}
	}
	b.ResetTimer()
	start := time.Now()
	var producers sync.WaitGroup
	for _, id := range ids {
		producers.Add(1)
		go func() {
			defer producers.Done()
			for i := range per {
				if _, err := j.Append(event.Event{Session: id, Turn: "t1",
					Data: event.AssistantMessage{Text: "a short assistant message, about one line long"}}); err != nil {
					errs <- fmt.Errorf("append %d to %s: %w", i, id, err)
					return
				}
			}
		}()
	}
	producers.Wait()
	for _, id := range ids {
		if err := j.Flush(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
	appended := time.Since(start)
	subs.Wait()
	delivered := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(total)/appended.Seconds(), "appended/s")
	b.ReportMetric(float64(total)/delivered.Seconds(), "delivered/s")
	b.ReportMetric(float64(total*subsPer)/delivered.Seconds(), "deliveries/s")
	b.ReportMetric(0, "ns/op")
}
