package slackbot

import (
	"context"
	"errors"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// Several nodes: the rule is the package doc's (doc.go, "Several nodes").

// ownership is who holds a session's lease, as this node sees it.
type ownership int

const (
	ownedHere ownership = iota
	ownedByNobody
	ownedElsewhere
)

// owner says who holds session id's lease; with one node (Config.Node
// ""), this node.
func (b *Bot) owner(ctx context.Context, id string) (ownership, error) {
	if b.cfg.Node == "" {
		return ownedHere, nil
	}
	l, err := b.st.GetLease(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return ownedByNobody, nil
	case err != nil:
		return ownedByNobody, err
	case l.Node == "":
		return ownedByNobody, nil
	case l.Node == b.cfg.Node:
		return ownedHere, nil
	}
	return ownedElsewhere, nil
}

// watchIfOwner starts a thread's watcher unless another node holds the
// session's lease (its watcher is that node's).
func (b *Bot) watchIfOwner(ctx context.Context, th *store.SlackThread) {
	o, err := b.owner(ctx, th.Session)
	if err != nil {
		b.log.Warn("reading a Slack session's lease", "session", th.Session, "err", err)
		return // the next round of placeWatchers decides
	}
	if o != ownedElsewhere {
		b.watchSession(th, th.Shown)
	}
}

// mayPost is false when another node holds the session's lease: its
// watcher posts instead (a store that does not answer: post, as with one
// node).
func (w *watch) mayPost(ctx context.Context) bool {
	o, err := w.b.owner(ctx, w.th.Session)
	if err != nil || o != ownedElsewhere {
		return true
	}
	w.b.log.Info("another node owns the session now: its watcher takes the thread over", "session", w.th.Session)
	w.mu.Lock()
	if w.cancel != nil {
		w.cancel()
	}
	w.mu.Unlock()
	return false
}

// placeWatchers keeps the watchers of this node's sessions, every
// NodeEvery, until the Bot closes (several nodes only).
func (b *Bot) placeWatchers() {
	t := time.NewTicker(b.cfg.NodeEvery)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(b.ctx, b.cfg.NodeEvery+5*time.Second)
		if err := b.placeOnce(ctx); err != nil && b.ctx.Err() == nil {
			b.log.Warn("placing the Slack threads' watchers", "err", err)
		}
		cancel()
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// placeOnce starts the watchers of the live Slack sessions this node
// holds the lease of and stops those another node holds.
func (b *Bot) placeOnce(ctx context.Context) error {
	leases, err := b.st.NodeLeases(ctx, b.cfg.Node)
	if err != nil {
		return err
	}
	mine := map[string]bool{}
	for _, l := range leases {
		mine[l.Session] = true
	}
	ss, err := b.st.ListSessions(ctx, store.SessionFilter{Owner: Owner, States: liveStates})
	if err != nil {
		return err
	}
	for _, s := range ss {
		b.mu.Lock()
		w := b.watching[s.ID]
		b.mu.Unlock()
		switch {
		case mine[s.ID] && w == nil:
			th, err := b.st.SlackThread(ctx, s.ID)
			if err != nil {
				b.log.Warn("a Slack session without its thread", "session", s.ID, "err", err)
				continue
			}
			b.log.Info("watching a Slack thread this node owns the session of", "session", s.ID, "shown", th.Shown)
			b.watchSession(th, th.Shown)
		case !mine[s.ID] && w != nil:
			if o, err := b.owner(ctx, s.ID); err == nil && o == ownedElsewhere {
				b.log.Info("another node owns the session now: its watcher takes the thread over", "session", s.ID)
				w.mu.Lock()
				if w.cancel != nil {
					w.cancel()
				}
				w.mu.Unlock()
			}
		}
	}
	return nil
}
