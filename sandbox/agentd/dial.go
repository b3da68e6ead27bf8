package agentd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/sandbox/proto"
)

// Box dials: the agent connects from inside the box (its network namespace,
// its filesystem) and hands the connection to the host as a stream, exactly
// like an accepted box-listener connection (fwdConn). See the package doc.

const (
	// maxPendingDials bounds the dial calls one host connection may have
	// waiting for a connect at once.
	maxPendingDials = 64
	// dialTimeout bounds one connect in the box. A loopback connect is
	// answered at once unless the listener's accept queue is full (then the
	// kernel drops the SYN and the client retries for minutes).
	dialTimeout = 30 * time.Second
)

// validDial checks a dial request: only the box's own loopback and its unix
// sockets. The host checks the same first; this is the backstop that keeps
// dial from ever being a way out of a box that has a network.
func validDial(network, addr string) error {
	switch network {
	case "tcp":
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return fmt.Errorf("dial: tcp address %q: want a loopback IP:PORT, like 127.0.0.1:4096", addr)
		}
		if ip := ap.Addr(); !ip.Unmap().IsLoopback() || ip.Zone() != "" {
			return fmt.Errorf("dial: tcp address %q: only loopback addresses in the box (127.0.0.0/8, ::1)", addr)
		}
		if ap.Port() == 0 {
			return fmt.Errorf("dial: tcp address %q: port 0", addr)
		}
	case "unix":
		if !filepath.IsAbs(addr) || len(addr) > 107 {
			return fmt.Errorf("dial: unix socket path %q: want an absolute path under 108 bytes", addr)
		}
	default:
		return fmt.Errorf("dial: network %q: only tcp and unix", network)
	}
	return nil
}

var errDialCancelled = &proto.Error{Code: proto.CodeClosed, Message: "dial cancelled"}

// startDial handles a dial call. Like startAccept it runs on the reader, so
// the stream is bound (a fwdConn waiting for its connection) before any
// later frame is read: a conn_close sent right after the dial finds it and
// cancels the connect. The connect runs on its own goroutine, counted in
// c.calls and bounded by maxPendingDials.
func (c *conn) startDial(id uint32, params json.RawMessage) {
	prm, err := decode[proto.DialParams](params)
	if err == nil {
		if verr := validDial(prm.Network, prm.Addr); verr != nil {
			err = &proto.Error{Code: proto.CodeInvalid, Message: verr.Error()}
		}
	}
	if err != nil {
		c.reply(id, nil, nil, err)
		return
	}
	c.startForward(id, "dial", prm.Stream, prm.Window, &c.dialing, maxPendingDials,
		func() error { return nil },
		func(fc *fwdConn) (any, error) { return c.dial(prm, fc) })
}

// dial connects and binds the connection to fc. It gives up when the host
// aborts the stream, the host connection or the server ends, or the
// timeout passes.
func (c *conn) dial(prm proto.DialParams, fc *fwdConn) (proto.DialReply, error) {
	timeout := dialTimeout
	if d := time.Duration(prm.TimeoutMS) * time.Millisecond; d > 0 && d < timeout {
		timeout = d
	}
	ctx, cancel := context.WithTimeout(c.s.ctx, timeout)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-fc.cancel:
		case <-c.closed:
		case <-ctx.Done():
		}
		cancel()
	}()
	var d net.Dialer
	nc, err := d.DialContext(ctx, prm.Network, prm.Addr)
	// The dialer arms the socket with ctx's deadline too: its "i/o timeout"
	// may come before ctx reports the deadline.
	var ne net.Error
	expired := errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
	cancel()
	wg.Wait()
	if err != nil {
		select {
		case <-fc.cancel:
			return proto.DialReply{}, errDialCancelled
		case <-c.closed:
			return proto.DialReply{}, errDialCancelled
		default:
		}
		return proto.DialReply{}, dialError(err, expired, timeout)
	}
	if prm.Network == "unix" && c.s.isSelf(nc) {
		// The agent's own socket: a connection from the agent would be
		// the host's in the fence's eyes (fence.go).
		nc.Close()
		return proto.DialReply{}, &proto.Error{Code: proto.CodePermission, Message: "dial: that is the agent's own socket"}
	}
	if !fc.bind(nc) {
		nc.Close()
		return proto.DialReply{}, errDialCancelled
	}
	return proto.DialReply{Local: addrString(nc.LocalAddr()), Remote: addrString(nc.RemoteAddr()), InWindow: proto.DefaultWindow}, nil
}

// dialError says what failed and what it means in a box. The host prefixes
// what was dialed and the box.
func dialError(err error, expired bool, timeout time.Duration) error {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return &proto.Error{Code: proto.CodeRefused, Message: "connection refused: nothing listens there in the box"}
	case expired:
		return &proto.Error{Code: proto.CodeTimeout, Message: fmt.Sprintf("not connected within %v (a listener in the box that does not accept?)", timeout)}
	case errors.Is(err, syscall.ENOENT):
		return &proto.Error{Code: proto.CodeNotFound, Message: "no such socket in the box"}
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return &proto.Error{Code: proto.CodePermission, Message: "permission denied: the box user may not connect to that socket"}
	case errors.Is(err, syscall.EADDRNOTAVAIL), errors.Is(err, syscall.ENETUNREACH):
		return &proto.Error{Code: proto.CodeInvalid, Message: errMessage(err) + " (the box has only a loopback interface)"}
	}
	e := errno(err).(*proto.Error)
	e.Message = errMessage(err)
	return e
}
