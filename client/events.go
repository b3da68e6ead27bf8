package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/wire"
)

// StreamOptions configure Events.
type StreamOptions struct {
	// After is the seq of the last event the caller has: the stream starts
	// with the next one (0: from the first event).
	After int64
	// MaxRetries gives up after this many reconnects in a row that got no
	// event (0: keep trying until the context ends).
	MaxRetries int
	// MinBackoff and MaxBackoff bound the wait before a reconnect (default
	// 50ms and 2s; doubling in between). A stream cut off for reading too
	// slowly reconnects at once.
	MinBackoff, MaxBackoff time.Duration
	// IdleTimeout reconnects a stream that got nothing, not even a
	// keepalive, for this long (default 1 minute: 4 of the server's
	// keepalives).
	IdleTimeout time.Duration
}

// Stream reads a session's events, reconnecting with Last-Event-ID when
// the connection drops, the server restarts or cuts the stream off, so the
// reader gets every stored event once, in order, seqs with no gap. Token
// deltas, tool output and terminal bytes come as they happen as live
// pieces (event.Event.Live > 0: not stored, the seq of the stored event
// before them), then again, joined, as a stored event; a reader that
// prints as it goes passes what Next returns through an event.Joiner, one
// that wants the durable record only skips live pieces (event/live.go).
// Under pressure, and across a reconnect, live pieces may be missing;
// the stored event after them never is.
//
// The one exception to "no gap": events a server's retention policy
// removed (harvest serve --event-retention) come as one
// event.EventsCompacted per removed run, with the run's last seq; it
// stands for the seqs from its From through its own, and
// EventsCompacted.Missed(last) says how many of them a reader that had
// seq last never saw. A stream resumed inside a removed run gets its
// marker first.
//
// A Stream is read from one goroutine; Close may be called from any.
type Stream struct {
	c    *Client
	id   string
	ctx  context.Context
	opts StreamOptions

	last     int64
	failures int
	connects int

	mu     sync.Mutex
	closed bool
	conn   *sseConn
}

// sseConn is one connection of a stream.
type sseConn struct {
	resp   *http.Response
	rd     *bufio.Reader
	cancel context.CancelFunc
	idle   *time.Timer
}

func (cn *sseConn) close() {
	cn.idle.Stop()
	cn.cancel()
	cn.resp.Body.Close()
}

// Events opens a session's event stream. It connects on the first Next.
func (c *Client) Events(ctx context.Context, id string, o StreamOptions) *Stream {
	if o.MinBackoff <= 0 {
		o.MinBackoff = 50 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(2*time.Second, o.MinBackoff)
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = time.Minute
	}
	return &Stream{c: c, id: id, ctx: ctx, opts: o, last: o.After}
}

// LastSeq is the seq of the last event Next returned (or After).
func (s *Stream) LastSeq() int64 { return s.last }

// Reconnects counts the connection attempts after the first.
func (s *Stream) Reconnects() int { return max(s.connects-1, 0) }

// Close ends the stream; a Next in progress returns an error.
func (s *Stream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.conn != nil {
		s.conn.close()
		s.conn = nil
	}
	return nil
}

// ErrStreamClosed is returned by Next after Close.
var ErrStreamClosed = errors.New("event stream closed")

// streamEnd is the server's final error event (wire.StreamErrorEvent).
type streamEnd struct{ wire.ErrorInfo }

func (e *streamEnd) Error() string { return e.Code + ": " + e.Message }

// Next returns the next event. It blocks until one arrives, reconnecting
// as needed; it fails when the context ends, after Close, when the session
// is deleted or not visible (an *Error with status 404), on any other 4xx,
// and after MaxRetries fruitless reconnects.
func (s *Stream) Next() (event.Event, error) {
	for {
		if err := s.ctx.Err(); err != nil {
			s.drop()
			return event.Event{}, err
		}
		cn, err := s.current()
		if err != nil {
			return event.Event{}, err
		}
		if cn == nil {
			if err := s.connect(); err != nil {
				if !retryable(err) {
					return event.Event{}, err
				}
				if err := s.backoff(err); err != nil {
					return event.Event{}, err
				}
			}
			continue
		}
		ev, err := s.read(cn)
		if err == nil {
			if ev.Live > 0 {
				// A live piece (event/live.go): not stored, it carries the
				// seq of the stored event before it, and leaves LastSeq
				// alone. One not at LastSeq is of a run this stream did
				// not follow from its start: the stored event brings it.
				if ev.Seq != s.last {
					continue
				}
				s.failures = 0
				return ev, nil
			}
			if ev.Seq <= s.last {
				s.drop()
				return event.Event{}, fmt.Errorf("session %s: the server sent event %d after %d: events must come in order, once (a server bug)", s.id, ev.Seq, s.last)
			}
			s.last = ev.Seq
			s.failures = 0
			return ev, nil
		}
		s.drop()
		if _, cerr := s.current(); cerr != nil {
			return event.Event{}, cerr
		}
		var end *streamEnd
		switch {
		case s.ctx.Err() != nil:
			return event.Event{}, s.ctx.Err()
		case errors.As(err, &end) && end.Code == wire.StreamTooSlow:
			// Cut off for reading too slowly: the events are in the store;
			// reconnect at once and replay them.
		case errors.As(err, &end) && end.Code == wire.StreamDeleted:
			return event.Event{}, &Error{Status: http.StatusNotFound, Code: wire.CodeNotFound, Message: fmt.Sprintf("session %s was deleted", s.id)}
		case errors.Is(err, errProtocol):
			return event.Event{}, err
		default:
			if err := s.backoff(err); err != nil {
				return event.Event{}, err
			}
		}
	}
}

func (s *Stream) current() (*sseConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrStreamClosed
	}
	return s.conn, nil
}

func (s *Stream) drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		s.conn.close()
		s.conn = nil
	}
}

// backoff waits before the next reconnect, or fails when retries are
// exhausted or the context ends.
func (s *Stream) backoff(cause error) error {
	s.failures++
	if s.opts.MaxRetries > 0 && s.failures > s.opts.MaxRetries {
		return fmt.Errorf("session %s: gave up after %d reconnects: %w", s.id, s.opts.MaxRetries, cause)
	}
	d := s.opts.MinBackoff << min(s.failures-1, 16)
	if d > s.opts.MaxBackoff || d <= 0 {
		d = s.opts.MaxBackoff
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

// retryable: network errors and 5xx are worth another try; 4xx are not.
func retryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Status >= 500 || e.Status == http.StatusTooManyRequests || e.Status == http.StatusRequestTimeout
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrStreamClosed)
}

func (s *Stream) connect() error {
	s.connects++
	ctx, cancel := context.WithCancel(s.ctx)
	u := s.c.base.JoinPath("/v1/sessions/" + url.PathEscape(s.id) + "/events")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		cancel()
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if s.c.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.c.token)
	}
	if s.last > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(s.last, 10))
	}
	resp, err := s.c.hc.Do(req)
	if err != nil {
		cancel()
		return s.c.netError(err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		cancel()
		return readError(resp)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		resp.Body.Close()
		cancel()
		return fmt.Errorf("%w: the server answered the event stream with Content-Type %q", errProtocol, resp.Header.Get("Content-Type"))
	}
	cn := &sseConn{resp: resp, rd: bufio.NewReaderSize(resp.Body, 64<<10), cancel: cancel, idle: time.AfterFunc(s.opts.IdleTimeout, cancel)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		cn.close()
		return ErrStreamClosed
	}
	s.conn = cn
	return nil
}

var errProtocol = errors.New("not an event stream")

// maxEvent bounds one event's bytes.
const maxEvent = 16 << 20

// read returns the next event of the connection: it reads lines until a
// blank one dispatches an event with data, skipping comments and retry.
func (s *Stream) read(cn *sseConn) (event.Event, error) {
	var id, typ string
	var data []byte
	size := 0
	for {
		line, err := cn.rd.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: gather it.
			buf := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = cn.rd.ReadSlice('\n')
				buf = append(buf, line...)
				if len(buf) > maxEvent {
					return event.Event{}, fmt.Errorf("%w: a line of more than %d bytes", errProtocol, maxEvent)
				}
			}
			line = buf
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return event.Event{}, fmt.Errorf("reading the event stream: %w", err)
		}
		cn.idle.Reset(s.opts.IdleTimeout)
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if len(line) == 0 {
			if data == nil {
				id, typ = "", ""
				continue
			}
			return decodeSSE(id, typ, data)
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "id":
			id = string(value)
		case "event":
			typ = string(value)
		case "data":
			size += len(value)
			if size > maxEvent {
				return event.Event{}, fmt.Errorf("%w: an event of more than %d bytes", errProtocol, maxEvent)
			}
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, value...)
			if data == nil {
				data = []byte{}
			}
		}
	}
}

// decodeSSE turns one dispatched SSE event into an event.Event, or the
// server's final error event into a *streamEnd.
func decodeSSE(id, typ string, data []byte) (event.Event, error) {
	if typ == wire.StreamErrorEvent {
		var eb wire.ErrorBody
		if err := json.Unmarshal(data, &eb); err != nil || eb.Error.Code == "" {
			return event.Event{}, fmt.Errorf("%w: an error event that is not {\"error\":{...}}: %q", errProtocol, data)
		}
		return event.Event{}, &streamEnd{eb.Error}
	}
	var ev event.Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return event.Event{}, fmt.Errorf("%w: event %s: %v", errProtocol, id, err)
	}
	if id != strconv.FormatInt(ev.Seq, 10) || typ != string(ev.Type()) {
		return event.Event{}, fmt.Errorf("%w: the SSE id %q and event %q do not match the event's seq %d and type %s", errProtocol, id, typ, ev.Seq, ev.Type())
	}
	return ev, nil
}
