package agentd

import (
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/sandbox/proto"
	"golang.org/x/sys/unix"
)

// A pump moves one output fd of a process to the attached host (see the
// package doc, "Output"): it reads only as much as the host granted credit
// for, keeps a bounded ring while detached, and after the process exits
// drains what is buffered before it reports EOF.

func (o *pump) hostDoneCh() <-chan struct{} { return o.done }

// pumpBufs recycles read buffers: an exec would otherwise leave 64 KiB of
// garbage, and the agent's resident memory tracks its heap.
var pumpBufs = sync.Pool{New: func() any { b := make([]byte, proto.MaxData); return &b }}

// run is the pump goroutine for one output fd.
func (o *pump) run() {
	p := o.p
	bp := pumpBufs.Get().(*[]byte)
	defer pumpBufs.Put(bp)
	buf := *bp
	lingered := false
	for {
		p.mu.Lock()
		for p.att != nil && o.credit <= 0 && !o.overLimit() && p.s.ctx.Err() == nil {
			p.cond.Wait()
		}
		n := len(buf)
		if p.att != nil && !o.overLimit() && int64(n) > o.credit {
			n = int(o.credit)
		}
		p.mu.Unlock()
		if p.s.ctx.Err() != nil {
			break
		}
		if !lingered && p.hasExited() {
			// Re-arm the linger for this read: a deadline armed at exit may
			// have expired while we waited for credit, and an expired
			// deadline fails the read without looking at the data still
			// buffered in the pipe.
			_ = o.f.SetReadDeadline(time.Now().Add(exitLinger))
		}

		if testHookBeforeRead != nil {
			testHookBeforeRead(p)
		}
		k, err := o.f.Read(buf[:n])
		if k > 0 {
			o.deliver(buf[:k])
		}
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && !lingered {
			// An expired deadline fails a Read before it looks at the pipe
			// (internal/poll checks the deadline first), so what the process
			// wrote before it exited may still be buffered: a pump that was
			// not scheduled within exitLinger of the exit (a loaded machine,
			// gVisor) would otherwise report EOF and then drop the command's
			// whole output. Take what is there without waiting; only an empty
			// pipe ends the linger.
			k, rerr := o.readNow(buf[:n])
			if k > 0 {
				o.deliver(buf[:k])
				continue // the loop re-arms the linger for the next read
			}
			if rerr != nil {
				break // EOF, EIO (pty hangup) or closed
			}
			// The process exited and nothing more arrived within exitLinger:
			// report EOF to the host, then keep draining (and dropping) until
			// whoever still holds the pipe lets go.
			lingered = true
			o.markHostDone()
			_ = o.f.SetReadDeadline(time.Time{})
			continue
		}
		break // EOF, EIO (pty hangup) or closed
	}
	o.markHostDone()
	o.f.Close()
}

// readNow reads what the pipe holds without waiting and without looking at
// the read deadline: (0, nil) when it is empty, io.EOF when every writer
// has closed it. The pump's fd is non-blocking (it is in the poller, which
// SetReadDeadline needs).
func (o *pump) readNow(b []byte) (int, error) {
	rc, err := o.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	if err := rc.Control(func(fd uintptr) {
		for {
			n, rerr = unix.Read(int(fd), b)
			if rerr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return 0, err
	}
	switch {
	case rerr == unix.EAGAIN:
		return 0, nil
	case rerr != nil:
		return 0, rerr
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (o *pump) overLimit() bool { return o.p.limit > 0 && o.delivered >= o.p.limit }

// deliver hands bytes read from the process to the host, the ring, or the
// floor, under the process lock.
func (o *pump) deliver(b []byte) {
	p := o.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if o.hostDone {
		o.dropped += int64(len(b))
		return
	}
	if p.limit > 0 {
		room := p.limit - o.delivered
		if room <= 0 {
			o.dropped += int64(len(b))
			return
		}
		if int64(len(b)) > room {
			o.dropped += int64(len(b)) - room
			b = b[:room]
		}
	}
	if p.att == nil {
		o.ring = append(o.ring, b...)
		if over := len(o.ring) - ringSize; over > 0 {
			o.dropped += int64(over)
			o.ring = append(o.ring[:0], o.ring[over:]...)
		}
		o.delivered += int64(len(b))
		return
	}
	o.credit -= int64(len(b))
	o.delivered += int64(len(b))
	p.att.c.send(proto.Frame{Type: proto.TypeData, ID: p.att.stream, Payload: proto.DataPayload(o.fd, b)})
}

func (o *pump) markHostDone() {
	p := o.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if o.hostDone {
		return
	}
	o.hostDone = true
	if p.att != nil {
		p.att.c.send(proto.Frame{Type: proto.TypeEOF, ID: p.att.stream, Payload: []byte{o.fd}})
	}
	close(o.done)
}
