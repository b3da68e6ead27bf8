package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/sandbox/proto"
)

// Box listeners. See "Box listeners and dials" in the package doc for why and for the
// life of a forwarded connection.

// listenCloseTimeout bounds Listener.Close's call to the agent.
const listenCloseTimeout = 10 * time.Second

// creditBatch is how many bytes Read consumes before it returns credit to
// the agent: one Window frame per batch, not per Read. It is well below the
// window, so the agent never runs out of credit while the host reads.
const creditBatch = proto.MaxData

// Listener is a listening socket inside a box whose connections are
// accepted on the host. It implements net.Listener: http.Serve(l, handler)
// on the host serves clients in the box. It belongs to the Sandbox's
// connection to the agent: Close of the Sandbox (or losing the box) closes
// it, and a recovered Sandbox must listen again.
type Listener struct {
	sb      *Sandbox
	id      uint64
	network string
	addr    net.Addr
	// ctx is cancelled by Close: every pending Accept returns at once.
	ctx       context.Context
	cancel    context.CancelFunc
	closeOnce sync.Once
	closeErr  error
}

var _ net.Listener = (*Listener)(nil)

// Listen listens inside the box and returns a listener whose connections
// are accepted on the host. The box has no network: the socket is in the
// box's own network namespace (its loopback), or its filesystem, and its
// bytes travel over the connection Harvest already has to the box's agent.
//
// network is "tcp", with addr "IP:PORT" (an IP address or empty for every
// address; port 0 picks a free one: Addr says which), or "unix", with addr
// an absolute socket path in the box. On the host backend the box's network
// and filesystem are the host's.
func (sb *Sandbox) Listen(ctx context.Context, network, addr string) (*Listener, error) {
	if err := checkListen(network, addr); err != nil {
		return nil, fmt.Errorf("listening in box %s: %w", sb.handle.ID, err)
	}
	var r proto.ListenReply
	if _, err := sb.c.call(ctx, proto.MethodListen, proto.ListenParams{Network: network, Addr: addr}, nil, &r); err != nil {
		var pe *proto.Error
		if errors.As(err, &pe) && strings.HasPrefix(pe.Message, "unknown method") {
			return nil, fmt.Errorf("listening in box %s: its agent predates box listeners: recreate the box with this version of Harvest", sb.handle.ID)
		}
		return nil, fmt.Errorf("listening on %s %s in box %s: %w", network, addr, sb.handle.ID, err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	return &Listener{sb: sb, id: r.Listener, network: network, addr: parseAddr(network, r.Addr), ctx: lctx, cancel: cancel}, nil
}

// checkListen validates Listen's arguments with errors that say what to
// change.
func checkListen(network, addr string) error {
	switch network {
	case "tcp":
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("tcp address %q: want IP:PORT, like 127.0.0.1:0", addr)
		}
		if host == "localhost" {
			return fmt.Errorf("tcp address %q: use 127.0.0.1 or [::1]: the agent resolves no names", addr)
		}
		if host != "" {
			if ip, err := netip.ParseAddr(host); err != nil || ip.Zone() != "" {
				return fmt.Errorf("tcp address %q: the host part must be an IP address (like 127.0.0.1) or empty", addr)
			}
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return fmt.Errorf("tcp address %q: the port must be a number from 0 to 65535 (0: any free port)", addr)
		}
	case "unix":
		if !filepath.IsAbs(addr) || strings.ContainsRune(addr, 0) {
			return fmt.Errorf("unix socket path %q: use an absolute path inside the box, like /tmp/model.sock", addr)
		}
		if len(addr) > 107 {
			return fmt.Errorf("unix socket path %q is %d bytes: the limit is 107", addr, len(addr))
		}
	default:
		return fmt.Errorf("network %q is not supported: use \"tcp\" (an IP:PORT inside the box) or \"unix\" (a socket path inside the box)", network)
	}
	return nil
}

// Addr is the address bound inside the box, like 127.0.0.1:41234: what a
// client in the box connects to.
func (l *Listener) Addr() net.Addr { return l.addr }

// Accept waits for a process in the box to connect and returns the
// connection. Each Accept keeps one accept call waiting in the agent, so
// concurrent Accepts each get their own connection. After Close it fails
// with an error that errors.Is net.ErrClosed; when the connection to the box
// is lost, with one that errors.Is ErrClosed.
//
// The conn also has CloseWrite() error, which half-closes it: the box side
// reads EOF and may still send.
func (l *Listener) Accept() (net.Conn, error) {
	if l.ctx.Err() != nil {
		return nil, l.opErr(net.ErrClosed)
	}
	c := l.sb.c
	bc := newBoxConn(c, l.sb.handle.ID, l.network, proto.DefaultWindow)
	id, err := c.registerStream(bc)
	if err != nil {
		return nil, fmt.Errorf("accepting on %s in box %s: %w", l.addr, l.sb.handle.ID, err)
	}
	bc.id = id
	var r proto.AcceptReply
	_, err = c.call(l.ctx, proto.MethodAccept, proto.AcceptParams{Listener: l.id, Stream: id, Window: proto.DefaultWindow}, nil, &r)
	if err != nil {
		c.dropStream(id)
		if l.ctx.Err() != nil {
			// Closed while waiting. The agent may have bound a connection
			// to the stream already: abort it.
			_ = c.notify(proto.MethodConnClose, proto.ConnCloseParams{Stream: id, Abort: true})
			return nil, l.opErr(net.ErrClosed)
		}
		if errors.Is(err, net.ErrClosed) {
			return nil, l.opErr(err) // the agent closed the listener
		}
		return nil, fmt.Errorf("accepting on %s in box %s: %w", l.addr, l.sb.handle.ID, err)
	}
	bc.local, bc.remote = parseAddr(l.network, r.Local), parseAddr(l.network, r.Remote)
	bc.addStdinCredit(int64(r.InWindow))
	return bc, nil
}

func (l *Listener) opErr(err error) error {
	return &net.OpError{Op: "accept", Net: l.network, Addr: l.addr, Err: err}
}

// Close stops listening in the box; pending Accepts fail with net.ErrClosed.
// Connections already accepted stay open. Idempotent.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		l.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), listenCloseTimeout)
		defer cancel()
		_, err := l.sb.c.call(ctx, proto.MethodListenClose, proto.ListenCloseParams{Listener: l.id}, nil, nil)
		if err != nil && !errors.Is(err, ErrClosed) { // a lost connection closed it in the box
			l.closeErr = fmt.Errorf("closing listener %s in box %s: %w", l.addr, l.sb.handle.ID, err)
		}
	})
	return l.closeErr
}

// boxConn is the host end of a forwarded connection: a net.Conn whose bytes
// flow to and from a socket in the box. See the package doc for its states.
//
// Concurrency: the client's reader calls push, eof, addStdinCredit, exit and
// fail (never blocking); Read, Write and the rest are called by users. mu
// guards the state; changed is closed and replaced on every change, so a
// blocked Read or Write waits on it and on its deadline at once. wmu (a
// one-slot channel, so waiting for it can time out) keeps each Write's
// frames together.
type boxConn struct {
	c             *client
	boxID         string
	network       string
	window        int64
	id            uint32
	local, remote net.Addr
	wmu           chan struct{}
	rd, wd        deadline

	mu       sync.Mutex
	changed  chan struct{}
	chunks   [][]byte // box → host bytes not read yet, at most window in all
	buffered int64
	unacked  int64 // bytes read but not yet returned as credit
	rEOF     bool  // the box side shut its writing half
	credit   int64 // host → box bytes the agent accepts now
	exited   bool  // the agent ended the stream (Exit)
	exitErr  error // why, when it failed
	lost     error // the connection to the box is gone
	closed   bool  // Close was called
	wclosed  bool  // CloseWrite was called
}

var _ net.Conn = (*boxConn)(nil)

func newBoxConn(c *client, boxID, network string, window int64) *boxConn {
	return &boxConn{
		c: c, boxID: boxID, network: network, window: window,
		wmu: make(chan struct{}, 1), rd: makeDeadline(), wd: makeDeadline(),
		changed: make(chan struct{}),
	}
}

// notifyLocked wakes every blocked Read and Write. Callers hold mu.
func (b *boxConn) notifyLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *boxConn) push(fd byte, data []byte) error {
	if fd != proto.FdStdout {
		return fmt.Errorf("forwarded connection: data for fd %d", fd)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buffered+int64(len(data)) > b.window {
		return errors.New("agent overran its window on a forwarded connection")
	}
	if b.closed || len(data) == 0 {
		return nil
	}
	b.chunks = append(b.chunks, data)
	b.buffered += int64(len(data))
	b.notifyLocked()
	return nil
}

func (b *boxConn) eof(fd byte) {
	if fd != proto.FdStdout {
		return
	}
	b.mu.Lock()
	b.rEOF = true
	b.notifyLocked()
	b.mu.Unlock()
}

func (b *boxConn) addStdinCredit(n int64) {
	b.mu.Lock()
	b.credit += n
	b.notifyLocked()
	b.mu.Unlock()
}

func (b *boxConn) exit(st proto.ExitStatus) {
	b.mu.Lock()
	b.exited = true
	if st.Error != "" {
		b.exitErr = fmt.Errorf("in box %s: %s", b.boxID, st.Error)
	}
	b.notifyLocked()
	b.mu.Unlock()
}

func (b *boxConn) fail(err error) {
	b.mu.Lock()
	if b.lost == nil {
		b.lost = fmt.Errorf("lost the connection to box %s: %w", b.boxID, err)
	}
	b.notifyLocked()
	b.mu.Unlock()
}

func (b *boxConn) opErr(op string, err error) error {
	return &net.OpError{Op: op, Net: b.network, Source: b.local, Addr: b.remote, Err: err}
}

// Read reads what the box side sent. It returns io.EOF once the box side
// shut its writing half (or closed) and everything was read.
func (b *boxConn) Read(p []byte) (int, error) {
	for {
		rd := b.rd.wait()
		b.mu.Lock()
		switch {
		case b.closed:
			b.mu.Unlock()
			return 0, b.opErr("read", net.ErrClosed)
		case isClosedChan(rd):
			b.mu.Unlock()
			return 0, b.opErr("read", os.ErrDeadlineExceeded)
		case b.buffered > 0:
			if len(p) == 0 {
				b.mu.Unlock()
				return 0, nil
			}
			n := 0
			for n < len(p) && len(b.chunks) > 0 {
				k := copy(p[n:], b.chunks[0])
				n += k
				if k == len(b.chunks[0]) {
					b.chunks[0] = nil
					b.chunks = b.chunks[1:]
				} else {
					b.chunks[0] = b.chunks[0][k:]
				}
			}
			b.buffered -= int64(n)
			b.unacked += int64(n)
			var grant int64
			if b.unacked >= creditBatch && !b.exited && b.lost == nil {
				grant, b.unacked = b.unacked, 0
			}
			b.mu.Unlock()
			if grant > 0 {
				// A write error means the connection is gone; fail tells us.
				_ = b.c.write(proto.Frame{Type: proto.TypeWindow, ID: b.id, Payload: proto.WindowPayload(proto.FdStdout, uint32(grant))})
			}
			return n, nil
		case b.rEOF:
			b.mu.Unlock()
			return 0, io.EOF
		case b.exitErr != nil:
			err := b.exitErr
			b.mu.Unlock()
			return 0, b.opErr("read", err)
		case b.exited:
			b.mu.Unlock()
			return 0, io.EOF
		case b.lost != nil:
			err := b.lost
			b.mu.Unlock()
			return 0, b.opErr("read", err)
		}
		ch := b.changed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-rd:
		}
	}
}

// Write sends p to the box side. It blocks while the agent has granted no
// credit (the box client is not reading), until the write deadline.
func (b *boxConn) Write(p []byte) (int, error) {
	select {
	case b.wmu <- struct{}{}:
	case <-b.wd.wait():
		return 0, b.opErr("write", os.ErrDeadlineExceeded)
	}
	defer func() { <-b.wmu }()
	n := 0
	for n < len(p) {
		wd := b.wd.wait()
		b.mu.Lock()
		var err error
		switch {
		case b.closed:
			err = net.ErrClosed
		case isClosedChan(wd):
			err = os.ErrDeadlineExceeded
		case b.wclosed:
			err = errWriteClosed
		case b.lost != nil:
			err = b.lost
		case b.exitErr != nil:
			err = b.exitErr
		case b.exited:
			err = syscall.EPIPE // the box side closed the connection
		}
		if err != nil {
			b.mu.Unlock()
			return n, b.opErr("write", err)
		}
		if b.credit > 0 {
			k := min(int64(len(p)-n), b.credit, proto.MaxData)
			b.credit -= k
			b.mu.Unlock()
			if err := b.c.write(proto.Frame{Type: proto.TypeData, ID: b.id, Payload: proto.DataPayload(proto.FdStdin, p[n:n+int(k)])}); err != nil {
				return n, b.opErr("write", fmt.Errorf("lost the connection to box %s: %w", b.boxID, err))
			}
			n += int(k)
			continue
		}
		ch := b.changed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-wd:
		}
	}
	return n, nil
}

var errWriteClosed = errors.New("write after CloseWrite")

// CloseWrite half-closes the connection: the box side reads EOF once it has
// read everything written before, and may still send.
func (b *boxConn) CloseWrite() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return b.opErr("close", net.ErrClosed)
	}
	if b.wclosed {
		b.mu.Unlock()
		return nil
	}
	b.wclosed = true
	b.notifyLocked() // a Write waiting for credit gives up
	b.mu.Unlock()
	b.wmu <- struct{}{} // after the last Write's frames
	defer func() { <-b.wmu }()
	b.mu.Lock()
	gone := b.exited || b.lost != nil || b.closed
	b.mu.Unlock()
	if gone {
		return nil
	}
	if err := b.c.write(proto.Frame{Type: proto.TypeEOF, ID: b.id, Payload: []byte{proto.FdStdin}}); err != nil {
		return b.opErr("close", err)
	}
	return nil
}

// Close closes the connection, as closing a TCP socket does: it returns at
// once, blocked Reads and Writes fail with net.ErrClosed, what was written
// before is still delivered to the box side (for a bounded time), and what
// the box side sends from now on is discarded.
func (b *boxConn) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return b.opErr("close", net.ErrClosed)
	}
	b.closed = true
	tell := !b.exited && b.lost == nil
	b.chunks, b.buffered = nil, 0
	b.notifyLocked()
	b.mu.Unlock()
	b.rd.stop()
	b.wd.stop()
	b.c.dropStream(b.id)
	if tell {
		_ = b.c.notify(proto.MethodConnClose, proto.ConnCloseParams{Stream: b.id})
	}
	return nil
}

// LocalAddr is the box side's listening address (as the box sees it).
func (b *boxConn) LocalAddr() net.Addr { return b.local }

// RemoteAddr is the address of the process in the box that connected.
func (b *boxConn) RemoteAddr() net.Addr { return b.remote }

func (b *boxConn) SetDeadline(t time.Time) error {
	b.rd.set(t)
	b.wd.set(t)
	return nil
}

func (b *boxConn) SetReadDeadline(t time.Time) error {
	b.rd.set(t)
	return nil
}

func (b *boxConn) SetWriteDeadline(t time.Time) error {
	b.wd.set(t)
	return nil
}

// deadline is a settable deadline whose expiry closes a channel, so a
// blocked Read or Write can select on it (the pattern of net.Pipe).
type deadline struct {
	mu     sync.Mutex
	timer  *time.Timer
	cancel chan struct{} // closed when the deadline passes
}

func makeDeadline() deadline { return deadline{cancel: make(chan struct{})} }

// set arms the deadline; the zero time disarms it, a past time expires it at
// once (waking whoever waits).
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.cancel // it fired: wait for it to close the channel
	}
	d.timer = nil
	closed := isClosedChan(d.cancel)
	if t.IsZero() {
		if closed {
			d.cancel = make(chan struct{})
		}
		return
	}
	if dur := time.Until(t); dur > 0 {
		if closed {
			d.cancel = make(chan struct{})
		}
		cancel := d.cancel
		d.timer = time.AfterFunc(dur, func() { close(cancel) })
		return
	}
	if !closed {
		close(d.cancel)
	}
}

// stop disarms a pending timer (the conn is closed).
func (d *deadline) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.cancel
	}
	d.timer = nil
}

func (d *deadline) wait() chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cancel
}

func isClosedChan(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// boxAddr is an in-box address the host could not parse (never expected).
type boxAddr struct{ network, addr string }

func (a boxAddr) Network() string { return a.network }
func (a boxAddr) String() string  { return a.addr }

func parseAddr(network, s string) net.Addr {
	switch network {
	case "tcp":
		if ap, err := netip.ParseAddrPort(s); err == nil {
			return net.TCPAddrFromAddrPort(ap)
		}
	case "unix":
		return &net.UnixAddr{Name: s, Net: "unix"}
	}
	return boxAddr{network, s}
}
