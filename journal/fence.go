package journal

import (
	"context"
	"fmt"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// Fenced sessions (several nodes on one store: see store/leases.go and the
// package doc of session). The node that owns a session through a lease
// calls Fence with the lease's fence: from then on every event of that
// session appended here carries the fence it was appended under, and the
// writer stores those events with store.AppendEventsFenced, which refuses
// them (nothing written, store.ErrLeaseLost) once another node took the
// session over. The events refused, and those of the session still
// queued, are failed like those of a seq conflict (the counter is reloaded
// at the next Append), and the fence's lost function is called once, by
// the writer goroutine: the owner stops acting for the session. From then
// on (and after Unfence) the session's appends are refused with
// store.ErrLeaseLost until Fence is called again with a new lease: a
// session once fenced here is never written unfenced by this node, which
// could slip a stale owner's event into a free seq. AppendFenced and
// AppendSyncFenced carry a fence given by the caller instead of the
// session's current one, for a writer bound to one lease (a session
// runner: a runner of an older lease must not write under a newer one).
// Without a Fence call nothing changes: events are stored unfenced, as on
// one node.

// fenceState is a session's current fence and whom to tell when it is
// lost; f.Epoch -1 once it is lost or given up (appends are refused).
type fenceState struct {
	f    store.Fence
	lost func(error)
}

// fencedStore is what fenced appends need of the store.
type fencedStore interface {
	AppendEventsFenced(ctx context.Context, fences []store.Fence, evs []event.Event, msgs []*store.Message) error
}

// Fence makes the events of f.Session appended from now on carry f (see
// above). lost is called (once, by the writer goroutine, with the store's
// error) if the store refuses them; it must return at once and must not
// wait for the journal. A fence with a new epoch reloads the session's
// counter from the store at the next Append, since the session's previous
// owner may have written since this journal last did.
func (j *Journal) Fence(f store.Fence, lost func(error)) error {
	if _, ok := j.st.(fencedStore); !ok {
		return fmt.Errorf("journal: fencing session %s: the store cannot write fenced events", f.Session)
	}
	if f.Session == "" || f.Epoch <= 0 {
		return fmt.Errorf("journal: fence %+v: want a session and an epoch > 0", f)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	old, had := j.fences[f.Session]
	j.fences[f.Session] = fenceState{f: f, lost: lost}
	if !had || old.f.Epoch != f.Epoch {
		j.reloadLocked(f.Session)
	}
	return nil
}

// Unfence forgets the session's fence (its lease was released or lost):
// its counter is reloaded at the next Append, for another node may write
// the session's events from now on.
func (j *Journal) Unfence(session string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.fences[session]; !ok {
		return
	}
	j.fences[session] = fenceState{f: store.Fence{Session: session, Epoch: -1}}
	j.reloadLocked(session)
}

// AppendFenced is Append under f (see Fence) whatever the session's
// current fence.
func (j *Journal) AppendFenced(f store.Fence, ev event.Event) (int64, error) {
	ev, err := j.append(j.ctx, ev, nil, nil, &f)
	return ev.Seq, err
}

// AppendSyncFenced is AppendSync under f (see Fence) whatever the
// session's current fence.
func (j *Journal) AppendSyncFenced(ctx context.Context, f store.Fence, ev event.Event) (event.Event, error) {
	return j.appendSync(ctx, ev, &f)
}

// reloadLocked makes the next Append of session read its last seq from
// the store, unless some of its events are still queued (their seqs follow
// the counter; if they are refused, the counter is reloaded then).
func (j *Journal) reloadLocked(session string) {
	s := j.sessions[session]
	if s == nil {
		return
	}
	// Pieces gathered under the old fence are not stored under a new one
	// (nor after the lease is gone): they were live only.
	j.dropRunLocked(s)
	if s.pending == 0 {
		s.loaded = false
		s.gen++
	}
}

// leaseLost tells the owner of f that its lease is gone (once: the fence
// is forgotten).
func (j *Journal) leaseLost(f store.Fence, err error) {
	j.mu.Lock()
	cur, ok := j.fences[f.Session]
	if ok && cur.f.Epoch <= f.Epoch && cur.f.Epoch > 0 {
		j.fences[f.Session] = fenceState{f: store.Fence{Session: f.Session, Epoch: -1}}
	} else {
		ok = false
	}
	j.mu.Unlock()
	if ok && cur.lost != nil {
		cur.lost(err)
	}
}
