package cluster

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// Who owns a session, as the forwarder sees it, and how it notices that
// the owner changed: see "Following the owner" in the package doc.

// place is where a session's requests go.
type place int

const (
	here     place = iota // this node owns it, or nobody does: this node's API
	there                 // a live node owns it: forward to it
	orphaned              // a node that is not live holds an unexpired lease (or an expired one not taken over yet)
)

// owner is a session's lease and where its requests go.
type owner struct {
	lease store.Lease
	node  store.Node // when there
	place place
}

// moved says whether the lease now is not the one the forward was sent
// under: another node, a new epoch, or released.
func moved(was, now store.Lease) bool {
	return now.Node != was.Node || now.Epoch != was.Epoch
}

// resolve reads who owns session id now (the lease, then the live nodes:
// two store calls, within the request's budget), not from the cache: a
// stale answer would send the request to the old owner.
func (f *forwarder) resolve(ctx context.Context, id string) (owner, error) {
	l, err := f.leases.get(ctx, id, true)
	if errors.Is(err, store.ErrNotFound) {
		return owner{place: here}, nil
	}
	if err != nil {
		return owner{}, err
	}
	if l.Node == "" || l.Node == f.self {
		return owner{lease: l, place: here}, nil
	}
	nodes, err := f.st.ListNodes(ctx)
	if err != nil {
		return owner{}, err
	}
	for _, n := range nodes {
		if n.ID == l.Node && n.Addr != "" {
			return owner{lease: l, node: n, place: there}, nil
		}
	}
	return owner{lease: l, place: orphaned}, nil
}

// watch cancels ctx with errLeaseMoved once session id's lease is no
// longer was (read every f.poll, through the cache); stop ends the watch
// and waits for its goroutine.
func (f *forwarder) watch(ctx context.Context, cancel context.CancelCauseFunc, id string, was store.Lease) (stop func()) {
	wctx, end := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(f.poll)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			// A budget of its own: the store not answering is not a move.
			l, err := f.leases.get(store.WithBudget(context.WithoutCancel(wctx), f.poll), id, false)
			if err == nil && moved(was, l) {
				cancel(errLeaseMoved)
				return
			}
		}
	}()
	return func() { end(); <-done }
}

// errLeaseMoved cancels a forward whose target lost the session's lease.
var errLeaseMoved = errors.New("the session's lease moved to another node")

// leaseCache shares the reads of a session's lease among the requests
// watching it (every follower of a session through this node): at most
// one read per session every maxAge, whatever the number of watchers.
type leaseCache struct {
	st     store.Store
	maxAge time.Duration

	mu sync.Mutex
	m  map[string]cachedLease
}

type cachedLease struct {
	l  store.Lease
	at time.Time
}

// get is session id's lease, read at most maxAge ago (fresh: now).
func (c *leaseCache) get(ctx context.Context, id string, fresh bool) (store.Lease, error) {
	now := time.Now()
	if !fresh {
		c.mu.Lock()
		e, ok := c.m[id]
		c.mu.Unlock()
		if ok && now.Sub(e.at) < c.maxAge {
			return e.l, nil
		}
	}
	l, err := c.st.GetLease(ctx, id)
	if err != nil {
		return l, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]cachedLease{}
	}
	if len(c.m) > 4096 {
		// Forget what nobody watched lately.
		for k, e := range c.m {
			if now.Sub(e.at) > time.Minute {
				delete(c.m, k)
			}
		}
	}
	c.m[id] = cachedLease{l: l, at: now}
	return l, nil
}
