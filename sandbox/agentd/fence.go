package agentd

import (
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/sandbox/proto"
)

// The fence: a dead-man's switch the host arms and keeps moving on (see
// "Fence" in the package doc). It lives in the box's PID 1 so that it
// fires whatever happens to the host's process: paused, killed, cut off.

// fence is the Server's switch. Its timer ends the box at deadline.
type fence struct {
	mu       sync.Mutex
	deadline time.Time // zero: off
	timer    *time.Timer
	stopped  bool // Close: the timer is not armed again
}

// fenceOffset maps a connection's host clock onto the agent's: the
// smallest (agent clock − host clock) seen on it, so that a call that
// arrived late counts from when it was sent.
type fenceOffset struct {
	set bool
	min int64 // ns
}

// arm handles a fence call on c.
func (s *Server) arm(c *conn, p proto.FenceParams) (proto.FenceReply, error) {
	if !c.outside {
		return proto.FenceReply{}, &proto.Error{Code: proto.CodePermission,
			Message: "fence: only the host may arm or disarm the box's fence; this connection comes from a process in the box"}
	}
	now := time.Now()
	off := now.Sub(s.started).Nanoseconds() - p.SentNS
	c.mu.Lock()
	if !c.offset.set || off < c.offset.min {
		c.offset = fenceOffset{set: true, min: off}
	}
	off = c.offset.min
	c.mu.Unlock()

	f := &s.fence
	f.mu.Lock()
	defer f.mu.Unlock()
	if p.Off {
		f.deadline = time.Time{}
		if f.timer != nil {
			f.timer.Stop()
		}
		s.log.Debug("fence off")
		return proto.FenceReply{LeftMS: -1}, nil
	}
	dl := s.started.Add(time.Duration(p.SentNS + off + p.LeftNS))
	if !f.stopped && (f.deadline.IsZero() || dl.After(f.deadline)) {
		f.deadline = dl
		if f.timer == nil {
			f.timer = time.AfterFunc(time.Until(dl), s.fenceDue)
		} else {
			f.timer.Reset(time.Until(dl))
		}
	}
	return proto.FenceReply{LeftMS: time.Until(f.deadline).Milliseconds()}, nil
}

// fenceDue is the fence's timer: at the deadline (unless it moved on
// meanwhile) the box ends at once, every process killed.
func (s *Server) fenceDue() {
	f := &s.fence
	f.mu.Lock()
	due := !f.stopped && !f.deadline.IsZero() && !time.Now().Before(f.deadline)
	f.mu.Unlock()
	if !due || s.ctx.Err() != nil {
		return
	}
	s.log.Warn("the host did not move the box's fence on before its deadline (its node lost the session's lease, paused or died): ending the box")
	s.fenced.Store(true)
	s.Shutdown(0)
}

// stopFence stops the timer for good (Close).
func (s *Server) stopFence() {
	f := &s.fence
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	if f.timer != nil {
		f.timer.Stop()
	}
}

// Fenced reports whether the fence ended the box.
func (s *Server) Fenced() bool { return s.fenced.Load() }

// outsideBox reports whether the peer of nc (an accepted connection) is
// outside the box, where only the host is: with PID1, a peer outside the
// box's PID namespace (pid 0 as the kernel reports it here: runc, the
// local backend) or one reported as the agent itself (gVisor reports
// every peer so, and refuses box processes the agent's socket; the agent
// never connects to its own socket: dial refuses, isSelf). Outside a box
// (no PID1) every peer is.
func outsideBox(nc net.Conn, pid1 bool) bool {
	if !pid1 {
		return true
	}
	pid, ok := peerPID(nc)
	return ok && (pid == 0 || pid == int32(os.Getpid()))
}

// isSelf reports whether nc (a dialed unix connection) reached the
// agent's own socket: its peer's address is the name that socket is bound
// to. (Not by the peer's pid: gVisor reports the agent's own for every
// peer.) A box process that binds a socket of that name elsewhere is
// refused too, which costs nothing.
func (s *Server) isSelf(nc net.Conn) bool {
	self := s.selfAddr.Load()
	a, ok := nc.RemoteAddr().(*net.UnixAddr)
	return self != nil && ok && a.Name == *self
}

// peerPID is SO_PEERCRED's pid of a unix connection.
func peerPID(nc net.Conn) (int32, bool) {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return 0, false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var cred *unix.Ucred
	cerr := raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if cerr != nil || err != nil {
		return 0, false
	}
	return cred.Pid, true
}
