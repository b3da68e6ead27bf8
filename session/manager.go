package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/llm/providers"
	"github.com/harvest-dev/harvest/modelproxy"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/backends"
	"github.com/harvest-dev/harvest/store"
)

// Manager runs the sessions of one Harvest server. Its methods are safe for
// concurrent use. See the package doc.
type Manager struct {
	cfg   Config
	st    store.Store
	j     *journal.Journal
	clock Clock
	log   *slog.Logger

	// base is every runner's parent context; Close cancels it with
	// errShutdown.
	base    context.Context
	stopAll context.CancelCauseFunc
	wg      sync.WaitGroup // runners
	builds  sync.WaitGroup // environment builds (Prepare) and the refresh loop
	// refreshed counts the refresh loop's rounds (for tests).
	refreshed   atomic.Int64
	refreshOnce sync.Once

	gates gates // per-session: Send reads, Delete writes
	keys  gates // per (session, sender, idempotency key): one keyed Send at a time
	late  lateKeys
	disks diskState

	mu       sync.Mutex
	closed   bool
	draining bool          // Drain: no new sessions, messages or turns
	turns    int           // turns running (beginTurn .. endTurn)
	drained  chan struct{} // closed once draining and no turn runs
	runners  map[string]*runner
	deleting map[string]bool

	// node: several-node mode (Config.Node); nil on a lone server.
	node *nodeState
	// carry carries workspaces between nodes (nodes_carry.go); nil on a lone
	// server.
	carry *carrier

	// counts are the running counts of Stats.
	counts struct {
		leasesTaken, leasesRenewed, leasesLost, takenOver atomic.Uint64
	}
	// gc is the janitor's (nodes_gc.go).
	gc gcState
	// ret is event retention's (nodes_retention.go).
	ret retentionState
	// traces holds the trace of each queued message whose sender was
	// traced, until a turn takes it (tracing.go).
	traces traceBook

	pmu       sync.Mutex
	providers map[string]sandbox.Provider
	owned     []io.Closer // providers the Manager opened itself
	clients   map[string]*llm.Client
	proxies   map[string]*modelproxy.Proxy // by endpoint name
}

// NewManager returns a Manager. It starts nothing: call Recover, then serve.
func NewManager(cfg Config) (*Manager, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	base, stop := context.WithCancelCause(context.Background())
	var node *nodeState
	if cfg.Node != nil {
		node = &nodeState{cfg: *cfg.Node, held: map[string]*held{}, kick: make(chan struct{}, 1),
			beating: make(chan struct{}, 1), kept: make(chan struct{}), moved: -1, base: time.Now()}
	}
	m := &Manager{node: node,
		cfg: cfg, st: cfg.Store, j: cfg.Journal, clock: cfg.Clock,
		log:  cfg.Logger.With("component", "session"),
		base: base, stopAll: stop, drained: make(chan struct{}),
		runners: map[string]*runner{}, deleting: map[string]bool{},
		providers: map[string]sandbox.Provider{}, clients: map[string]*llm.Client{}, proxies: map[string]*modelproxy.Proxy{},
	}
	carry, err := newCarrier(m)
	if err != nil {
		stop(err)
		return nil, err
	}
	m.carry = carry
	return m, nil
}

// Causes of a runner's or a turn's cancellation.
var (
	errShutdown  = errors.New("harvest is shutting down")
	errDeleted   = errors.New("the session was deleted")
	errCancelled = errors.New("cancelled by the user")
	errWatchdog  = errors.New("turn watchdog")
	errLifetime  = errors.New("the session reached its max lifetime")
	errLockLost  = errors.New("the session lock was lost to another run")
)

// interruptError cancels a turn for a newer message.
type interruptError struct{ message string }

func (e *interruptError) Error() string { return "interrupted by message " + e.message }

// Get returns a session and its queued messages. owner "" is an admin, who
// sees every session; anyone else sees only their own (another's is
// ErrNotFound).
func (m *Manager) Get(ctx context.Context, owner, id string) (*View, error) {
	s, err := m.session(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	q, err := m.st.Messages(ctx, id, store.MessageQueued)
	if err != nil {
		return nil, fmt.Errorf("reading the queue of session %s: %w", id, err)
	}
	if q == nil {
		q = []*store.Message{}
	}
	return &View{Session: s, Queue: q}, nil
}

// List lists sessions, newest first: an owner's own, or (owner "") all that
// match f.
func (m *Manager) List(ctx context.Context, owner string, f store.SessionFilter) ([]*store.Session, error) {
	if owner != "" {
		f.Owner = owner
	}
	return m.st.ListSessions(ctx, f)
}

// Cancel ends the running turn (turn.cancelled), not the session, and waits
// until the session is idle again (or ctx ends). Queued messages stay
// queued, paused until the next message arrives. With no turn running it
// only pauses the queue.
func (m *Manager) Cancel(ctx context.Context, owner, id string) error {
	s, err := m.session(ctx, owner, id)
	if err != nil {
		return err
	}
	if s.State.Ended() {
		return fmt.Errorf("session %s is %s: %w", id, s.State, ErrConflict)
	}
	m.mu.Lock()
	r := m.runners[id]
	m.mu.Unlock()
	if r == nil {
		return nil
	}
	done := r.cancelTurn()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the turn of session %s to end: %w (it is still being cancelled)", id, ctx.Err())
	}
}

// Delete stops the session's runner, destroys its box, removes its
// workspaces, its lock and its rows (messages and events included), and
// ends its event subscriptions.
func (m *Manager) Delete(ctx context.Context, owner, id string) error {
	if _, err := m.session(ctx, owner, id); err != nil {
		return err
	}
	// With several nodes, only the owner deletes (no node takes the
	// session over meanwhile: this one holds its lease).
	unlock, err := m.claim(ctx, id)
	if err != nil {
		return fmt.Errorf("deleting session %s: %w", id, err)
	}
	unlock()
	defer m.gates.lock(id)()
	m.mu.Lock()
	if m.deleting[id] {
		m.mu.Unlock()
		return fmt.Errorf("session %s: %w (it is being deleted)", id, ErrNotFound)
	}
	m.deleting[id] = true
	r := m.runners[id]
	m.mu.Unlock()
	m.traces.forget(id)
	defer func() {
		m.mu.Lock()
		delete(m.deleting, id)
		m.mu.Unlock()
	}()
	if r != nil {
		r.cancel(errDeleted)
		select {
		case <-r.done:
		case <-ctx.Done():
			return fmt.Errorf("deleting session %s: waiting for its runner to stop: %w; try again", id, ctx.Err())
		}
	}
	s, err := m.st.GetSession(ctx, id)
	if err != nil {
		return err
	}
	if len(s.Sandbox) > 0 {
		if err := m.destroyHandle(ctx, s.Backend, s.Sandbox); err != nil {
			return fmt.Errorf("deleting session %s: %w; try again", id, err)
		}
	}
	if err := m.removeDisk(s); err != nil {
		return fmt.Errorf("deleting session %s: %w; try again", id, err)
	}
	dir, err := WorkspaceDir(m.cfg.DataDir, Scope{Session: id})
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("deleting session %s: removing its workspaces: %w", id, err)
	}
	if err := m.st.ForceUnlock(ctx, lockKey(id)); err != nil {
		return fmt.Errorf("deleting session %s: releasing its lock: %w", id, err)
	}
	if err := m.leaveWorkflow(ctx, s); err != nil {
		return fmt.Errorf("deleting session %s: %w; try again", id, err)
	}
	if err := m.j.Flush(ctx, id); err != nil {
		return fmt.Errorf("deleting session %s: writing its last events: %w", id, err)
	}
	// Its checkpoint's manifest goes with it (its packs, which other
	// checkpoints may share, are the sweep's).
	var manifest string
	if m.carry != nil {
		if cp, err := m.st.GetCheckpoint(ctx, id); err == nil {
			manifest = cp.ManifestObject
		}
	}
	if err := m.st.DeleteSession(ctx, id); err != nil {
		return fmt.Errorf("deleting session %s: %w", id, err)
	}
	if m.carry != nil {
		m.carry.dropManifest(ctx, manifest)
	}
	m.j.Forget(id)
	if m.node != nil {
		m.mu.Lock()
		delete(m.node.held, id)
		m.mu.Unlock()
		m.j.Unfence(id)
		m.kickKeeper()
	}
	return nil
}

// Subscribe streams the session's events with seq > after: the stored ones,
// then live ones. See journal.Subscription.
func (m *Manager) Subscribe(ctx context.Context, owner, id string, after int64) (*journal.Subscription, error) {
	if _, err := m.session(ctx, owner, id); err != nil {
		return nil, err
	}
	return m.j.Subscribe(ctx, id, after)
}

// Unlock force-releases the lock the session's runs take (its own, or its
// sequential workflow's), whoever holds it (an admin's way out of a lock
// whose holder is known to be dead), and wakes the session's runner.
func (m *Manager) Unlock(ctx context.Context, id string) error {
	s, err := m.session(ctx, "", id)
	if err != nil {
		return err
	}
	if err := m.st.ForceUnlock(ctx, LockKeyOf(s)); err != nil {
		return fmt.Errorf("unlocking session %s: %w", id, err)
	}
	m.mu.Lock()
	if r := m.runners[id]; r != nil {
		r.notify(wakeOpts{})
	}
	m.mu.Unlock()
	return nil
}

// Close stops every runner without losing anything (see the package doc:
// running turns end as turn.failed kind "interrupted", boxes are left
// running for the next server to reattach, queued messages stay queued)
// and waits for them, or for ctx. Later calls are refused with
// ErrUnavailable. Close the journal after it.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	m.stopAll(errShutdown)
	defer m.closeDiskPool() // pool disks never outlive the server
	done := make(chan struct{})
	go func() {
		m.wg.Wait()
		m.builds.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("closing sessions: runners still stopping: %w", ctx.Err())
	}
	m.pmu.Lock()
	owned := m.owned
	m.owned = nil
	m.pmu.Unlock()
	for _, c := range owned {
		c.Close()
	}
	return nil
}

// StopsBoxes reports whether Close destroys the boxes
// (Config.StopBoxesOnExit) rather than leaving them to the next server.
func (m *Manager) StopsBoxes() bool { return m.cfg.StopBoxesOnExit }

// Drain makes the Manager take no new work, for a planned restart: Create
// and Send are refused with ErrUnavailable, and no runner starts a turn
// (queued messages stay queued, for the next server). Running turns go on
// to their end. The channel it returns is closed once no turn runs; then
// (or when the grace the caller gives them is over) call Close, which
// interrupts what still runs. Reading, subscribing, cancelling and
// deleting work as before. Calling it again returns the same channel.
func (m *Manager) Drain() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.draining {
		m.draining = true
		m.log.Info("draining: no new sessions, messages or turns; waiting for the running turns", "turns", m.turns)
		if m.turns == 0 {
			close(m.drained)
		}
	}
	return m.drained
}

// beginTurn counts a turn that starts, unless the Manager drains.
func (m *Manager) beginTurn() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.draining {
		return false
	}
	m.turns++
	return true
}

// endTurn counts a turn that ended (the session is idle again).
func (m *Manager) endTurn() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.turns--
	if m.draining && m.turns == 0 {
		close(m.drained)
	}
}

// Draining reports whether Drain was called.
func (m *Manager) Draining() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.draining
}

// refusing says why new work is refused (ErrUnavailable), or nil.
func (m *Manager) refusing() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return fmt.Errorf("%w: Harvest is shutting down", ErrUnavailable)
	case m.draining:
		return fmt.Errorf("%w: Harvest is restarting (it lets the running turns finish and takes no new work meanwhile)", ErrUnavailable)
	}
	return nil
}

func (m *Manager) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

func (m *Manager) isDeleting(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deleting[id]
}

// session reads a session the owner may see.
func (m *Manager) session(ctx context.Context, owner, id string) (*store.Session, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("session %q: %w (session ids look like s-abcdefghijklmnop)", id, ErrNotFound)
	}
	s, err := m.st.GetSession(ctx, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("session %s: %w", id, ErrNotFound)
		}
		return nil, fmt.Errorf("reading session %s: %w", id, err)
	}
	if owner != "" && s.Owner != owner {
		return nil, fmt.Errorf("session %s: %w", id, ErrNotFound)
	}
	s.Limits, _ = m.cfg.limits(s.Limits)
	return s, nil
}

// withDefaults gives the zero limits of s (a row written by someone else
// than Create) the defaults, in memory, and its repositories' paths on
// this node: a runner's view of its session.
func (m *Manager) withDefaults(s *store.Session) *store.Session {
	s.Limits, _ = m.cfg.limits(s.Limits)
	// A session's repositories are where this node keeps them: with
	// several nodes, the one that created it may have another data
	// directory (its workspace is carried here: nodes_carry.go).
	if s.Collab.Workflow == "" {
		if dir, err := WorkspaceDir(m.cfg.DataDir, Scope{Session: s.ID}); err == nil {
			for i := range s.Repos {
				s.Repos[i].Path = filepath.Join(dir, s.Repos[i].Name)
			}
		}
	}
	return s
}

// wakeOpts says why a runner is woken.
type wakeOpts struct {
	// unpause: a new message arrived; a queue paused by Cancel goes on.
	unpause bool
	// interrupt: this message cancels the running turn (if that turn took
	// an earlier message).
	interrupt *store.Message
	// start: start a runner if the session has none.
	start bool
}

var wakeNew = wakeOpts{unpause: true, start: true}

// wake tells the session's runner to look at its session again, starting
// one when there is none (and w.start).
func (m *Manager) wake(id string, w wakeOpts) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.deleting[id] {
		return
	}
	r := m.runners[id]
	if r == nil {
		if !w.start {
			return
		}
		if m.node != nil && m.node.held[id] == nil {
			return // not ours: its owner runs it (or the takeover will)
		}
		r = newRunner(m, id)
		m.runners[id] = r
		m.wg.Add(1)
		go r.run()
	}
	r.notify(w)
}

// provider opens (once) the backend called name.
func (m *Manager) provider(name string) (sandbox.Provider, error) {
	m.pmu.Lock()
	defer m.pmu.Unlock()
	if p, ok := m.providers[name]; ok {
		return p, nil
	}
	var p sandbox.Provider
	var err error
	if m.cfg.Backends != nil {
		p, err = m.cfg.Backends(name)
	} else {
		p, err = backends.Open(name, backends.Options{AgentBinary: m.cfg.AgentBinary, LocalPool: 2})
		if c, ok := p.(io.Closer); ok && err == nil {
			m.owned = append(m.owned, c)
		}
	}
	if err != nil {
		return nil, err
	}
	m.providers[name] = p
	return p, nil
}

// client opens (once) a client for model.
func (m *Manager) client(model string) (*llm.Client, error) {
	m.pmu.Lock()
	defer m.pmu.Unlock()
	if c, ok := m.clients[model]; ok {
		return c, nil
	}
	c, err := providers.Open(m.cfg.Models, model)
	if err != nil {
		return nil, err
	}
	if m.cfg.Observer != nil {
		c.Observer = m.cfg.Observer
	}
	m.clients[model] = c
	return c, nil
}

// destroyHandle destroys the box of a persisted handle.
func (m *Manager) destroyHandle(ctx context.Context, backend string, raw []byte) error {
	h, err := decodeHandle(raw)
	if err != nil {
		return err
	}
	if h.Backend != "" {
		backend = h.Backend
	}
	p, err := m.provider(backend)
	if err != nil {
		return fmt.Errorf("destroying box %s: %w", h.ID, err)
	}
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := p.Destroy(dctx, h); err != nil {
		return fmt.Errorf("destroying box %s: %w (remove it with: harvest sandbox rm %s)", h.ID, err, h.ID)
	}
	return nil
}

// append journals ev, logging a failure (the journal only fails when it is
// closed).
func (m *Manager) append(ev event.Event) {
	if _, err := m.j.Append(ev); err != nil {
		m.log.Warn("journaling an event", "session", ev.Session, "type", ev.Type(), "err", err)
	}
}

// runnerExit removes r from the runners unless a wake is pending (a message
// arrived: r goes round again). Reports whether it did. With several
// nodes, the session's lease is given up with it, under the session's
// claim, so that a send holding the claim writes under a lease that stays.
func (m *Manager) runnerExit(r *runner) bool {
	if m.node != nil {
		defer m.node.claims.lock(r.id)()
	}
	m.mu.Lock()
	select {
	case <-r.wake:
		m.mu.Unlock()
		return false
	default:
	}
	if m.runners[r.id] == r {
		delete(m.runners, r.id)
	}
	h := m.dropHeldLocked(r.id, r.fence.Epoch)
	m.mu.Unlock()
	if h != nil {
		m.giveUp(h)
		m.kickKeeper()
	}
	return true
}

// runnerGone removes r, whose loop is over, from the runners. With
// several nodes: on shutdown the lease is given up (another node takes the
// session over at once, reattaching the box left running); a lost lease
// was forgotten already; and a lease taken while r was stopping gets a
// new runner.
func (m *Manager) runnerGone(r *runner) {
	if m.node == nil {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.runners[r.id] == r {
			delete(m.runners, r.id)
		}
		return
	}
	defer m.node.claims.lock(r.id)()
	m.carry.forget(r.id) // bounded memory: a suspended session's next snapshot reads everything
	m.mu.Lock()
	if m.runners[r.id] == r {
		delete(m.runners, r.id)
	}
	h := m.dropHeldLocked(r.id, r.fence.Epoch)
	_, again := m.node.held[r.id]
	m.mu.Unlock()
	if h != nil {
		if errors.Is(context.Cause(r.ctx), errDeleted) {
			m.j.Unfence(r.id)
		} else {
			m.giveUp(h)
		}
		m.kickKeeper()
	}
	if again {
		m.wake(r.id, wakeOpts{start: true})
	}
}

// runnerDone is a runner goroutine's last act: Close waits for them all.
func (m *Manager) runnerDone() { m.wg.Done() }
