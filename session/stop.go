package session

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// StopRequest ends a session for good (Manager.Stop).
type StopRequest struct {
	// Reason is what the session.state event says ("" : stopped by
	// request).
	Reason string
	// Event, when not nil, is journaled just before the session stops:
	// why it ends (pr.merged, pr.closed).
	Event event.Payload
}

// maxStopReason bounds a stop's reason.
const maxStopReason = 1000

// Stop ends the session for good, as its max lifetime does: a running
// turn is cancelled (turn.cancelled), the agent is closed and the box
// destroyed, queued messages are dropped, and the session is stopped (its
// workspace and history stay until Delete; its branches are free for a new
// session). A suspended session is woken for it. It returns once the
// session has stopped, or ctx ends (the stop goes on). A session that has
// ended already is ErrConflict. With several nodes the owner stops it:
// another live node owning it is an *ElsewhereError (forward it there).
func (m *Manager) Stop(ctx context.Context, owner, id string, req StopRequest) error {
	if len(req.Reason) > maxStopReason {
		return &InputError{Problems: []string{fmt.Sprintf("reason: at most %d bytes", maxStopReason)}}
	}
	if strings.TrimSpace(req.Reason) == "" {
		req.Reason = "stopped by request"
	}
	s, err := m.session(ctx, owner, id)
	if err != nil {
		return err
	}
	if s.State.Ended() {
		return fmt.Errorf("session %s is %s already: %w", id, s.State, ErrConflict)
	}
	if err := m.refusing(); err != nil {
		return fmt.Errorf("stopping session %s: %w; try again when it is back", id, err)
	}
	unlock, err := m.claim(ctx, id)
	if err != nil {
		return fmt.Errorf("stopping session %s: %w", id, err)
	}
	m.mu.Lock()
	if m.closed || m.deleting[id] {
		m.mu.Unlock()
		unlock()
		return fmt.Errorf("stopping session %s: %w", id, ErrUnavailable)
	}
	r := m.runners[id]
	if r == nil {
		r = newRunner(m, id)
		m.runners[id] = r
		m.wg.Add(1)
		go r.run()
	}
	r.requestStop(&req)
	done := r.done
	m.mu.Unlock()
	unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("waiting for session %s to stop: %w (it is still stopping)", id, ctx.Err())
	}
	// The runner is gone: stopped, or it ended for another reason (the
	// server shuts down, the session was deleted or taken over).
	s, err = m.st.GetSession(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("session %s: %w (it was deleted)", id, ErrNotFound)
	case err != nil:
		return fmt.Errorf("reading session %s after stopping it: %w", id, err)
	case !s.State.Ended():
		return fmt.Errorf("session %s was not stopped (its runner ended first: the server may be shutting down): %w; try again", id, ErrUnavailable)
	}
	return nil
}

// errStopped cancels a turn whose session is being stopped (it counts as
// a cancel: the turn ends as turn.cancelled).
type errStopped struct{ reason string }

func (e *errStopped) Error() string { return "the session is being stopped: " + e.reason }
func (e *errStopped) Is(target error) bool {
	return target == errCancelled
}

// requestStop asks the runner to stop its session: the running turn is
// cancelled, and the loop stops the session before anything else. Called
// under Manager.mu.
func (r *runner) requestStop(req *StopRequest) {
	r.mu.Lock()
	if r.stopReq == nil {
		r.stopReq = req
	}
	r.paused = true // no queued message starts a turn meanwhile
	if r.turn != nil {
		r.turn.cancel(&errStopped{reason: req.Reason})
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// pendingStop is the stop asked for, if any; takeStop forgets it once
// it is done.
func (r *runner) pendingStop() *StopRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopReq
}

func (r *runner) takeStop() {
	r.mu.Lock()
	r.stopReq = nil
	r.mu.Unlock()
}

// stopAsked ends the session for req.
func (r *runner) stopAsked(req *StopRequest) error {
	if r.s.State.Ended() {
		return nil
	}
	if req.Event != nil {
		r.append(r.event("", req.Event))
	}
	return r.stop(req.Reason)
}
