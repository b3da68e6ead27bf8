package slacksim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// Socket Mode (socket.go): apps.connections.open, with the app-level
// token, hands out a single-use URL; a WebSocket there gets hello, then
// envelopes, which the app acks by sending back {"envelope_id": ...}
// (with a "payload" for a slash command's answer). Each envelope goes
// to one open connection, in turn.

// conn is one Socket Mode connection.
type conn struct {
	id       int
	ws       *websocket.Conn
	openedAt time.Time
	closing  bool      // a disconnect was sent: no more envelopes
	closeAt  time.Time // when the stand-in closes it
	closed   bool
	acks     int
}

// ConnInfo describes an open Socket Mode connection.
type ConnInfo struct {
	ID       int       `json:"id"`
	OpenedAt time.Time `json:"opened_at"`
	Closing  bool      `json:"closing"`
	Acks     int       `json:"acks"`
}

func (s *Server) connectionsOpen(c *call) (map[string]any, string) {
	ticket := randHex(16)
	s.st.tickets[ticket] = c.now.Add(30 * time.Second)
	u := "ws" + s.url[len("http"):] + "/link/?ticket=" + ticket + "&app_id=" + appID
	return map[string]any{"url": u}, ""
}

// pickConn chooses the open connection that has gone longest without an
// envelope (so envelopes alternate between connections).
func (s *Server) pickConn() *conn {
	var best *conn
	for _, c := range s.st.conns {
		if c.closing || c.closed {
			continue
		}
		if best == nil || s.st.lastUse[c.id] < s.st.lastUse[best.id] || (s.st.lastUse[c.id] == s.st.lastUse[best.id] && c.id < best.id) {
			best = c
		}
	}
	if best != nil {
		s.st.useSeq++
		s.st.lastUse[best.id] = s.st.useSeq
	}
	return best
}

func (s *Server) serveSocket(w http.ResponseWriter, r *http.Request) {
	ticket := r.URL.Query().Get("ticket")
	s.mu.Lock()
	exp, ok := s.st.tickets[ticket]
	delete(s.st.tickets, ticket)
	now := s.clock.Now()
	if s.closed {
		s.mu.Unlock()
		http.Error(w, "closing", http.StatusServiceUnavailable)
		return
	}
	if !ok || !now.Before(exp) {
		s.mu.Unlock()
		http.Error(w, "invalid or used ticket: call apps.connections.open for a new URL", http.StatusUnauthorized)
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	// Slack checks the ticket, not the Origin (slack-go sends one).
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	ws.SetReadLimit(1 << 20)
	s.mu.Lock()
	s.st.connSeq++
	c := &conn{id: s.st.connSeq, ws: ws, openedAt: now}
	s.st.conns[c.id] = c
	open := 0
	for _, x := range s.st.conns {
		if !x.closing && !x.closed {
			open++
		}
	}
	s.mu.Unlock()
	hello, _ := json.Marshal(map[string]any{"type": "hello", "num_connections": open,
		"debug_info":      map[string]any{"host": "applink-sim-1", "build_number": 1, "approximate_connection_time": 18060},
		"connection_info": map[string]any{"app_id": appID}})
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	err = ws.Write(ctx, websocket.MessageText, hello)
	cancel()
	if err == nil {
		s.wake()
		pctx, stopPings := context.WithCancel(s.ctx)
		var pings sync.WaitGroup
		pings.Add(1)
		go func() {
			defer pings.Done()
			s.ping(pctx, ws)
		}()
		s.readAcks(c)
		stopPings()
		pings.Wait()
	}
	ws.CloseNow()
	s.mu.Lock()
	delete(s.st.conns, c.id)
	delete(s.st.lastUse, c.id)
	s.mu.Unlock()
	s.logger.Info("socket closed", "conn", c.id)
}

// ping pings a connection every PingInterval until ctx ends; one that
// does not answer in time is closed (its reader then ends).
func (s *Server) ping(ctx context.Context, ws *websocket.Conn) {
	t := time.NewTicker(s.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, s.opts.PingInterval)
		err := ws.Ping(pctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				ws.CloseNow()
			}
			return
		}
	}
}

// readAcks reads what the app sends: acks, until the connection ends.
func (s *Server) readAcks(c *conn) {
	for {
		_, b, err := c.ws.Read(s.ctx)
		if err != nil {
			return
		}
		var ack struct {
			EnvelopeID string          `json:"envelope_id"`
			Payload    json.RawMessage `json:"payload"`
		}
		if json.Unmarshal(b, &ack) != nil || ack.EnvelopeID == "" {
			s.logger.Warn("socket: not an ack", "conn", c.id, "frame", string(b))
			continue
		}
		s.mu.Lock()
		e := s.envelopeByID(ack.EnvelopeID)
		if l := &s.st.loseAcks; l.N > 0 && !c.closed && e != nil && strings.Contains(string(e.Payload), l.Containing) {
			// Lost with its connection (LoseAcks): the envelope's
			// deadline sends it again, on whatever connection is open.
			l.N--
			c.closed = true
			s.mu.Unlock()
			s.logger.Info("socket: an ack lost with its connection", "conn", c.id, "envelope_id", ack.EnvelopeID)
			c.ws.CloseNow()
			return
		}
		if e != nil {
			c.acks++
			if n := len(e.Attempts); n > 0 && e.State == StateSent {
				e.Attempts[n-1].AckConn = c.id
			}
			s.acked(e, ack.Payload, s.clock.Now())
		} else {
			s.logger.Warn("socket: ack of an unknown envelope", "conn", c.id, "envelope_id", ack.EnvelopeID)
		}
		s.mu.Unlock()
	}
}

// Connections lists the open Socket Mode connections.
func (s *Server) Connections() []ConnInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ConnInfo
	for _, c := range s.st.conns {
		if !c.closed {
			out = append(out, ConnInfo{ID: c.id, OpenedAt: c.openedAt, Closing: c.closing, Acks: c.acks})
		}
	}
	slices.SortFunc(out, func(a, b ConnInfo) int { return a.ID - b.ID })
	return out
}

// DisconnectSpec asks connections to go: Slack sends {"type":
// "disconnect", "reason": ...} ("warning" some seconds before it closes
// a connection, "refresh_requested" when the app should reconnect now)
// and closes after Grace (on the stand-in's clock; default 10 s for a
// warning, none otherwise). Conn 0 means every open connection.
type DisconnectSpec struct {
	Reason string        `json:"reason"`
	Grace  time.Duration `json:"grace"`
	Conn   int           `json:"conn"`
}

// Disconnect sends disconnect messages and returns how many connections
// got one. No envelope goes to a connection after its disconnect.
func (s *Server) Disconnect(spec DisconnectSpec) (int, error) {
	switch spec.Reason {
	case "warning", "refresh_requested", "link_disabled", "too_many_websockets":
	default:
		return 0, fmt.Errorf("disconnect reason %q: warning, refresh_requested, link_disabled or too_many_websockets", spec.Reason)
	}
	if spec.Grace == 0 && spec.Reason == "warning" {
		spec.Grace = 10 * time.Second
	}
	msg, _ := json.Marshal(map[string]any{"type": "disconnect", "reason": spec.Reason, "debug_info": map[string]any{"host": "applink-sim-1"}})
	s.mu.Lock()
	now := s.clock.Now()
	var targets []*conn
	for _, c := range s.st.conns {
		if !c.closing && !c.closed && (spec.Conn == 0 || spec.Conn == c.id) {
			c.closing = true
			c.closeAt = now.Add(spec.Grace)
			targets = append(targets, c)
		}
	}
	s.mu.Unlock()
	if spec.Conn != 0 && len(targets) == 0 {
		return 0, fmt.Errorf("no open connection %d", spec.Conn)
	}
	for _, c := range targets {
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		if err := c.ws.Write(ctx, websocket.MessageText, msg); err != nil {
			c.ws.CloseNow()
		}
		cancel()
	}
	s.wake()
	return len(targets), nil
}

// LoseSpec says which acks LoseAcks loses: the next N of envelopes whose
// payload contains Containing ("": any).
type LoseSpec struct {
	N          int    `json:"n"`
	Containing string `json:"containing"`
}

// LoseAcks makes the next acks spec names, whichever connection they come
// on, be lost with their connection: it is dropped (as Drop) before the
// ack counts, as a network failure right after the app sent it would.
// The envelopes are sent again when their ack deadlines pass, on
// whatever connection is open then: an app with several connections gets
// them on another, one with one connection after it reconnects.
func (s *Server) LoseAcks(spec LoseSpec) {
	spec.N = max(spec.N, 0)
	s.mu.Lock()
	s.st.loseAcks = spec
	s.mu.Unlock()
}

// Drop ends connections abruptly, without a close frame (as a network
// failure would). Conn 0 means every one. Unacked envelopes sent on them
// are redelivered when their ack deadline passes.
func (s *Server) Drop(connID int) int {
	s.mu.Lock()
	var targets []*conn
	for _, c := range s.st.conns {
		if !c.closed && (connID == 0 || c.id == connID) {
			c.closed = true
			targets = append(targets, c)
		}
	}
	s.mu.Unlock()
	for _, c := range targets {
		c.ws.CloseNow()
	}
	return len(targets)
}
