package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// An event stream that follows the session's owner: see "Streams" in the
// package doc.

// follow serves session id's event stream to the client, from whichever
// node can serve it now, as one stream: legs, each from the owner (a
// forwarded stream) or from this node (its journal and the store), one
// after the other, the next one starting after the last event the client
// got (Last-Event-ID), so that the client sees no gap and no repeat and
// need not reconnect. A leg from the owner ends when its lease moves
// (watched every poll), when the owner does not answer (its headers
// within the store budget and a second), or when its connection breaks;
// a leg served here ends when another node takes the lease. Only a
// stream.error event (the stream ends for a reason the client must see:
// too slow, deleted, shutting down) or the client leaving ends the
// client's stream.
func (f *forwarder) follow(w http.ResponseWriter, r *http.Request, id string) {
	ctx := r.Context()
	rl := &relay{w: w, rc: http.NewResponseController(w)}
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		rl.last, rl.resume = v, true
	} else if v := r.URL.Query().Get("since"); v != "" {
		rl.last, rl.resume = v, true
	}
	var failed owner // the owner whose leg did not start
	for leg := 0; ctx.Err() == nil && !rl.ended; leg++ {
		began := time.Now()
		o, err := f.resolve(ctx, id)
		if err != nil {
			if !rl.started && errors.Is(err, store.ErrUnavailable) {
				unavailable(w, "finding the node that runs session "+id+": "+err.Error()+"; try again")
				return
			}
			o = owner{place: here} // served from the store here: its errors are the API's
		}
		if o.place == there && (o.node.ID != failed.node.ID || moved(failed.lease, o.lease)) {
			if !f.remoteLeg(ctx, rl, r, id, o) {
				failed = o
			}
			continue
		}
		// This node's, nobody's, a dead node's, or its node does not
		// answer: served here until another node takes the lease.
		failed = owner{}
		f.watchStream(rl.leg(), f.resumed(r, rl), id, o.lease)
		if time.Since(began) < f.poll {
			// Nothing changed yet: do not spin.
			select {
			case <-ctx.Done():
			case <-time.After(f.poll):
			}
		}
	}
}

// resumed is r for a leg after the client's last event.
func (f *forwarder) resumed(r *http.Request, rl *relay) *http.Request {
	out := r.Clone(r.Context())
	if rl.resume {
		out.Header.Set("Last-Event-ID", rl.last)
		q := out.URL.Query()
		q.Del("since")
		out.URL.RawQuery = q.Encode()
	}
	return out
}

// remoteLeg relays the stream from o's node until it ends; false when the
// node did not answer (no leg: the caller serves it here meanwhile).
func (f *forwarder) remoteLeg(ctx context.Context, rl *relay, r *http.Request, id string, o owner) bool {
	target, err := url.Parse(o.node.Addr)
	if err != nil || target.Host == "" {
		f.log.Warn("a node advertises an unusable address", "node", o.node.ID, "addr", o.node.Addr)
		return false
	}
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := f.watch(lctx, cancel, id, o.lease)
	defer stop()
	in := f.resumed(r, rl)
	out, err := http.NewRequestWithContext(lctx, http.MethodGet, target.JoinPath(in.URL.Path).String(), nil)
	if err != nil {
		return false
	}
	out.URL.RawQuery = in.URL.RawQuery
	for k, v := range in.Header {
		out.Header[k] = v
	}
	out.Header.Set(forwardedHeader, f.self)
	// The owner's headers come once it has read the store: within its
	// budget. A node that says nothing longer is paused or cut off.
	slow := time.AfterFunc(f.budget+time.Second, func() { cancel(errNoAnswer) })
	resp, err := forwardTransport.RoundTrip(out)
	slow.Stop()
	if err != nil {
		f.log.Warn("forwarding an event stream to the session's node", "session", id, "node", o.node.ID, "err", err, "cause", context.Cause(lctx))
		return false
	}
	defer resp.Body.Close()
	leg := rl.leg()
	for k, v := range resp.Header {
		leg.Header()[k] = v
	}
	leg.WriteHeader(resp.StatusCode)
	buf := make([]byte, 32<<10)
	for !rl.ended {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			leg.Write(buf[:n])
			leg.Flush()
		}
		if err != nil {
			break
		}
	}
	if c := context.Cause(lctx); errors.Is(c, errLeaseMoved) {
		f.log.Info("an event stream's session moved to another node: following it", "session", id, "from", o.node.ID)
	}
	return true
}

// errNoAnswer ends a leg whose node sent no headers in time.
var errNoAnswer = errors.New("the session's node did not answer")

// watchStream serves an event stream of session id here, from this node's
// journal, and ends it once another node has taken the session's lease
// (every poll it reads the lease: held by another node, and not the lease
// before, read before the stream was opened). The client (or follow, for
// a stream that follows the owner) resumes after its last event from the
// new owner, and gets from its replay what this stream missed.
func (f *forwarder) watchStream(w http.ResponseWriter, r *http.Request, id string, before store.Lease) {
	ctx, cancel := context.WithCancel(r.Context())
	watched := make(chan struct{})
	defer func() { cancel(); <-watched }()
	go func() {
		defer close(watched)
		t := time.NewTicker(f.every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			l, err := f.leases.get(store.WithBudget(context.WithoutCancel(ctx), f.every), id, false)
			if err == nil && l.Node != "" && l.Node != f.self && (l.Node != before.Node || l.Epoch != before.Epoch) {
				f.log.Info("ending an event stream served here: another node runs the session now", "session", id, "node", l.Node)
				cancel()
				return
			}
		}
	}()
	f.next.ServeHTTP(w, r.WithContext(ctx))
}

// relay writes the legs of one event stream to its client as one stream:
// the first leg's status and headers, every leg's events whole (a leg cut
// mid-event loses that event's partial bytes, which the next leg sends
// again, as it starts after the last whole one), and the id of the last
// event, where the next leg starts.
type relay struct {
	w  http.ResponseWriter
	rc *http.ResponseController

	started bool   // the client has its status and headers
	ended   bool   // a stream.error, or an answer that is not a stream, was sent: nothing more
	last    string // the last event's id the client got
	resume  bool   // last is set (by the client, or an event)
	// retrySent: the client got the stream's retry line (the first leg's).
	retrySent bool

	// The current leg.
	header  http.Header
	status  int  // 0 until its WriteHeader
	refused bool // a later leg that is not a stream: dropped
	raw     bool // the first leg is not a stream (an error): passed as it is
	partial []byte
}

// leg starts a leg and returns its writer.
func (rl *relay) leg() *relayLeg {
	rl.header, rl.status, rl.refused, rl.partial = http.Header{}, 0, false, rl.partial[:0]
	return &relayLeg{rl}
}

// relayLeg is the http.ResponseWriter of one leg.
type relayLeg struct{ rl *relay }

func (l *relayLeg) Header() http.Header { return l.rl.header }

func (l *relayLeg) WriteHeader(code int) {
	rl := l.rl
	if rl.status != 0 || code < 200 {
		return
	}
	rl.status = code
	stream := code == http.StatusOK
	switch {
	case !rl.started:
		for k, v := range rl.header {
			rl.w.Header()[k] = v
		}
		rl.w.WriteHeader(code)
		rl.started, rl.raw = true, !stream
		if !stream {
			rl.ended = true
		}
	case !stream:
		// The stream is open: a leg that refuses (its node is draining,
		// the session is gone) ends it with a stream.error the client
		// reconnects on.
		rl.refused = true
		rl.endWith(wire.StreamUnavailable, "the node serving this stream refused to go on with it ("+strconv.Itoa(code)+"): reconnect with Last-Event-ID")
	}
}

func (l *relayLeg) Write(b []byte) (int, error) {
	rl := l.rl
	if rl.status == 0 {
		l.WriteHeader(http.StatusOK)
	}
	switch {
	case rl.raw:
		_ = rl.rc.SetWriteDeadline(time.Now().Add(relayWriteTimeout))
		return rl.w.Write(b)
	case rl.refused || rl.ended:
		return len(b), nil
	}
	rl.partial = append(rl.partial, b...)
	for {
		i := bytes.Index(rl.partial, []byte("\n\n"))
		if i < 0 {
			return len(b), nil
		}
		block := rl.partial[:i+2]
		rl.block(block)
		rl.partial = rl.partial[i+2:]
		if rl.ended {
			return len(b), nil
		}
	}
}

func (l *relayLeg) Flush() { l.rl.rc.Flush() }

// Unwrap lets the API's stream set its write deadline on the client's
// connection.
func (l *relayLeg) Unwrap() http.ResponseWriter { return l.rl.w }

// block writes one whole SSE block (an event, a comment, retry) to the
// client, but for a later leg's retry line (the client has it), and
// notes the event's id and whether it is the last (stream.error).
func (rl *relay) block(b []byte) {
	retryOnly := true
	for _, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n\n")), []byte("\n")) {
		switch {
		case bytes.HasPrefix(line, []byte("id: ")):
			rl.last, rl.resume = string(line[4:]), true
		case bytes.Equal(line, []byte("event: "+wire.StreamErrorEvent)):
			rl.ended = true
		}
		if !bytes.HasPrefix(line, []byte("retry: ")) {
			retryOnly = false
		}
	}
	if retryOnly {
		if rl.retrySent {
			return
		}
		rl.retrySent = true
	}
	rl.write(b)
}

// write writes b to the client, within relayWriteTimeout (a leg served
// here set a deadline on the connection; a client that stopped reading is
// cut off).
func (rl *relay) write(b []byte) {
	_ = rl.rc.SetWriteDeadline(time.Now().Add(relayWriteTimeout))
	if _, err := rl.w.Write(b); err != nil {
		rl.ended = true
	}
}

// relayWriteTimeout bounds each write to the client (server.Config's
// WriteTimeout's default).
const relayWriteTimeout = 30 * time.Second

// endWith ends the client's stream with a stream.error event.
func (rl *relay) endWith(code, msg string) {
	b, _ := json.Marshal(wire.ErrorBody{Error: wire.ErrorInfo{Code: code, Message: msg}})
	rl.write([]byte("event: " + wire.StreamErrorEvent + "\ndata: " + string(b) + "\n\n"))
	rl.rc.Flush()
	rl.ended = true
}
