package journal

import (
	"encoding/json"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// Live pieces (event/live.go has the rules readers rely on).
//
// A coalescable event appended without a waiter (Append, AppendFenced:
// token deltas, tool output, terminal bytes) takes no seq. It joins the
// session's run — the pieces of one stream not stored yet — and is queued
// as a live piece: Seq the seq of the session's last event queued before
// it, Live its number in the run (1, 2, ...). The writer hands it to the
// subscribers and the Publisher in queue order, like any event, but does
// not store it. The run is stored as one event (the pieces joined, the
// next seq, the last piece's time, the run's fence) when:
//
//   - any other event of the session is appended (the run's event goes
//     first, so stored events keep the order they were appended in), a
//     piece of another stream, or one under another fence;
//   - StoreEvery has passed since the run's first piece (the writer's
//     timer), or its content reached StoreBytes;
//   - Flush of the session, or Close.
//
//	pieces:   Append(delta "a")  Append(delta "b")   Append(tool.started)
//	queue:    live 41.1 "a"      live 41.2 "b"       stored 42 "ab", stored 43
//
// So the store gets one event per stream per StoreEvery instead of one
// per piece, seqs stay 1, 2, 3, ... with no gap, and every piece still
// reaches the live readers as soon as the writer takes it (the same
// latency as a stored event: a piece waits in the queue behind the
// events before it).
//
// A run whose session's counter is reset (a seq conflict, a lost lease, a
// new fence) or that is forgotten (Forget) is dropped: its pieces were
// live only. A node that dies loses the pieces of its open runs (at most
// StoreEvery of output per stream); the complete events that follow on the
// next owner (assistant.message, tool.finished, turn.failed) are what a
// reader keeps. Events appended with a waiter (AppendSync, AppendMessage)
// are stored one by one whatever their type.

// DefaultStoreEvery is Options.StoreEvery's default.
const DefaultStoreEvery = time.Second

// run is a session's live pieces not stored yet.
type run struct {
	ev    event.Event // the pieces joined; Seq: the stored event before them; Live: how many
	fence store.Fence
	due   time.Time // when the writer stores it at the latest
	size  int       // bytes of content
}

// livePieceLocked queues ev (b: its payload encoded) as a live piece of
// s's run under fence f and returns it as queued (Seq, Live set). Called
// with Journal.mu held, s loaded.
func (j *Journal) livePieceLocked(s *sessionState, ev event.Event, f store.Fence, b []byte) event.Event {
	if r := s.run; r != nil {
		joined, ok := event.Join(r.ev, ev)
		if ok && r.fence == f {
			ev.Seq, ev.Live = r.ev.Seq, r.ev.Live+1
			joined.Seq, joined.Live = ev.Seq, ev.Live
			r.ev = joined
			r.size += event.PieceSize(ev.Data)
		} else {
			j.storeRunLocked(s)
		}
	}
	if s.run == nil {
		ev.Seq, ev.Live = s.next-1, 1
		s.run = &run{ev: ev, fence: f, due: time.Now().Add(j.opt.StoreEvery), size: event.PieceSize(ev.Data)}
		j.runs[s] = struct{}{}
	}
	queued := ev
	queued.Data = encoded{ev.Data, b}
	s.pending++
	j.queue = append(j.queue, entry{ev: queued, s: s, fence: f})
	if s.run.size >= j.opt.StoreBytes {
		j.storeRunLocked(s)
	}
	return ev
}

// storeRunLocked queues s's run as one stored event with the next seq.
// Called with Journal.mu held.
func (j *Journal) storeRunLocked(s *sessionState) {
	r := s.run
	j.dropRunLocked(s)
	ev := r.ev
	ev.Live = 0
	ev.Seq = s.next
	b, err := json.Marshal(ev.Data)
	if err != nil {
		// Each piece was encoded when appended; their join cannot fail.
		j.log.Error("encoding a run of live pieces; not stored", "session", ev.Session, "type", ev.Type(), "err", err)
		return
	}
	s.next++
	ev.Data = encoded{ev.Data, b}
	s.pending++
	j.queue = append(j.queue, entry{ev: ev, s: s, fence: r.fence})
}

// dropRunLocked forgets s's run. Called with Journal.mu held.
func (j *Journal) dropRunLocked(s *sessionState) {
	s.run = nil
	delete(j.runs, s)
}

// storeDueLocked stores the runs due by now and returns when the next of
// the others is due (zero: none is open). Called by the writer with
// Journal.mu held.
func (j *Journal) storeDueLocked(now time.Time) time.Time {
	var next time.Time
	for s := range j.runs {
		switch due := s.run.due; {
		case !due.After(now):
			j.storeRunLocked(s)
		case next.IsZero() || due.Before(next):
			next = due
		}
	}
	return next
}

// storeRunsLocked stores every open run (Close). Called with Journal.mu
// held.
func (j *Journal) storeRunsLocked() {
	for s := range j.runs {
		j.storeRunLocked(s)
	}
}

// wait blocks the writer until it is signalled or, when due is not zero,
// until due.
func (j *Journal) wait(due time.Time) {
	if due.IsZero() {
		<-j.wake
		return
	}
	t := time.NewTimer(time.Until(due))
	defer t.Stop()
	select {
	case <-j.wake:
	case <-t.C:
	}
}
