package journal_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/journal"
)

// BenchmarkAppendDeliver appends b.N events (one producer per session) to a
// journal on a real SQLite file and waits until each of the 10 subscribers
// of every session has received all of its session's events. It reports
// events appended and delivered per second (every event reaches 10
// subscribers; all events are must-deliver, so none is coalesced) and the
// latency from Append to a subscriber receiving the event. A subscriber
// that falls too far behind is cut off and resubscribes from its last seq,
// as an SSE client does; "cutoffs" counts those.
//
//	go test -run '^$' -bench AppendDeliver -benchtime 200000x ./journal
//
// The unpaced runs measure throughput: producers append as fast as they
// can, so the queue is full and the latency is mostly time spent queued.
// The paced runs (rate=) append at a steady rate below capacity and
// measure the latency a client sees: commit (with its fsync) plus fan-out.
func BenchmarkAppendDeliver(b *testing.B) {
	for _, rate := range []int{0, 20000} {
		for _, sessions := range []int{1, 10} {
			name := fmt.Sprintf("sessions=%d/subscribers=10", sessions)
			if rate > 0 {
				name += fmt.Sprintf("/rate=%d", rate)
			}
			b.Run(name, func(b *testing.B) { benchAppendDeliver(b, sessions, 10, rate) })
		}
	}
}

// benchAppendDeliver: rate is events per second over all sessions, 0 for
// as fast as possible.
func benchAppendDeliver(b *testing.B, sessions, subsPer, rate int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%d", i)
	}
	st := newStore(b, ids...)
	j := journal.New(st, journal.Options{})
	defer j.Close(ctx)

	per := max(b.N/sessions, 1)
	total := per * sessions
	lat := make([][]time.Duration, sessions*subsPer)
	var subs sync.WaitGroup
	var cutoffs atomic.Int64
	errs := make(chan error, 2*sessions*subsPer)
	for si, id := range ids {
		for k := range subsPer {
			sub, err := j.Subscribe(ctx, id, 0)
			if err != nil {
				b.Fatal(err)
			}
			li := si*subsPer + k
			lat[li] = make([]time.Duration, 0, per)
			subs.Add(1)
			go func() {
				defer subs.Done()
				defer func() { sub.Close() }()
				var last int64
				for {
					ev, ok := <-sub.C
					if !ok {
						// Cut off for being too slow: reconnect after the
						// last event, as an SSE client does.
						if !errors.Is(sub.Err(), journal.ErrTooSlow) {
							errs <- fmt.Errorf("subscriber %d of %s ended: %v", k, id, sub.Err())
							return
						}
						cutoffs.Add(1)
						var err error
						if sub, err = j.Subscribe(ctx, id, last); err != nil {
							errs <- err
							return
						}
						continue
					}
					lat[li] = append(lat[li], time.Since(ev.Time))
					last = ev.Seq
					if ev.Seq == int64(per) {
						return
					}
				}
			}()
		}
	}

	cpu0 := cpuTime()
	b.ResetTimer()
	start := time.Now()
	var producers sync.WaitGroup
	for _, id := range ids {
		producers.Add(1)
		go func() {
			defer producers.Done()
			// Paced: every millisecond, the events due by then.
			var tick *time.Ticker
			perMS := float64(rate) / float64(sessions) / 1000
			if rate > 0 {
				tick = time.NewTicker(time.Millisecond)
				defer tick.Stop()
			}
			for i := range per {
				if tick != nil && float64(i) >= perMS*float64(time.Since(start).Milliseconds()) {
					<-tick.C
				}
				if _, err := j.Append(event.Event{Session: id, Turn: "t1",
					Data: event.AssistantMessage{Text: "a short assistant message, about one line long"}}); err != nil {
					errs <- fmt.Errorf("append %d to %s: %w", i, id, err)
					return
				}
			}
		}()
	}
	producers.Wait()
	appended := time.Since(start)
	subs.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}

	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	pct := func(p float64) float64 {
		return float64(all[min(len(all)-1, int(p*float64(len(all))))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(total)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(total)/appended.Seconds(), "appended/s")
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "deliveries/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(cpu.Microseconds())/float64(total), "cpu-µs/event")
	b.ReportMetric(float64(cutoffs.Load()), "cutoffs")
	b.ReportMetric(0, "ns/op")
}

// cpuTime is the CPU time (user+system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
