package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
)

// Event streams (GET /v1/sessions/{id}/events) are Server-Sent Events:
//
//	retry: 1000                 once, first: how long EventSource waits to reconnect
//	id: 42                      per event: its seq
//	event: tool.started         its type
//	data: {"session":...}       the whole event as one line of JSON
//	: keepalive                 a comment every KeepAlive while nothing happens
//	event: stream.error         last, when the stream ends for a reason the
//	data: {"error":{...}}       client should know (no id: it is not an event)
//
// The stream starts after Last-Event-ID (the header, as EventSource sends
// it on reconnecting) or ?since=N, or from the first event. It replays the
// stored events, then goes live (package journal guarantees no gap and no
// duplicate at the handoff; with Config.Follow, package journal/natsbus
// does, for a session that runs on another server). A client cut off for reading too slowly
// (error code too_slow) or by a restart (unavailable) reconnects with the
// last id it got and loses nothing.
//
// The final event is named stream.error, not error: EventSource fires its
// own "error" event when the connection fails, so a browser hands an event
// named error to onerror as if the connection had broken, and reconnects
// (the npm eventsource client mixes it with its connection errors too).
// stream.error reaches addEventListener("stream.error", ...) with its
// payload in every client (server/browser_test.go: Chromium and npm).
//
// A Last-Event-ID (or since) beyond the session's newest event is a 400
// that names the newest seq, not an empty stream: the client has events
// this server never stored (another server's, or a store restored from a
// backup), and would otherwise wait for seqs it will never be sent.

// maxBatch bounds the events written between two flushes: events that are
// already waiting are written together, and one flush sends them all, so a
// burst costs one syscall rather than one each. A lone event is flushed as
// soon as it is written.
const maxBatch = 256

func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	var after int64
	var e *apiError
	from := "since"
	q := r.URL.Query()
	for k := range q {
		if k != "since" {
			return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("unknown query parameter %q: the event stream takes since (or the Last-Event-ID header)", k))
		}
	}
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		from = "Last-Event-ID"
		after, e = parseSeq("Last-Event-ID", v)
	} else if q.Has("since") {
		after, e = parseSeq("since", q.Get("since"))
	}
	if e != nil {
		return e
	}
	// The stream ends when the client goes away or the server drains.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stopDrain := context.AfterFunc(s.drain, cancel)
	defer stopDrain()

	v, e := s.sessionFor(r, c, r.PathValue("id"), authz.Read)
	if e != nil {
		return e
	}
	// Someone else's session is checked again while the stream is open
	// (access.go): a reader whose access ends stops getting its events.
	var recheck <-chan time.Time
	if !c.admin() && !c.subject().Owns(v.Session) {
		t := time.NewTicker(s.access.Recheck())
		defer t.Stop()
		recheck = t.C
	}
	sub, err := s.subscribe(ctx, "", r.PathValue("id"), after)
	if err != nil {
		return fromManager(err)
	}
	defer sub.Close()
	if after > 0 {
		// Read after subscribing: the newest seq only grows, so an after
		// beyond it now was beyond it when the client asked.
		last, err := s.cfg.Store.LastSeq(ctx, r.PathValue("id"))
		if err != nil {
			return fromManager(err)
		}
		if after > last {
			return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf(
				"%s %d is past the session's last event, %d: no event after %d was ever stored here, so the stream would wait for nothing; ask again with %s %d or less (0 for all)",
				from, after, last, last, from, last))
		}
	}

	sw := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: s.cfg.WriteTimeout}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	sw.buf = append(sw.buf, "retry: 1000\n\n"...)
	if sw.flush() != nil {
		return nil
	}

	keep := time.NewTicker(s.cfg.KeepAlive)
	defer keep.Stop()
	for {
		select {
		case ev, ok := <-sub.Events():
			if !ok {
				s.endStream(sw, sub.Err(), r)
				return nil
			}
			if err := sw.event(ev); err != nil {
				s.log.Error("event stream: encoding an event", "session", ev.Session, "seq", ev.Seq, "err", err)
				sw.errorEvent(StreamInternal, err.Error())
				return nil
			}
			// Whatever else is ready goes in the same flush.
		batch:
			for range maxBatch - 1 {
				select {
				case ev, ok := <-sub.Events():
					if !ok {
						break batch // the next receive sees the close
					}
					if err := sw.event(ev); err != nil {
						s.log.Error("event stream: encoding an event", "session", ev.Session, "seq", ev.Seq, "err", err)
						sw.errorEvent(StreamInternal, err.Error())
						return nil
					}
				default:
					break batch
				}
			}
			if sw.flush() != nil {
				return nil // the client is gone or stalled
			}
			keep.Reset(s.cfg.KeepAlive)
		case <-keep.C:
			sw.buf = append(sw.buf, ": keepalive\n\n"...)
			if sw.flush() != nil {
				return nil
			}
		case <-recheck:
			if code, msg := s.stillReads(r, c, v.Session); code != "" {
				sw.errorEvent(code, msg)
				return nil
			}
		}
	}
}

// subscribe opens the session's event stream after seq after: from the
// local journal, or with Config.Follow from the event bus.
func (s *Server) subscribe(ctx context.Context, owner, id string, after int64) (EventStream, error) {
	if s.cfg.Follow == nil {
		return s.cfg.Manager.Subscribe(ctx, owner, id, after)
	}
	if _, err := s.cfg.Manager.Get(ctx, owner, id); err != nil {
		return nil, err
	}
	f, err := s.cfg.Follow(ctx, id, after)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("%w: %w", session.ErrNotFound, err)
	case errors.Is(err, journal.ErrClosed):
		return nil, fmt.Errorf("%w: %w", session.ErrUnavailable, err)
	}
	return f, err
}

// endStream writes why a subscription ended, when the client is still
// there to read it.
func (s *Server) endStream(sw *sseWriter, err error, r *http.Request) {
	switch {
	case s.drain.Err() != nil, errors.Is(err, journal.ErrClosed):
		sw.errorEvent(StreamUnavailable, "the server is shutting down: reconnect with Last-Event-ID in a few seconds")
	case r.Context().Err() != nil:
		// The client went away; nobody reads.
	case errors.Is(err, journal.ErrTooSlow):
		sw.errorEvent(StreamTooSlow, "this stream read events too slowly and was cut off: reconnect with Last-Event-ID set to the last id you got, and nothing is lost")
	case errors.Is(err, journal.ErrDeleted):
		sw.errorEvent(StreamDeleted, "the session was deleted")
	case errors.Is(err, store.ErrUnavailable):
		sw.errorEvent(StreamUnavailable, "the server's database does not answer now: reconnect with Last-Event-ID in a few seconds")
	case err == nil:
		sw.errorEvent(StreamUnavailable, "the stream ended: reconnect with Last-Event-ID")
	default:
		s.log.Error("event stream ended", "path", r.URL.Path, "err", err)
		sw.errorEvent(StreamInternal, "the stream failed: "+err.Error()+": reconnect with Last-Event-ID")
	}
}

// sseWriter formats events into buf and writes them out on flush, each
// write bounded by timeout so a stalled client cannot hold the handler.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     []byte
}

// event appends one event: id, type and the envelope as one line of JSON
// (encoding/json never writes a raw newline, so one data line is enough).
func (sw *sseWriter) event(ev event.Event) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	sw.buf = appendEvent(sw.buf, strconv.FormatInt(ev.Seq, 10), string(ev.Type()), b)
	return nil
}

func appendEvent(buf []byte, id, typ string, data []byte) []byte {
	if id != "" {
		buf = append(buf, "id: "...)
		buf = append(buf, id...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "event: "...)
	buf = append(buf, typ...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, data...)
	return append(buf, "\n\n"...)
}

// errorEvent writes the final error event and flushes it.
func (sw *sseWriter) errorEvent(code, msg string) {
	b, _ := json.Marshal(ErrorBody{Error: ErrorInfo{Code: code, Message: msg}})
	sw.buf = appendEvent(sw.buf, "", StreamErrorEvent, b)
	sw.flush()
}

func (sw *sseWriter) flush() error {
	if len(sw.buf) == 0 {
		return nil
	}
	// Not every ResponseWriter supports deadlines (httptest's recorder
	// does not); without one the write simply has no bound.
	_ = sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout))
	_, err := sw.w.Write(sw.buf)
	sw.buf = sw.buf[:0]
	if err != nil {
		return err
	}
	return sw.rc.Flush()
}
