package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/sandbox/proto"
)

// Box dials: the reverse of box listeners. See "Box listeners and dials" in
// the package doc.

// Dial connects, from inside the box, to a server listening there and
// returns the connection on the host. It is how the host reaches a server a
// process in the box runs (an agent CLI's HTTP API on the box's loopback)
// although the box has no network: the in-box agent connects, and the
// connection's bytes travel over the connection Harvest already has to the
// agent, exactly like a box listener's connections (same flow control, same
// half-close with CloseWrite, same deadlines).
//
// network is "tcp", with addr a loopback "IP:PORT" of the box (127.0.0.1,
// any of 127.0.0.0/8, or [::1]; no names are resolved), or "unix", with
// addr an absolute socket path in the box. Nothing else is dialed, whatever
// network the box has: Dial is for the box's own servers, never a way out
// of it. On the host backend the box's loopback and filesystem are the
// host's.
//
// Dial returns once the connection is established in the box, or fails
// with an error naming the box and the address: nothing listening there
// errors.Is syscall.ECONNREFUSED, a missing unix socket fs.ErrNotExist, a
// listener that never accepts (its queue full) syscall.ETIMEDOUT after the
// agent's bound (30s, or ctx's deadline if sooner). When ctx ends first the
// dial is abandoned in the box and the error wraps context.Cause(ctx). A
// lost connection to the box gives ErrClosed.
//
// The conn also has CloseWrite() error, which half-closes it. LocalAddr is
// the agent's end in the box, RemoteAddr the address dialed. The
// connection belongs to the Sandbox's connection to the agent: closing the
// Sandbox or losing the box ends it.
func (sb *Sandbox) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if err := checkDial(network, addr); err != nil {
		return nil, fmt.Errorf("dialing in box %s: %w", sb.handle.ID, err)
	}
	wrap := func(err error) error {
		return fmt.Errorf("dialing %s %s in box %s: %w", network, addr, sb.handle.ID, err)
	}
	if ctx.Err() != nil {
		return nil, wrap(context.Cause(ctx))
	}
	c := sb.c
	bc := newBoxConn(c, sb.handle.ID, network, proto.DefaultWindow)
	id, err := c.registerStream(bc)
	if err != nil {
		return nil, wrap(err)
	}
	bc.id = id
	prm := proto.DialParams{Network: network, Addr: addr, Stream: id, Window: proto.DefaultWindow}
	if dl, ok := ctx.Deadline(); ok {
		prm.TimeoutMS = max(1, time.Until(dl).Milliseconds())
	}
	var r proto.DialReply
	if _, err := c.call(ctx, proto.MethodDial, prm, nil, &r); err != nil {
		c.dropStream(id)
		if ctx.Err() != nil {
			// Abandoned: the agent may be connecting still, or have
			// connected already. Either way it closes the socket.
			_ = c.notify(proto.MethodConnClose, proto.ConnCloseParams{Stream: id, Abort: true})
			return nil, wrap(context.Cause(ctx))
		}
		var pe *proto.Error
		if errors.As(err, &pe) && strings.HasPrefix(pe.Message, "unknown method") {
			return nil, fmt.Errorf("dialing in box %s: its agent predates box dials: recreate the box with this version of Harvest", sb.handle.ID)
		}
		return nil, wrap(err)
	}
	bc.local, bc.remote = parseAddr(network, r.Local), parseAddr(network, r.Remote)
	bc.addStdinCredit(int64(r.InWindow))
	return bc, nil
}

// checkDial validates Dial's arguments with errors that say what to change.
func checkDial(network, addr string) error {
	switch network {
	case "tcp":
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("tcp address %q: want IP:PORT, like 127.0.0.1:4096", addr)
		}
		if host == "localhost" {
			return fmt.Errorf("tcp address %q: use 127.0.0.1 or [::1]: the agent resolves no names", addr)
		}
		ip, err := netip.ParseAddr(host)
		if err != nil || ip.Zone() != "" {
			return fmt.Errorf("tcp address %q: the host part must be a loopback IP address, like 127.0.0.1", addr)
		}
		if !ip.Unmap().IsLoopback() {
			return fmt.Errorf("tcp address %q: Dial reaches only the box's own loopback (127.0.0.0/8 or ::1), never another host", addr)
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return fmt.Errorf("tcp address %q: the port must be a number from 1 to 65535", addr)
		}
	case "unix":
		if !filepath.IsAbs(addr) || strings.ContainsRune(addr, 0) {
			return fmt.Errorf("unix socket path %q: use an absolute path inside the box, like /tmp/server.sock", addr)
		}
		if len(addr) > 107 {
			return fmt.Errorf("unix socket path %q is %d bytes: the limit is 107", addr, len(addr))
		}
	default:
		return fmt.Errorf("network %q is not supported: use \"tcp\" (a loopback IP:PORT inside the box) or \"unix\" (a socket path inside the box)", network)
	}
	return nil
}
