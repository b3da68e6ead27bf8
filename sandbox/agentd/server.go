package agentd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/sandbox/proto"
)

// Config configures a Server.
type Config struct {
	// BoxID is echoed in the hello reply so the host knows it reached the box it
	// meant to.
	BoxID string
	// Workdir is where commands start and relative paths resolve.
	Workdir string
	// Env is the base environment of every command.
	Env []string
	// Deadline, when set, is the box's time limit: at Deadline the agent ends
	// the box (SIGTERM all, a short grace, SIGKILL, exit).
	Deadline time.Time
	// PID1 is true when the agent is the box's init: shutdown may then signal
	// every process in the namespace (kill -1).
	PID1 bool
	// Warm agents start before their box is asked for: the first hello that
	// carries a Claim sets BoxID, Env, Workdir and Deadline (see package
	// local's pool).
	Warm bool
	// NProc caps each command's RLIMIT_NPROC at the claim's Pids plus
	// NProcAgentShare (see nproc.go). Only where RLIMIT_NPROC counts the
	// tasks of the box's own user namespace (Main checks).
	NProc  bool
	Logger *slog.Logger
}

// identity is what a claim sets. It is replaced whole, never modified.
type identity struct {
	boxID    string
	env      []string
	workdir  string
	deadline time.Time
	pids     int // the claim's pids limit for commands; 0: none
}

// Server is the agent. Create it with New, then Serve a listener.
type Server struct {
	cfg     Config
	log     *slog.Logger
	ident   atomic.Pointer[identity]
	claimed atomic.Bool
	// expired: the box's time limit was reached and Shutdown is ending
	// it. Atomic, so a proc reads it for its status without s.mu.
	expired atomic.Bool
	// fence is the host's dead-man's switch (fence.go); fenced: it fired.
	fence  fence
	fenced atomic.Bool
	// selfAddr is the name the agent's own socket is bound to (Serve),
	// which dial refuses (fence.go).
	selfAddr atomic.Pointer[string]
	started  time.Time
	reaper   *reaper
	oom      *oomCounter
	devNull  *os.File

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	procs    map[uint64]*proc
	nextProc uint64
	conns    map[*conn]struct{}
	closing  bool // Close has begun
	ending   bool // Shutdown has begun: new connections are refused

	// listeners and forwards count open box listeners and forwarded
	// connections (InfoReply).
	listeners atomic.Int64
	forwards  atomic.Int64

	// exited is closed when shutdown decided the agent should exit.
	exited   chan struct{}
	exitOnce sync.Once
}

// maxRemembered bounds how many exited processes the agent keeps for ps and
// attach; the oldest finished ones are forgotten first.
const maxRemembered = 256

// New creates a Server and starts its reaper.
func New(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if cfg.Workdir == "" {
		cfg.Workdir = "/"
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		started: time.Now(),
		oom:     newOOMCounter(),
		devNull: devNull,
		ctx:     ctx,
		cancel:  cancel,
		procs:   map[uint64]*proc{},
		conns:   map[*conn]struct{}{},
		exited:  make(chan struct{}),
	}
	s.reaper = newReaper(cfg.PID1)
	s.goroutine(func() { s.reaper.run(ctx) })
	s.ident.Store(&identity{boxID: cfg.BoxID, env: cfg.Env, workdir: cfg.Workdir, deadline: cfg.Deadline})
	if !cfg.Warm {
		s.claimed.Store(true)
		s.startDeadline(cfg.Deadline)
	}
	return s, nil
}

func (s *Server) id() *identity { return s.ident.Load() }

// startDeadline ends the box at d (the box's time limit), if set.
func (s *Server) startDeadline(d time.Time) {
	if d.IsZero() {
		return
	}
	t := time.AfterFunc(time.Until(d), func() {
		s.log.Warn("box time limit reached; ending the box", "deadline", d)
		s.expired.Store(true)
		s.Shutdown(5 * time.Second)
	})
	s.goroutine(func() { <-s.ctx.Done(); t.Stop() })
}

// claim gives a warm agent its box. It succeeds once; a repeated claim of the
// same box (a reconnect) is fine.
func (s *Server) claim(c proto.Claim) error {
	if c.BoxID == "" || c.Workdir == "" {
		return &proto.Error{Code: proto.CodeInvalid, Message: "claim: box id and workdir are required"}
	}
	if !s.claimed.CompareAndSwap(false, true) {
		if s.id().boxID == c.BoxID {
			return nil
		}
		return &proto.Error{Code: proto.CodeInvalid, Message: fmt.Sprintf("this agent already serves box %s", s.id().boxID)}
	}
	id := &identity{boxID: c.BoxID, env: c.Env, workdir: c.Workdir, pids: c.Pids}
	if c.DeadlineMS > 0 {
		id.deadline = time.UnixMilli(c.DeadlineMS)
	}
	s.ident.Store(id)
	s.log = s.log.With("box", c.BoxID)
	s.startDeadline(id.deadline)
	return nil
}

// goroutine runs f on a goroutine that Close waits for.
func (s *Server) goroutine(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// Serve accepts connections until the listener fails or the server closes.
func (s *Server) Serve(l net.Listener) error {
	if a, ok := l.Addr().(*net.UnixAddr); ok && a.Name != "" {
		s.selfAddr.Store(&a.Name)
	}
	s.goroutine(func() { <-s.ctx.Done(); l.Close() })
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of fds: back off instead of spinning.
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		s.log.Debug("accepted")
		c := newConn(s, nc)
		s.mu.Lock()
		if s.closing || s.ending {
			// A box on its way out takes no new clients: a host that
			// reconnects now (Recover) sees the agent gone, not a box
			// that dies under it a moment later.
			s.mu.Unlock()
			nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.goroutine(c.serve)
	}
}

// Exited is closed once Shutdown has finished ending the box's processes.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// NoGraceLimit as a Shutdown grace waits for the processes however long they
// take (the caller will SIGKILL the agent when its own grace ends).
const NoGraceLimit time.Duration = -1

// Shutdown ends the box: SIGTERM every process, wait up to grace for them to
// exit, SIGKILL the rest, then close Exited. Safe to call more than once.
func (s *Server) Shutdown(grace time.Duration) {
	s.exitOnce.Do(func() {
		s.mu.Lock()
		s.ending = true
		s.mu.Unlock()
		s.goroutine(func() {
			s.terminateAll(grace)
			close(s.exited)
		})
	})
}

func (s *Server) terminateAll(grace time.Duration) {
	s.signalAll(syscall.SIGTERM)
	if grace < 0 {
		grace = 100 * 365 * 24 * time.Hour
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for s.anyRunning() {
		select {
		case <-deadline.C:
			s.signalAll(syscall.SIGKILL)
			return
		case <-tick.C:
		}
	}
	s.signalAll(syscall.SIGKILL) // stragglers that left our process groups
}

// signalAll signals every process in the box (kill -1 as PID 1), or every
// process tree the agent started otherwise.
func (s *Server) signalAll(sig syscall.Signal) {
	if s.cfg.PID1 {
		_ = syscall.Kill(-1, sig)
		return
	}
	for _, p := range s.procList() {
		if !p.hasExited() {
			if sig == syscall.SIGKILL {
				killTree(p.pid, p.pgid, p.id)
			} else {
				_ = syscall.Kill(-p.pgid, sig)
			}
		}
	}
}

func (s *Server) anyRunning() bool {
	if s.cfg.PID1 {
		return hasChildren()
	}
	for _, p := range s.procList() {
		if !p.hasExited() {
			return true
		}
	}
	return false
}

func (s *Server) procList() []*proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*proc, 0, len(s.procs))
	for _, p := range s.procs {
		out = append(out, p)
	}
	return out
}

// Drain waits, up to timeout, until every process the agent started has
// finished (exit status and output handled) and every connection has written
// what was queued for it: what a command printed on its way out (a SIGTERM
// trap's last words) reaches the host before the agent exits.
func (s *Server) Drain(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for _, p := range s.procList() {
		select {
		case <-p.finished:
		case <-time.After(time.Until(deadline)):
			return
		}
	}
	for time.Now().Before(deadline) {
		s.mu.Lock()
		done := true
		for c := range s.conns {
			if !c.flushed() {
				done = false
			}
		}
		s.mu.Unlock()
		if done {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// Close stops serving, closes every connection and waits for every goroutine.
// It does not kill processes; call Shutdown first for that.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closing = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	procs := make([]*proc, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	s.cancel()
	s.stopFence()
	for _, c := range conns {
		c.close()
	}
	for _, p := range procs {
		p.closeFiles()
	}
	s.wg.Wait()
	s.devNull.Close()
	return nil
}

func (s *Server) removeConn(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

func (s *Server) lookup(id uint64) *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[id]
}

// remember adds p to the table and forgets the oldest finished processes
// beyond maxRemembered.
func (s *Server) remember(p *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.procs[p.id] = p
	if len(s.procs) <= maxRemembered {
		return
	}
	var oldest *proc
	for _, q := range s.procs {
		if q.isFinished() && (oldest == nil || q.id < oldest.id) {
			oldest = q
		}
	}
	if oldest != nil {
		delete(s.procs, oldest.id)
	}
}

// baseEnv merges overrides (KEY=VALUE) into the box environment.
func (s *Server) mergeEnv(overrides []string) []string {
	base := s.id().env
	if len(overrides) == 0 {
		return append([]string(nil), base...)
	}
	idx := make(map[string]int, len(base))
	out := make([]string, 0, len(base)+len(overrides))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		idx[k] = len(out)
		out = append(out, kv)
	}
	for _, kv := range overrides {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, EnvPrefix) {
			continue // reserved for the agent (the kill marker)
		}
		if i, ok := idx[k]; ok {
			out[i] = kv
		} else {
			idx[k] = len(out)
			out = append(out, kv)
		}
	}
	return out
}

func envLookup(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}
