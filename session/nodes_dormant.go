package session

import (
	"fmt"

	"github.com/harvest-dev/harvest/store"
)

// Lazy takeover: a live session that is idle (no turn to recover, no
// queued message) and whose workspace is not on this node's disk (it was
// carried from another machine: nodes_carry.go) is taken over as a lease
// only. Its runner forgets the old box (destroyed if this machine can
// reach it) and waits, dormant: no restore of the checkpoint, no disk, no
// box. The first message — or a request that needs the box (a shell, the
// changes: Manager.Box) — makes it provision: restore the workspace, start
// a box, run the turn. An idle timeout while dormant suspends it (nothing
// to carry: the checkpoint is the newest copy). So taking over many idle
// sessions costs their leases, not their boxes and disks; a session that
// is sent to pays the restore then, as a suspended one does.
//
// dormant is set and cleared on the run goroutine; Box reads it (and sets
// wantBox) from others.

// sleepAfterMove makes the runner dormant: the old box's handle is
// dropped from the session (it was another machine's).
func (r *runner) sleepAfterMove() error {
	if len(r.s.Sandbox) > 0 {
		s, err := r.d.st.UpdateSession(r.ctx, r.id, func(s *store.Session) error {
			s.Sandbox = nil
			return nil
		})
		if err != nil {
			return fmt.Errorf("session %s: forgetting the box it had on another node: %w", r.id, err)
		}
		r.s = r.d.host.withDefaults(s)
	}
	r.wantBox.Store(false) // a request of an earlier box's time
	r.dormant.Store(true)
	r.log.Info("took over an idle session whose workspace is on another node's disk: it is restored, and a box started, at the next message")
	return nil
}

// dormantWait waits for a dormant session's first message (or a request
// for its box), then moves it to provisioning, which restores its
// workspace here; an idle timeout suspends it instead.
func (r *runner) dormantWait() error {
	work, err := r.hasWork()
	if err != nil {
		return err
	}
	if work || r.wantBox.Swap(false) {
		if err := r.setState(r.ctx, store.StateProvisioning, "the session moved from another node; restoring its workspace here", nil); err != nil {
			return err
		}
		r.dormant.Store(false)
		return nil
	}
	idleC, stopIdle := r.d.clock.At(r.s.ActiveAt.Add(r.s.Limits.IdleTimeout))
	defer stopIdle()
	lifeC, stopLife := r.d.clock.At(r.lifetimeEnd())
	defer stopLife()
	select {
	case <-r.ctx.Done():
	case <-r.wake:
	case <-lifeC: // the loop stops the session
	case <-idleC:
		// Nothing of it is here to stop or carry: its checkpoint is its
		// newest copy.
		r.dropLease()
		if err := r.setState(r.ctx, store.StateSuspended, fmt.Sprintf("idle for %s: the workspace and the conversation are kept, and the next message resumes them", r.s.Limits.IdleTimeout), nil); err != nil {
			return err
		}
		r.dormant.Store(false)
	}
	return nil
}

// needBox is Box's call on a dormant runner: it asks the runner to
// provision, and says whether it was dormant (the box is not there yet).
func (r *runner) needBox() bool {
	if !r.dormant.Load() {
		return false
	}
	r.wantBox.Store(true)
	r.notify(wakeOpts{})
	return true
}
