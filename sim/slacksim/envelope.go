package slacksim

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/coder/websocket"
)

// EnvelopeKind is what an envelope carries, named as Socket Mode names
// its envelope types.
type EnvelopeKind string

const (
	KindEventsAPI     EnvelopeKind = "events_api"     // an event_callback
	KindInteractive   EnvelopeKind = "interactive"    // block_actions
	KindSlashCommands EnvelopeKind = "slash_commands" // a slash command
)

// EnvelopeState is where an envelope is in its life:
//
//	waiting ──(a connection, or the Request URL)──▶ sent ──(ack / 200 in time)──▶ acked
//	   ▲                                              │
//	   └────(events_api: missed, retries left)────────┤
//	                                                  └──(missed, none left)──▶ failed
//
// A waiting envelope is due at its time (now, or after the backoff of a
// retry); in Socket Mode it waits for a connection. Interactions and
// slash commands are never retried (Slack shows the person an error).
type EnvelopeState string

const (
	StateWaiting EnvelopeState = "waiting"
	StateSent    EnvelopeState = "sent"
	StateAcked   EnvelopeState = "acked"
	StateFailed  EnvelopeState = "failed"
)

// Attempt is one delivery of an envelope.
type Attempt struct {
	At      time.Time `json:"at"`
	Conn    int       `json:"conn,omitempty"`     // Socket Mode: the connection
	AckConn int       `json:"ack_conn,omitempty"` // Socket Mode: the connection its ack came on (an app acks on the one it got it on)
	Status  int       `json:"status,omitempty"`   // HTTP: the answer's status
	Outcome string    `json:"outcome"`            // acked, timeout, http_timeout, http_error, connection_failed, pending
}

// Envelope is what the stand-in delivered, or tries to: an event, an
// interaction or a slash command, with each attempt.
type Envelope struct {
	ID         string          `json:"envelope_id"`
	Kind       EnvelopeKind    `json:"kind"`
	Topic      string          `json:"topic"` // events: app.mention, message.channels, ...; else the payload type or command
	Payload    json.RawMessage `json:"payload"`
	State      EnvelopeState   `json:"state"`
	Attempts   []Attempt       `json:"attempts"`
	Acks       int             `json:"acks"` // acks received (a late one after a redelivery counts too)
	AckPayload json.RawMessage `json:"ack_payload,omitempty"`
}

type envelope struct {
	Envelope
	at          time.Time // waiting: when due
	deadline    time.Time // sent: when missed
	retryReason string
	cancel      context.CancelFunc // sent over HTTP: ends the request
}

// queue adds an envelope; the dispatcher delivers it.
func (s *Server) queue(e *envelope, now time.Time) {
	e.ID = uuid()
	e.State = StateWaiting
	e.at = now
	s.st.envelopes = append(s.st.envelopes, e)
	s.wake()
}

func (s *Server) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Envelopes returns every envelope, in the order queued.
func (s *Server) Envelopes() []Envelope {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Envelope, len(s.st.envelopes))
	for i, e := range s.st.envelopes {
		out[i] = e.Envelope
		out[i].Attempts = slices.Clone(e.Attempts)
	}
	return out
}

// WaitEnvelopes waits until no envelope is waiting or sent: each was
// acked or failed. With a fake clock, a missed ack needs the clock moved.
func (s *Server) WaitEnvelopes(ctx context.Context) ([]Envelope, error) {
	return s.WaitEnvelope(ctx, func(es []Envelope) bool {
		for _, e := range es {
			if e.State == StateWaiting || e.State == StateSent {
				return false
			}
		}
		return true
	})
}

// WaitEnvelope waits until cond holds over the envelopes and returns
// them. It polls (every 5 ms of real time, a condition on state that
// other goroutines change, not a sleep standing in for one).
func (s *Server) WaitEnvelope(ctx context.Context, cond func([]Envelope) bool) ([]Envelope, error) {
	for {
		es := s.Envelopes()
		if cond(es) {
			return es, nil
		}
		select {
		case <-ctx.Done():
			return es, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// frame is an envelope as Socket Mode sends it.
func (e *envelope) frame() []byte {
	f := map[string]any{"envelope_id": e.ID, "payload": json.RawMessage(e.Payload), "type": string(e.Kind),
		"accepts_response_payload": e.Kind == KindSlashCommands}
	if e.Kind == KindEventsAPI {
		f["retry_attempt"] = len(e.Attempts)
		f["retry_reason"] = e.retryReason
	}
	b, _ := json.Marshal(f)
	return b
}

type send struct {
	c *conn
	b []byte
}

// dispatch is the one goroutine that moves envelopes (see
// EnvelopeState) and closes connections whose disconnect grace is over.
// It holds s.mu while deciding, and writes to sockets without it.
func (s *Server) dispatch() {
	for {
		var sends []send
		var closes []*conn
		s.mu.Lock()
		now := s.clock.Now()
		var next time.Time
		soon := func(t time.Time) {
			if next.IsZero() || t.Before(next) {
				next = t
			}
		}
		for _, c := range s.st.conns {
			if c.closing && !c.closed {
				if now.Before(c.closeAt) {
					soon(c.closeAt)
				} else {
					c.closed = true
					closes = append(closes, c)
				}
			}
		}
		for _, e := range s.st.envelopes {
			switch e.State {
			case StateSent:
				if now.Before(e.deadline) {
					soon(e.deadline)
					continue
				}
				reason := "timeout"
				if s.st.requestURL != "" {
					reason = "http_timeout"
					if e.cancel != nil {
						e.cancel()
					}
				}
				s.missed(e, reason, 0, now)
				if e.State == StateWaiting {
					soon(e.at)
				}
			case StateWaiting:
				if now.Before(e.at) {
					soon(e.at)
					continue
				}
				if s.st.requestURL != "" {
					s.postEnvelope(e, now)
					soon(e.deadline)
					continue
				}
				c := s.pickConn()
				if c == nil {
					continue // a new connection wakes the dispatcher
				}
				e.State = StateSent
				e.deadline = now.Add(s.opts.AckTimeout)
				sends = append(sends, send{c, e.frame()})
				e.Attempts = append(e.Attempts, Attempt{At: now, Conn: c.id, Outcome: "pending"})
				soon(e.deadline)
			}
		}
		s.mu.Unlock()
		for _, x := range sends {
			ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
			if err := x.c.ws.Write(ctx, websocket.MessageText, x.b); err != nil {
				x.c.ws.CloseNow() // the ack deadline redelivers
			}
			cancel()
		}
		for _, c := range closes {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				c.ws.Close(websocket.StatusNormalClosure, "disconnect")
			}()
		}
		var at <-chan time.Time
		release := func() {}
		if !next.IsZero() {
			at, release = s.clock.At(next)
		}
		select {
		case <-s.ctx.Done():
			release()
			s.mu.Lock()
			for _, e := range s.st.envelopes {
				if e.cancel != nil {
					e.cancel()
				}
			}
			s.mu.Unlock()
			return
		case <-s.kick:
		case <-at:
		}
		release()
	}
}

// missed records a missed attempt: an events_api envelope with retries
// left waits for its backoff, anything else fails.
func (s *Server) missed(e *envelope, outcome string, status int, now time.Time) {
	if n := len(e.Attempts); n > 0 {
		e.Attempts[n-1].Outcome = outcome
		e.Attempts[n-1].Status = status
	}
	e.cancel = nil
	retries := len(e.Attempts) - 1
	if e.Kind != KindEventsAPI || retries >= len(s.opts.RetryBackoff) {
		e.State = StateFailed
		return
	}
	e.State = StateWaiting
	e.at = now.Add(s.opts.RetryBackoff[retries])
	e.retryReason = outcome
	s.wake()
}

// acked records an ack (Socket Mode) or a 200 (HTTP). A late ack of an
// envelope that was already redelivered, or one waiting to be, ends it
// too; a second ack is only counted.
func (s *Server) acked(e *envelope, payload json.RawMessage, now time.Time) {
	e.Acks++
	switch e.State {
	case StateAcked, StateFailed:
		return
	case StateSent:
		if n := len(e.Attempts); n > 0 {
			e.Attempts[n-1].Outcome = "acked"
		}
	}
	e.State = StateAcked
	e.cancel = nil
	if len(payload) > 0 && string(payload) != "null" && string(payload) != "{}" {
		e.AckPayload = payload
		if e.Kind == KindSlashCommands {
			s.commandResponse(e, payload, now)
		}
	}
}

func (s *Server) envelopeByID(id string) *envelope {
	for i := len(s.st.envelopes) - 1; i >= 0; i-- {
		if e := s.st.envelopes[i]; e.ID == id {
			return e
		}
	}
	return nil
}
