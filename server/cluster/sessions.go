package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// The webhook side's session layer with several nodes: see "Webhooks" in
// the package doc.

// Sessions is the webhook side's session layer with several nodes
// (ghbot.Sessions): a message, a cancel or a stop for a session another
// live node owns is sent to that node, as this node's Token; everything
// else is the Manager's.
type Sessions struct {
	*session.Manager
	token *Token
	self  string
	log   *slog.Logger
}

// NewSessions is mgr's session layer for webhooks on node self, sending
// to other nodes as token.
func NewSessions(mgr *session.Manager, token *Token, self string, log *slog.Logger) *Sessions {
	if log == nil {
		log = slog.Default()
	}
	return &Sessions{Manager: mgr, token: token, self: self, log: log.With("component", "forward")}
}

// SendMessage sends out to session id: here when this node owns the
// session or nobody does (the Manager takes the lease), else to its
// owner. A send to an owner that is not live (its lease runs out soon) is
// ErrUnavailable: the delivery is tried again, and goes to the node that
// took the session over, or here.
func (n *Sessions) SendMessage(ctx context.Context, owner, id string, out session.Outgoing) (*store.Message, error) {
	if node, elsewhere, err := n.Owner(ctx, id); err == nil && elsewhere {
		return n.send(ctx, owner, node, id, out)
	}
	m, err := n.Manager.SendMessage(ctx, owner, id, out)
	var ee *session.ElsewhereError
	if errors.As(err, &ee) && ee.Addr != "" {
		// The session moved between the look-up and the send.
		return n.send(ctx, owner, store.Node{ID: ee.Node, Addr: ee.Addr}, id, out)
	}
	return m, err
}

// Cancel cancels the running turn of session id, on its owner when
// another live node owns it ("@bot stop").
func (n *Sessions) Cancel(ctx context.Context, owner, id string) error {
	call := func(c *client.Client, ctx context.Context) error { return c.Cancel(ctx, id) }
	if node, elsewhere, err := n.Owner(ctx, id); err == nil && elsewhere {
		return n.forward(ctx, owner, node, id, "cancelling the turn of", "", call)
	}
	// Manager.Cancel acts on a runner of this node; without one there is
	// no turn here to cancel (with several nodes, the owner's is
	// forwarded above).
	return n.Manager.Cancel(ctx, owner, id)
}

// Stop ends session id, on its owner when another live node owns it (a
// merged or closed pull request).
func (n *Sessions) Stop(ctx context.Context, owner, id string, req session.StopRequest) error {
	body := wire.StopRequest{Reason: req.Reason}
	switch p := req.Event.(type) {
	case event.PRMerged:
		body.PullRequest = &wire.PullRequestEnd{Repo: p.Repo, Number: p.Number, URL: p.URL, Branch: p.Branch, By: p.By, Merged: true, SHA: p.SHA}
	case event.PRClosed:
		body.PullRequest = &wire.PullRequestEnd{Repo: p.Repo, Number: p.Number, URL: p.URL, Branch: p.Branch, By: p.By}
	case nil:
	default:
		return fmt.Errorf("stopping session %s: a %s event cannot be sent to another node (a bug)", id, p.EventType())
	}
	call := func(c *client.Client, ctx context.Context) error { return c.Stop(ctx, id, body) }
	if node, elsewhere, err := n.Owner(ctx, id); err == nil && elsewhere {
		return n.forward(ctx, owner, node, id, "stopping", "", call)
	}
	err := n.Manager.Stop(ctx, owner, id, req)
	var ee *session.ElsewhereError
	if errors.As(err, &ee) && ee.Addr != "" {
		return n.forward(ctx, owner, store.Node{ID: ee.Node, Addr: ee.Addr}, id, "stopping", "", call)
	}
	return err
}

// forwardTimeout bounds one forwarded send (the owner answers once the
// message is stored).
const forwardTimeout = time.Minute

// send sends out to session id on node, as this node's token, with the
// idempotency key's sender kept.
func (n *Sessions) send(ctx context.Context, owner string, node store.Node, id string, out session.Outgoing) (*store.Message, error) {
	if out.Key == "" || out.Sender == "" {
		// Without a key a retry could store the message twice.
		return nil, fmt.Errorf("sending to session %s on node %s (%s), which owns it: a message sent to another node needs an idempotency key and its sender (a bug: the caller gave none)", id, node.ID, node.Addr)
	}
	var m *wire.Message
	err := n.forward(ctx, owner, node, id, "sending to", out.Sender, func(c *client.Client, ctx context.Context) error {
		var err error
		m, err = c.SendOnce(ctx, id, out.Key, out.Text, out.Mode)
		return err
	})
	if err != nil {
		return nil, err
	}
	n.log.Info("sent a message to a session on its node", "session", id, "node", node.ID, "message", m.ID, "key", out.Key)
	return &store.Message{ID: m.ID, Session: id, Seq: m.Seq, Text: m.Text, Mode: m.Mode, State: store.MessageState(m.State),
		Turn: m.Turn, CreatedAt: m.CreatedAt, DeliveredAt: m.DeliveredAt, Key: out.Key, KeyOwner: out.Sender}, nil
}

// forward makes call to session id's owner, node, as this node's token
// (with sender as the idempotency key's, when not ""); doing words it
// ("sending to", "stopping").
func (n *Sessions) forward(ctx context.Context, owner string, node store.Node, id, doing, sender string, call func(*client.Client, context.Context) error) error {
	where := fmt.Sprintf("%s session %s on node %s (%s), which owns it", doing, id, node.ID, node.Addr)
	if owner != "" {
		// The node's token is an admin's: check the owner's right here.
		if _, err := n.Get(ctx, owner, id); err != nil {
			return err
		}
	}
	secret := n.token.current()
	set := http.Header{forwardedHeader: {n.self}}
	if sender != "" {
		set.Set(server.NodeSenderHeader, sender)
	}
	hc := &http.Client{Transport: headers{base: forwardTransport, set: set}}
	c, err := client.New(node.Addr, secret, hc)
	if err != nil {
		return fmt.Errorf("%s: %w (the node advertises an unusable address: check its --advertise); try again", where, session.ErrUnavailable)
	}
	fctx, cancel := context.WithTimeout(ctx, forwardTimeout)
	defer cancel()
	err = call(c, fctx)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var ce *client.Error
	if !errors.As(err, &ce) {
		return fmt.Errorf("%s: %v: %w; try again", where, err, session.ErrUnavailable)
	}
	switch ce.Status {
	case http.StatusBadRequest:
		problems := ce.Details
		if len(problems) == 0 {
			problems = []string{ce.Message}
		}
		return &session.InputError{Problems: problems}
	case http.StatusNotFound:
		return fmt.Errorf("%s: %s: %w", where, ce.Message, session.ErrNotFound)
	case http.StatusConflict:
		return fmt.Errorf("%s: %s: %w", where, ce.Message, session.ErrConflict)
	case http.StatusUnauthorized:
		// Deleted (harvest token rm, or swept while this node's heartbeat
		// was late)? Then the next attempt goes with a new one.
		if rerr := n.token.renewIfGone(ctx, secret); rerr != nil {
			n.log.Warn("renewing this node's token", "err", rerr)
		}
	}
	return fmt.Errorf("%s: node %s answered %d: %s: %w; try again", where, node.ID, ce.Status, ce.Message, session.ErrUnavailable)
}

// headers is a transport that sets headers on every request.
type headers struct {
	base http.RoundTripper
	set  http.Header
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.set {
		r.Header[k] = v
	}
	return h.base.RoundTrip(r)
}
