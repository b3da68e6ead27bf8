package agentd

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/sandbox/proto"
)

// maxConcurrentCalls bounds the calls one connection may have in flight. When
// it is reached the reader stops reading: backpressure on that host only.
// Accept calls, which wait for a box process to connect, and dial calls,
// which wait for a connect in the box, are counted apart (maxPendingAccepts,
// maxPendingDials): they must never hold the reader.
const maxConcurrentCalls = 64

// stream is what a host stream id is bound to: a process's stdio (proc) or a
// forwarded connection (fwdConn). The connection's reader calls these
// methods, so none of them may block.
type stream interface {
	// input queues bytes the host sent on fd 0; false is a protocol violation
	// (more than the credit the agent granted).
	input(b []byte) bool
	// inputEOF: the host sends nothing more on fd 0.
	inputEOF()
	// addCredit returns output credit on fd (a Window frame).
	addCredit(fd byte, n uint32)
	// detach: connection c is going away.
	detach(c *conn)
}

// conn is one host connection.
type conn struct {
	s  *Server
	nc net.Conn
	br *bufio.Reader

	wmu     sync.Mutex
	wcond   *sync.Cond
	queue   []proto.Frame
	writing bool // the writer holds a batch it has not flushed yet
	wclosed bool

	mu        sync.Mutex
	streams   map[uint32]stream // nil once the connection is closing
	listeners map[uint64]*boxListener
	nextLis   uint64
	accepting int // accept calls waiting, bounded by maxPendingAccepts
	dialing   int // dial calls connecting, bounded by maxPendingDials
	hello     bool
	// outside: the peer is the host, not a process in the box (fence.go):
	// only it may arm the fence. offset maps its clock (fence calls).
	outside bool
	offset  fenceOffset

	sem       chan struct{}
	calls     sync.WaitGroup
	closed    chan struct{} // closed by close: wakes waiting accepts
	closeOnce sync.Once
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{
		s:         s,
		nc:        nc,
		br:        bufio.NewReaderSize(nc, 8<<10), // larger frames are read into their payload directly
		streams:   map[uint32]stream{},
		listeners: map[uint64]*boxListener{},
		sem:       make(chan struct{}, maxConcurrentCalls),
		closed:    make(chan struct{}),
		outside:   outsideBox(nc, s.cfg.PID1),
	}
	c.wcond = sync.NewCond(&c.wmu)
	return c
}

// send queues a frame for the writer. It never blocks; frames for a closed
// connection are dropped. The queue is bounded by the protocol: output by the
// credit the host granted, replies by maxConcurrentCalls.
func (c *conn) send(f proto.Frame) {
	c.wmu.Lock()
	if !c.wclosed {
		c.queue = append(c.queue, f)
		c.wcond.Signal()
	}
	c.wmu.Unlock()
}

func (c *conn) sendExit(stream uint32, st proto.ExitStatus) {
	b, _ := json.Marshal(st)
	c.send(proto.Frame{Type: proto.TypeExit, ID: stream, Payload: b})
	c.mu.Lock()
	delete(c.streams, stream)
	c.mu.Unlock()
}

func (c *conn) reply(id uint32, result any, blob []byte, err error) {
	var r proto.Reply
	if err != nil {
		r.Error = toProtoError(err)
	} else if result != nil {
		b, merr := json.Marshal(result)
		if merr != nil {
			r.Error = &proto.Error{Code: proto.CodeInternal, Message: merr.Error()}
		} else {
			r.Result = b
		}
	}
	payload, _ := proto.EncodeMessage(r, blob)
	c.send(proto.Frame{Type: proto.TypeReply, ID: id, Payload: payload})
}

func (c *conn) writer() {
	// 16 KiB: it coalesces the queued frames of a busy stream into fewer
	// writes; every box holds it (64 KiB before: the box's memory, issue 23).
	bw := bufio.NewWriterSize(retryingWriter{w: c.nc, closed: c.closed}, 16<<10)
	for {
		c.wmu.Lock()
		for len(c.queue) == 0 && !c.wclosed {
			c.wcond.Wait()
		}
		if c.wclosed {
			c.wmu.Unlock()
			return
		}
		batch := c.queue
		c.queue = nil
		c.writing = true
		c.wmu.Unlock()
		for _, f := range batch {
			if err := proto.WriteFrame(bw, f); err != nil {
				c.close()
				return
			}
		}
		err := bw.Flush()
		c.wmu.Lock()
		c.writing = false
		c.wcond.Broadcast()
		c.wmu.Unlock()
		if err != nil {
			c.close()
			return
		}
	}
}

// memRetryFor bounds how long a write short of kernel memory is retried.
const memRetryFor = 30 * time.Second

// retryingWriter is the connection as the writer sees it. A write that
// fails for want of kernel memory (ENOMEM, ENOBUFS) is retried with backoff
// for up to memRetryFor instead of ending the connection: a box at its
// memory limit has its socket buffers charged to its cgroup, and until the
// OOM killer frees memory (killing the command that took it) a send can
// fail. Ending the connection then would lose the box to a shortage its own
// command caused, and the host would see only EOF.
type retryingWriter struct {
	w      io.Writer
	closed <-chan struct{}
}

func (r retryingWriter) Write(p []byte) (int, error) {
	written := 0
	wait := time.Millisecond
	var deadline time.Time
	for {
		n, err := r.w.Write(p[written:])
		written += n
		if err == nil || !(errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ENOBUFS)) {
			return written, err
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(memRetryFor)
		} else if time.Now().After(deadline) {
			return written, err
		}
		t := time.NewTimer(wait)
		select {
		case <-r.closed:
			t.Stop()
			return written, err
		case <-t.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// flushed reports whether everything queued so far has been written.
func (c *conn) flushed() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.wclosed || (len(c.queue) == 0 && !c.writing)
}

func (c *conn) close() {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.nc.Close()
		c.wmu.Lock()
		c.wclosed = true
		c.queue = nil
		c.wcond.Broadcast()
		c.wmu.Unlock()
	})
}

// serve runs the reader; the writer runs beside it. When the reader stops, the
// connection's processes are detached (they keep running), its forwarded
// connections aborted and its listeners closed.
func (c *conn) serve() {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); c.writer() }()
	defer func() {
		c.close()
		c.calls.Wait()
		wg.Wait()
		c.mu.Lock()
		streams, listeners := c.streams, c.listeners
		c.streams, c.listeners = nil, nil
		c.mu.Unlock()
		for _, st := range streams {
			st.detach(c)
		}
		for _, l := range listeners {
			l.close()
		}
		c.s.removeConn(c)
	}()
	for {
		f, err := proto.ReadFrame(c.br)
		if err != nil {
			return
		}
		if !c.handle(f) {
			c.s.log.Warn("closing connection after a protocol error", "frame_type", f.Type)
			return
		}
	}
}

// handle processes one frame; false means a protocol violation.
func (c *conn) handle(f proto.Frame) bool {
	switch f.Type {
	case proto.TypeCall:
		var call proto.Call
		blob, err := proto.DecodeMessage(f.Payload, &call)
		if err != nil {
			return false
		}
		if call.Method == proto.MethodHello {
			c.s.log.Debug("hello")
			c.hello = true
			res, err := c.doHello(call.Params)
			c.reply(f.ID, res, nil, err)
			return err == nil
		}
		if !c.hello {
			c.reply(f.ID, nil, nil, &proto.Error{Code: proto.CodeInvalid, Message: "hello must be the first call"})
			return false
		}
		if call.Method == proto.MethodAccept {
			c.startAccept(f.ID, call.Params)
			return true
		}
		if call.Method == proto.MethodDial {
			c.startDial(f.ID, call.Params)
			return true
		}
		select {
		case c.sem <- struct{}{}:
		case <-c.s.ctx.Done():
			return false
		}
		c.calls.Add(1)
		go func() {
			defer c.calls.Done()
			defer func() { <-c.sem }()
			res, out, err := c.dispatch(call.Method, call.Params, blob)
			c.reply(f.ID, res, out, err)
		}()
		return true
	case proto.TypeData, proto.TypeEOF:
		if len(f.Payload) < 1 || f.Payload[0] != proto.FdStdin {
			return false
		}
		st := c.stream(f.ID)
		if st == nil {
			return true // the stream finished; late input is dropped
		}
		if f.Type == proto.TypeEOF {
			st.inputEOF()
			return true
		}
		return st.input(f.Payload[1:])
	case proto.TypeWindow:
		fd, n, err := proto.ParseWindow(f.Payload)
		if err != nil || fd == proto.FdStdin {
			return false
		}
		if st := c.stream(f.ID); st != nil {
			st.addCredit(fd, n)
		}
		return true
	default:
		return false
	}
}

func (c *conn) stream(id uint32) stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

// checkStream fails when a stream id is taken on this connection.
func (c *conn) checkStream(id uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streams == nil {
		return &proto.Error{Code: proto.CodeInvalid, Message: "connection closing"}
	}
	if _, ok := c.streams[id]; ok {
		return &proto.Error{Code: proto.CodeInvalid, Message: fmt.Sprintf("stream %d is already in use", id)}
	}
	return nil
}

func (c *conn) setStream(id uint32, st stream) {
	c.mu.Lock()
	if c.streams != nil {
		c.streams[id] = st
	}
	c.mu.Unlock()
}

// dropStream forgets stream id if it is still bound to st.
func (c *conn) dropStream(id uint32, st stream) {
	c.mu.Lock()
	if c.streams[id] == st {
		delete(c.streams, id)
	}
	c.mu.Unlock()
}

func (c *conn) doHello(params json.RawMessage) (any, error) {
	var h proto.Hello
	if err := json.Unmarshal(params, &h); err != nil {
		return nil, &proto.Error{Code: proto.CodeInvalid, Message: "hello: " + err.Error()}
	}
	if h.Version != proto.Version {
		return nil, &proto.Error{Code: proto.CodeInvalid, Message: fmt.Sprintf(
			"protocol version mismatch: host speaks %d, the box's agent speaks %d; recreate the box with this version of Harvest", h.Version, proto.Version)}
	}
	if h.Claim != nil {
		if err := c.s.claim(*h.Claim); err != nil {
			return nil, err
		}
	} else if !c.s.claimed.Load() {
		return nil, &proto.Error{Code: proto.CodeInvalid, Message: "this agent is waiting to be claimed for a box"}
	}
	id := c.s.id()
	if h.BoxID != "" && id.boxID != "" && h.BoxID != id.boxID {
		return nil, &proto.Error{Code: proto.CodeInvalid, Message: fmt.Sprintf("this is box %s, not %s", id.boxID, h.BoxID)}
	}
	return proto.HelloReply{
		Version:  proto.Version,
		BoxID:    id.boxID,
		PID:      syscall.Getpid(),
		UID:      syscall.Getuid(),
		GID:      syscall.Getgid(),
		Workdir:  id.workdir,
		Started:  c.s.started,
		Deadline: id.deadline,
	}, nil
}

func decode[T any](params json.RawMessage) (T, error) {
	var v T
	if len(params) == 0 {
		return v, &proto.Error{Code: proto.CodeInvalid, Message: "missing parameters"}
	}
	if err := json.Unmarshal(params, &v); err != nil {
		return v, &proto.Error{Code: proto.CodeInvalid, Message: "bad parameters: " + err.Error()}
	}
	return v, nil
}
