package agentd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/sandbox/proto"
)

// Box listeners: the agent listens inside the box (its network namespace, its
// filesystem) and hands each connection to the host as a stream. See the
// package doc for the state machine and the locks.

const (
	// acceptBacklog bounds connections accepted in the box that no accept
	// call has taken yet; beyond it they wait in the kernel's backlog.
	acceptBacklog = 16
	// maxPendingAccepts bounds the accept calls one host connection may have
	// waiting at once.
	maxPendingAccepts = 64
	// maxListeners bounds the listeners one host connection may open.
	maxListeners = 64
	// closeLinger bounds how long a connection the host closed keeps
	// writing what the host sent before (like SO_LINGER on a socket).
	closeLinger = 5 * time.Second
)

// boxListener is one listening socket in the box. Its accept goroutine
// (started through Server.goroutine) accepts into a bounded channel; accept
// calls take from it.
type boxListener struct {
	s     *Server
	id    uint64
	l     net.Listener
	addr  string
	conns chan net.Conn
	// closed is closed once by close; it wakes the accept goroutine and
	// every accept call waiting on this listener.
	closed    chan struct{}
	closeOnce sync.Once
}

// validListen checks a listen request; the host checks the same first, so
// these messages are a backstop.
func validListen(network, addr string) error {
	switch network {
	case "tcp":
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("listen: tcp address %q: want IP:PORT", addr)
		}
		if host != "" {
			if _, err := netip.ParseAddr(host); err != nil {
				return fmt.Errorf("listen: tcp address %q: the host must be an IP address or empty", addr)
			}
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && port != "0") {
			return fmt.Errorf("listen: tcp address %q: the port must be a number from 0 to 65535", addr)
		}
	case "unix":
		if !filepath.IsAbs(addr) || len(addr) > 107 {
			return fmt.Errorf("listen: unix socket path %q: want an absolute path under 108 bytes", addr)
		}
	default:
		return fmt.Errorf("listen: network %q: only tcp and unix", network)
	}
	return nil
}

// listen opens a listener for connection c.
func (c *conn) listen(prm proto.ListenParams) (proto.ListenReply, error) {
	if err := validListen(prm.Network, prm.Addr); err != nil {
		return proto.ListenReply{}, &proto.Error{Code: proto.CodeInvalid, Message: err.Error()}
	}
	c.mu.Lock()
	full := len(c.listeners) >= maxListeners
	c.mu.Unlock()
	if full {
		return proto.ListenReply{}, &proto.Error{Code: proto.CodeResource, Message: fmt.Sprintf("listen: this connection already has %d listeners: close some", maxListeners)}
	}
	nl, err := net.Listen(prm.Network, prm.Addr)
	if err != nil {
		return proto.ListenReply{}, listenError(prm, err)
	}
	l := &boxListener{s: c.s, l: nl, addr: nl.Addr().String(), conns: make(chan net.Conn, acceptBacklog), closed: make(chan struct{})}
	c.mu.Lock()
	if c.listeners == nil { // the connection is closing
		c.mu.Unlock()
		nl.Close()
		return proto.ListenReply{}, &proto.Error{Code: proto.CodeClosed, Message: "listen: connection closing"}
	}
	c.nextLis++
	l.id = c.nextLis
	c.listeners[l.id] = l
	c.mu.Unlock()
	c.s.listeners.Add(1)
	c.s.goroutine(l.run)
	return proto.ListenReply{Listener: l.id, Addr: l.addr}, nil
}

func listenError(prm proto.ListenParams, err error) error {
	msg := fmt.Sprintf("listening on %s %s in the box: %v", prm.Network, prm.Addr, err)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return &proto.Error{Code: proto.CodeExists, Message: msg + " (a process in the box holds that address: choose another, or port 0)"}
	case errors.Is(err, syscall.EACCES) && prm.Network == "tcp":
		return &proto.Error{Code: proto.CodePermission, Message: msg + " (ports below 1024 need privileges the box does not have)"}
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return &proto.Error{Code: proto.CodeInvalid, Message: msg + " (the box has only a loopback interface)"}
	}
	e := errno(err).(*proto.Error)
	e.Message = msg
	return e
}

// run accepts until the listener closes.
func (l *boxListener) run() {
	defer func() {
		// Connections nobody took: an accept call may still race us for one;
		// whoever receives it owns it.
		for {
			select {
			case nc := <-l.conns:
				nc.Close()
			default:
				return
			}
		}
	}()
	for {
		nc, err := l.l.Accept()
		if err != nil {
			if l.isClosed() {
				return
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) {
				// Out of fds or memory (the box is at a limit): back off
				// instead of spinning.
				t := time.NewTimer(20 * time.Millisecond)
				select {
				case <-t.C:
				case <-l.closed:
					t.Stop()
					return
				}
				continue
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.ECONNABORTED) {
				continue
			}
			l.s.log.Warn("box listener failed", "addr", l.addr, "err", err)
			l.close()
			return
		}
		select {
		case l.conns <- nc:
		case <-l.closed:
			nc.Close()
			return
		}
	}
}

func (l *boxListener) isClosed() bool {
	select {
	case <-l.closed:
		return true
	default:
		return false
	}
}

// close stops listening; it never blocks. Accept calls waiting on l fail.
func (l *boxListener) close() {
	l.closeOnce.Do(func() {
		close(l.closed)
		l.l.Close()
		l.s.listeners.Add(-1)
	})
}

func (c *conn) closeListener(id uint64) {
	c.mu.Lock()
	l := c.listeners[id]
	delete(c.listeners, id)
	c.mu.Unlock()
	if l != nil {
		l.close()
	}
}

var errAcceptCancelled = &proto.Error{Code: proto.CodeClosed, Message: "accept cancelled"}

// startAccept handles an accept call. It runs on the reader: the stream is
// bound (as a fwdConn waiting for its connection) before any later frame is
// read, so a conn_close sent after the accept always finds it. The wait
// itself runs on its own goroutine, counted in c.calls and bounded by
// maxPendingAccepts, not by the call semaphore.
func (c *conn) startAccept(id uint32, params json.RawMessage) {
	prm, err := decode[proto.AcceptParams](params)
	if err != nil {
		c.reply(id, nil, nil, err)
		return
	}
	var l *boxListener
	c.startForward(id, "accept", prm.Stream, prm.Window, &c.accepting, maxPendingAccepts,
		func() error {
			if l = c.listeners[prm.Listener]; l == nil {
				return &proto.Error{Code: proto.CodeClosed, Message: fmt.Sprintf("accept: no listener %d on this connection (closed?)", prm.Listener)}
			}
			return nil
		},
		func(fc *fwdConn) (any, error) { return c.waitAccept(l, fc) })
}

// startForward binds stream to a new fwdConn waiting for its connection,
// then runs connect (an accept or a dial) on its own goroutine, counted in
// c.calls and in *pending (at most max at once). check, under c.mu, may
// refuse the call first. The reply goes out before the first Data frame:
// the host learns of the connection first (it could take data before, into
// the stream it registered, but need not).
func (c *conn) startForward(id uint32, what string, stream uint32, window uint32, pending *int, max int,
	check func() error, connect func(*fwdConn) (any, error)) {
	c.mu.Lock()
	var err error
	switch {
	case c.streams == nil:
		err = &proto.Error{Code: proto.CodeClosed, Message: what + ": connection closing"}
	default:
		err = check()
	}
	switch {
	case err != nil:
	case c.streams[stream] != nil:
		err = &proto.Error{Code: proto.CodeInvalid, Message: fmt.Sprintf("stream %d is already in use", stream)}
	case *pending >= max:
		err = &proto.Error{Code: proto.CodeResource, Message: fmt.Sprintf("%s: %d %ss are already waiting on this connection", what, max, what)}
	}
	if err != nil {
		c.mu.Unlock()
		c.reply(id, nil, nil, err)
		return
	}
	w := int64(window)
	if w <= 0 {
		w = proto.DefaultWindow
	}
	fc := newFwdConn(c, stream, w)
	c.streams[stream] = fc
	*pending++
	c.mu.Unlock()

	c.calls.Add(1)
	go func() {
		defer c.calls.Done()
		res, err := connect(fc)
		c.mu.Lock()
		*pending--
		c.mu.Unlock()
		if err != nil {
			c.dropStream(stream, fc)
			c.reply(id, nil, nil, err)
			return
		}
		c.reply(id, res, nil, nil)
		fc.start()
	}()
}

// waitAccept waits for a connection on l, or for the listener, the accept,
// the host connection or the server to end.
func (c *conn) waitAccept(l *boxListener, fc *fwdConn) (proto.AcceptReply, error) {
	select {
	case nc := <-l.conns:
		if !fc.bind(nc) {
			nc.Close()
			return proto.AcceptReply{}, errAcceptCancelled
		}
		return proto.AcceptReply{Local: nc.LocalAddr().String(), Remote: addrString(nc.RemoteAddr()), InWindow: proto.DefaultWindow}, nil
	case <-l.closed:
		return proto.AcceptReply{}, &proto.Error{Code: proto.CodeClosed, Message: "accept: the listener was closed"}
	case <-fc.cancel:
		return proto.AcceptReply{}, errAcceptCancelled
	case <-c.closed:
		return proto.AcceptReply{}, errAcceptCancelled
	case <-c.s.ctx.Done():
		return proto.AcceptReply{}, errAcceptCancelled
	}
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// connClose handles conn_close.
func (c *conn) connClose(prm proto.ConnCloseParams) {
	fc, ok := c.stream(prm.Stream).(*fwdConn)
	if !ok {
		return // finished already (or a process stream: not ours to close)
	}
	if prm.Abort {
		fc.abort()
	} else {
		fc.closeByHost()
	}
}

// fwdConn is one forwarded connection: a socket in the box bound to a host
// stream. Two pumps (Server.goroutine) move its bytes: readLoop box → host
// within the credit the host grants, writeLoop host → box from a queue
// bounded by the window the agent grants. It finishes (socket closed, Exit
// sent, stream dropped) when both have stopped.
type fwdConn struct {
	c      *conn
	stream uint32
	cancel chan struct{} // closed by abort: wakes a waiting accept

	mu        sync.Mutex
	cond      *sync.Cond // credit, queue, or state changed
	nc        net.Conn   // nil until bound
	credit    int64      // box → host bytes the host still accepts
	queue     [][]byte   // host → box bytes not written yet
	queued    int
	inEOF     bool  // the host sends nothing more
	hostGone  bool  // conn_close: the host reads nothing more either
	aborted   bool  // closed at once; no frames any more
	broken    bool  // an I/O error ended both directions
	err       error // the first I/O error, reported in Exit
	readDone  bool
	writeDone bool
	finished  bool
}

func newFwdConn(c *conn, stream uint32, window int64) *fwdConn {
	f := &fwdConn{c: c, stream: stream, credit: window, cancel: make(chan struct{})}
	f.cond = sync.NewCond(&f.mu)
	return f
}

// bind attaches the accepted socket; false if the accept was cancelled.
func (f *fwdConn) bind(nc net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.aborted || f.hostGone {
		return false
	}
	f.nc = nc
	f.c.s.forwards.Add(1)
	return true
}

// start runs the pumps of a bound connection.
func (f *fwdConn) start() {
	f.c.s.goroutine(f.readLoop)
	f.c.s.goroutine(f.writeLoop)
}

// input implements stream.
func (f *fwdConn) input(b []byte) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.aborted || f.hostGone || f.broken || f.inEOF || f.writeDone {
		return true // nobody will write it: drop
	}
	if f.queued+len(b) > proto.DefaultWindow {
		return false
	}
	f.queue = append(f.queue, b)
	f.queued += len(b)
	f.cond.Broadcast()
	return true
}

// inputEOF implements stream.
func (f *fwdConn) inputEOF() {
	f.mu.Lock()
	f.inEOF = true
	f.cond.Broadcast()
	f.mu.Unlock()
}

// addCredit implements stream.
func (f *fwdConn) addCredit(fd byte, n uint32) {
	if fd != proto.FdStdout {
		return
	}
	f.mu.Lock()
	f.credit += int64(n)
	f.cond.Broadcast()
	f.mu.Unlock()
}

// detach implements stream: the host connection is gone, and the
// connection with it.
func (f *fwdConn) detach(*conn) { f.abort() }

// abort closes the connection at once (RST for TCP). Idempotent.
func (f *fwdConn) abort() {
	f.mu.Lock()
	if f.aborted {
		f.mu.Unlock()
		return
	}
	f.aborted = true
	f.queue, f.queued = nil, 0
	nc := f.nc
	f.cond.Broadcast()
	f.mu.Unlock()
	close(f.cancel)
	if nc != nil {
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		nc.Close() // unblocks both pumps
	}
}

// closeByHost: the host closed its end. Stop reading; write what is queued
// (for at most closeLinger), then close. Before a connection arrived it
// cancels the accept.
func (f *fwdConn) closeByHost() {
	f.mu.Lock()
	if f.nc == nil {
		f.mu.Unlock()
		f.abort()
		return
	}
	if f.aborted || f.hostGone {
		f.mu.Unlock()
		return
	}
	f.hostGone, f.inEOF = true, true
	nc := f.nc
	f.cond.Broadcast()
	f.mu.Unlock()
	_ = nc.SetReadDeadline(time.Now()) // the read pump stops
	_ = nc.SetWriteDeadline(time.Now().Add(closeLinger))
}

// fail records an I/O error that ends both directions.
func (f *fwdConn) fail(err error) {
	f.mu.Lock()
	quiet := f.aborted || f.hostGone
	if f.err == nil && !quiet {
		f.err = err
	}
	f.broken = true
	f.queue, f.queued = nil, 0
	nc := f.nc
	f.cond.Broadcast()
	f.mu.Unlock()
	nc.Close() // unblocks the other pump
}

// silent reports whether frames for this stream should no longer be sent.
func (f *fwdConn) silent() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.aborted || f.hostGone
}

// readLoop moves box → host bytes, never more than the host's credit: a
// slow host stops the reads, and TCP's own flow control stops the box
// client.
func (f *fwdConn) readLoop() {
	bp := pumpBufs.Get().(*[]byte)
	defer pumpBufs.Put(bp)
	buf := *bp
	for {
		f.mu.Lock()
		for f.credit <= 0 && !f.aborted && !f.hostGone && !f.broken {
			f.cond.Wait()
		}
		stop := f.aborted || f.hostGone || f.broken
		n := min(int64(len(buf)), f.credit)
		f.mu.Unlock()
		if stop {
			break
		}
		k, err := f.nc.Read(buf[:n])
		if k > 0 {
			f.mu.Lock()
			f.credit -= int64(k)
			f.mu.Unlock()
			if !f.silent() {
				f.c.send(proto.Frame{Type: proto.TypeData, ID: f.stream, Payload: proto.DataPayload(proto.FdStdout, buf[:k])})
			}
		}
		if err == nil {
			continue
		}
		if errors.Is(err, io.EOF) {
			// The box side shut its writing half (or closed): half-close
			// toward the host; the other direction goes on.
			if !f.silent() {
				f.c.send(proto.Frame{Type: proto.TypeEOF, ID: f.stream, Payload: []byte{proto.FdStdout}})
			}
		} else if !f.silent() {
			f.fail(err)
		}
		break
	}
	f.done(true)
}

// writeLoop moves host → box bytes and returns credit as the box takes them.
// EOF from the host half-closes the socket.
func (f *fwdConn) writeLoop() {
	for {
		f.mu.Lock()
		for len(f.queue) == 0 && !f.inEOF && !f.aborted && !f.broken {
			f.cond.Wait()
		}
		if f.aborted || f.broken {
			f.mu.Unlock()
			break
		}
		if len(f.queue) == 0 { // EOF and everything written
			f.mu.Unlock()
			if cw, ok := f.nc.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
			break
		}
		b := f.queue[0]
		f.queue[0] = nil
		f.queue = f.queue[1:]
		f.mu.Unlock()

		_, err := f.nc.Write(b)

		f.mu.Lock()
		f.queued -= len(b)
		f.mu.Unlock()
		if err != nil {
			f.fail(err)
			break
		}
		if !f.silent() {
			f.c.send(proto.Frame{Type: proto.TypeWindow, ID: f.stream, Payload: proto.WindowPayload(proto.FdStdin, uint32(len(b)))})
		}
	}
	f.done(false)
}

// done marks one pump stopped; the second one finishes the connection.
func (f *fwdConn) done(read bool) {
	f.mu.Lock()
	if read {
		f.readDone = true
	} else {
		f.writeDone = true
	}
	if !f.readDone || !f.writeDone || f.finished {
		f.mu.Unlock()
		return
	}
	f.finished = true
	silent := f.aborted || f.hostGone
	var st proto.ExitStatus
	if f.err != nil {
		st.Code, st.Error = -1, errMessage(f.err)
	}
	f.mu.Unlock()
	f.nc.Close()
	f.c.s.forwards.Add(-1)
	if silent {
		f.c.dropStream(f.stream, f)
		return
	}
	f.c.sendExit(f.stream, st)
}

// errMessage is an I/O error without Go's "read tcp a->b:" prefix.
func errMessage(err error) string {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err.Error()
	}
	return err.Error()
}
