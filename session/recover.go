package session

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/disk"
	"github.com/harvest-dev/harvest/store"
)

// Recover resumes what a previous server left (see the package doc): it
// mounts again the disks of the live and suspended sessions (after a
// reboot), destroys the boxes of its sessions that no session owns, clears
// the handles of ended sessions, lets go of their disks, and starts a
// runner for every live session and every suspended one with queued
// messages. The runners reattach or replace
// boxes and mark interrupted turns as they start. Call it once, before
// serving.
//
// It fails only when it cannot read the sessions. A box it cannot list or
// destroy (a backend that is down) is logged and left: every box ends by
// itself at its deadline (the session's max lifetime and a margin).
func (m *Manager) Recover(ctx context.Context) error {
	if m.isClosed() {
		return fmt.Errorf("recovering sessions: %w", ErrUnavailable)
	}
	m.startRefresh()
	m.startDiskPool(ctx)
	m.startJanitor()
	if m.node != nil {
		// Several nodes: the keeper takes over, now and whenever a lease
		// runs out, the sessions nobody owns, one at a time, each as
		// below. Boxes are not reaped: another node's runner may be
		// starting one whose handle is not stored yet.
		m.startKeeper()
		return nil
	}
	all, err := m.st.ListSessions(ctx, store.SessionFilter{})
	if err != nil {
		return fmt.Errorf("recovering sessions: listing them: %w", err)
	}
	// Before any runner starts: after a reboot, no workspace is looked at
	// on an empty mount point (disk.go).
	m.remountDisks(ctx, all)
	var errs []error
	owned, known := map[string]bool{}, map[string]bool{}
	names := []string{m.cfg.DefaultBackend}
	for _, s := range all {
		known[s.ID] = true
		if !slices.Contains(names, s.Backend) {
			names = append(names, s.Backend)
		}
		if len(s.Sandbox) == 0 {
			continue
		}
		h, err := decodeHandle(s.Sandbox)
		if err != nil {
			errs = append(errs, fmt.Errorf("session %s: %w", s.ID, err))
			continue
		}
		if s.State.Live() {
			owned[h.ID] = true
			continue
		}
		// An ended or suspended session keeps no box.
		if err := m.destroyHandle(ctx, s.Backend, s.Sandbox); err != nil {
			errs = append(errs, fmt.Errorf("session %s: %w", s.ID, err))
			continue
		}
		if _, err := m.st.UpdateSession(ctx, s.ID, func(s *store.Session) error { s.Sandbox = nil; return nil }); err != nil {
			errs = append(errs, fmt.Errorf("session %s: %w", s.ID, err))
		}
	}
	for _, name := range names {
		if err := m.reapOrphans(ctx, name, owned, known); err != nil {
			errs = append(errs, err)
		}
	}
	// Ended sessions' disks, their boxes gone: a crash between the end
	// and letting go of the disk, or an older server's.
	attached, err := disk.Attached()
	if err != nil {
		attached = nil // endDisk looks for itself
	}
	for _, s := range all {
		if !s.State.Ended() {
			continue
		}
		if err := m.endDisk(s, attached); err != nil {
			errs = append(errs, fmt.Errorf("session %s: %w", s.ID, err))
		}
	}
	for _, s := range all {
		switch {
		case s.State.Live():
			m.wake(s.ID, wakeOpts{start: true})
		case s.State == store.StateSuspended:
			q, err := m.st.Messages(ctx, s.ID, store.MessageQueued)
			if err != nil {
				errs = append(errs, fmt.Errorf("session %s: %w", s.ID, err))
				continue
			}
			if len(q) > 0 {
				m.wake(s.ID, wakeOpts{start: true})
			}
		}
	}
	for _, err := range errs {
		m.log.Error("recovering sessions (the others were resumed)", "err", err)
	}
	return nil
}

// reapOrphans destroys the boxes of a backend that are named for one of our
// sessions (known) but that no session owns and no runner is starting. A
// box named for a session this store does not have is left alone: it is
// another server's sharing the backend's run dir.
func (m *Manager) reapOrphans(ctx context.Context, backend string, owned, known map[string]bool) error {
	p, err := m.provider(backend)
	if err != nil {
		return fmt.Errorf("looking for orphaned boxes on the %s backend: %w", backend, err)
	}
	l, ok := p.(sandbox.Lister)
	if !ok {
		m.log.Warn("the backend cannot list its boxes: boxes a crash left behind are not reaped", "backend", backend)
		return nil
	}
	hs, err := l.List(ctx)
	if err != nil {
		return fmt.Errorf("listing the boxes of the %s backend: %w", backend, err)
	}
	busy := map[string]bool{}
	m.mu.Lock()
	for _, r := range m.runners {
		if id := r.heldBox(); id != "" {
			busy[id] = true
		}
	}
	m.mu.Unlock()
	var errs []error
	for _, h := range hs {
		if !known[boxSession(h.ID)] || owned[h.ID] || busy[h.ID] {
			continue
		}
		m.log.Info("destroying an orphaned box", "box", h.ID, "backend", backend)
		if err := p.Destroy(ctx, h); err != nil {
			errs = append(errs, fmt.Errorf("destroying orphaned box %s: %w (remove it with: harvest sandbox rm %s)", h.ID, err, h.ID))
		}
	}
	return errors.Join(errs...)
}
