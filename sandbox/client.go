package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/harvest-dev/harvest/sandbox/proto"
)

// client is the host end of the agent connection: concurrent calls matched to
// replies by id, and streams with flow control (see package proto): process
// stdio (stream, process.go) and forwarded connections (boxConn, forward.go).
//
// Concurrency: one reader goroutine (owned by the client, waited for in close)
// routes every incoming frame; writes are serialised by wmu and go straight to
// the socket. mu guards the call and stream tables.
type client struct {
	nc  net.Conn
	wmu sync.Mutex
	bw  *bufio.Writer

	mu      sync.Mutex
	calls   map[uint32]chan callResult
	streams map[uint32]streamSink
	nextID  uint32
	err     error // set once the connection is gone

	done chan struct{} // closed when the reader exits
}

// streamSink receives a stream's frames. The reader calls its methods, so
// they must not block.
type streamSink interface {
	// push delivers Data from the agent; an error is a protocol violation
	// (more than the credit granted) and ends the connection.
	push(fd byte, b []byte) error
	eof(fd byte)
	// addStdinCredit is a Window frame for fd 0 (host → box credit).
	addStdinCredit(n int64)
	// exit is the stream's last frame; the stream is dropped before.
	exit(st proto.ExitStatus)
	// fail: the connection is gone.
	fail(err error)
}

type callResult struct {
	result json.RawMessage
	blob   []byte
	err    error
}

// connBuffer sizes the buffers of a connection to a box's agent, one each
// way. Every idle session holds them: 64 KiB each was 128 KiB of harvest
// serve's memory per idle session (a heap profile at 200 sessions, issue 23).
// A frame larger than the buffer is read into its payload and written from
// it directly, so larger buffers only save a syscall now and then.
const connBuffer = 8 << 10

func newClient(nc net.Conn) *client {
	c := &client{
		nc:      nc,
		bw:      bufio.NewWriterSize(nc, connBuffer),
		calls:   map[uint32]chan callResult{},
		streams: map[uint32]streamSink{},
		done:    make(chan struct{}),
	}
	go c.readLoop()
	return c
}

func (c *client) write(f proto.Frame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := proto.WriteFrame(c.bw, f); err != nil {
		c.nc.Close()
		return fmt.Errorf("%w: %v", ErrClosed, err)
	}
	if err := c.bw.Flush(); err != nil {
		c.nc.Close()
		return fmt.Errorf("%w: %v", ErrClosed, err)
	}
	return nil
}

func (c *client) newID() uint32 {
	c.nextID++
	if c.nextID == 0 {
		c.nextID = 1
	}
	return c.nextID
}

// call sends a request and waits for its reply. If ctx ends first the reply is
// discarded when it arrives (the agent still completes the call).
func (c *client) call(ctx context.Context, method string, params any, blob []byte, result any) ([]byte, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	payload, err := proto.EncodeMessage(proto.Call{Method: method, Params: p}, blob)
	if err != nil {
		return nil, err
	}
	ch := make(chan callResult, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	id := c.newID()
	c.calls[id] = ch
	c.mu.Unlock()

	if err := c.write(proto.Frame{Type: proto.TypeCall, ID: id, Payload: payload}); err != nil {
		c.mu.Lock()
		delete(c.calls, id)
		c.mu.Unlock()
		return nil, err
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		if result != nil && len(r.result) > 0 {
			if err := json.Unmarshal(r.result, result); err != nil {
				return nil, fmt.Errorf("sandbox: bad %s reply: %w", method, err)
			}
		}
		return r.blob, nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.calls, id)
		c.mu.Unlock()
		return nil, ctx.Err()
	}
}

// notify sends a call without waiting for its reply: its id is never
// registered, so the reply is dropped when it arrives.
func (c *client) notify(method string, params any) error {
	p, err := json.Marshal(params)
	if err != nil {
		return err
	}
	payload, err := proto.EncodeMessage(proto.Call{Method: method, Params: p}, nil)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	id := c.newID()
	c.mu.Unlock()
	return c.write(proto.Frame{Type: proto.TypeCall, ID: id, Payload: payload})
}

// registerStream allocates a stream id before the call that will feed it.
func (c *client) registerStream(s streamSink) (uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	id := c.newID()
	for c.streams[id] != nil {
		id = c.newID()
	}
	c.streams[id] = s
	return id, nil
}

func (c *client) dropStream(id uint32) {
	c.mu.Lock()
	delete(c.streams, id)
	c.mu.Unlock()
}

func (c *client) stream(id uint32) streamSink {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

func (c *client) readLoop() {
	br := bufio.NewReaderSize(c.nc, connBuffer)
	var err error
	for {
		var f proto.Frame
		f, err = proto.ReadFrame(br)
		if err != nil {
			break
		}
		if err = c.route(f); err != nil {
			break
		}
	}
	c.fail(fmt.Errorf("%w: %v", ErrClosed, err))
}

func (c *client) route(f proto.Frame) error {
	switch f.Type {
	case proto.TypeReply:
		var r proto.Reply
		blob, err := proto.DecodeMessage(f.Payload, &r)
		if err != nil {
			return err
		}
		c.mu.Lock()
		ch := c.calls[f.ID]
		delete(c.calls, f.ID)
		c.mu.Unlock()
		if ch != nil {
			res := callResult{result: r.Result, blob: blob}
			if r.Error != nil {
				res.err = r.Error
			}
			ch <- res
		}
	case proto.TypeData:
		if len(f.Payload) < 1 {
			return errors.New("empty data frame")
		}
		if s := c.stream(f.ID); s != nil {
			return s.push(f.Payload[0], f.Payload[1:])
		}
	case proto.TypeEOF:
		if len(f.Payload) != 1 {
			return errors.New("bad eof frame")
		}
		if s := c.stream(f.ID); s != nil {
			s.eof(f.Payload[0])
		}
	case proto.TypeWindow:
		fd, n, err := proto.ParseWindow(f.Payload)
		if err != nil {
			return err
		}
		if s := c.stream(f.ID); s != nil && fd == proto.FdStdin {
			s.addStdinCredit(int64(n))
		}
	case proto.TypeExit:
		var st proto.ExitStatus
		if err := json.Unmarshal(f.Payload, &st); err != nil {
			return err
		}
		if s := c.stream(f.ID); s != nil {
			c.dropStream(f.ID)
			s.exit(st)
		}
	default:
		return fmt.Errorf("unexpected frame type %d", f.Type)
	}
	return nil
}

// fail marks the connection dead and wakes every waiter.
func (c *client) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	calls := c.calls
	streams := c.streams
	c.calls = map[uint32]chan callResult{}
	c.streams = map[uint32]streamSink{}
	c.mu.Unlock()
	for _, ch := range calls {
		ch <- callResult{err: err}
	}
	for _, s := range streams {
		s.fail(err)
	}
	c.nc.Close()
	select {
	case <-c.done:
	default:
		close(c.done)
	}
}

// close closes the connection and waits for the reader.
func (c *client) close() error {
	c.nc.Close()
	<-c.done
	return nil
}

// alive reports whether the connection is still up.
func (c *client) alive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err == nil
}
