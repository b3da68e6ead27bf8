package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/ghbot"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// Webhooks with several nodes. GitHub delivers to whichever node its
// webhook URL reaches, and that node processes the delivery (package
// ghbot). When the delivery is a message for a session another node owns
// (a follow-up comment, a review comment, a failed check suite), the node
// sends it to the owner as a client's request would be forwarded:
//
//	node B: delivery ─► ghbot ─► nodeSessions.SendMessage
//	          session.Manager.Owner: node A ─► POST A/v1/sessions/{id}/messages
//	              Authorization: Bearer <B's node token>
//	              Idempotency-Key: github-<delivery>   Harvest-Sender: github
//	              Harvest-Forwarded-By: B
//	node A: the token is B's and B is live ─► Manager.SendMessage as ghbot
//	        would on A: owner "" (admin), Key github-<delivery>, Sender github
//
// The message is keyed as the GitHub app's (ghbot.Owner) wherever it is
// stored, so a delivery processed twice (a retry after a lost answer, a
// redelivery, two nodes at once) stores it once: the owner finds the key.
//
// B's token (server.NewNodeToken) is made when B starts, kept in B's
// memory only, valid only while B's heartbeat is, and only for that one
// route (see server's "Node tokens"); B deletes it when it stops, and any
// node deletes those of nodes that died (sweepNodeTokens).

// nodeToken is this node's own token towards the others.
type nodeToken struct {
	st   store.Store
	node string
	log  *slog.Logger

	mu     sync.Mutex
	secret string
	id     string
}

// newNodeToken makes and stores node's token.
func newNodeToken(ctx context.Context, st store.Store, node string, log *slog.Logger) (*nodeToken, error) {
	n := &nodeToken{st: st, node: node, log: log}
	if err := n.mint(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *nodeToken) mint(ctx context.Context) error {
	secret, t := server.NewNodeToken(n.node, time.Now())
	if err := n.st.CreateToken(ctx, t); err != nil {
		return fmt.Errorf("storing node %s's token (for sending webhooks' messages to other nodes' sessions): %w", n.node, err)
	}
	n.mu.Lock()
	n.secret, n.id = secret, t.ID
	n.mu.Unlock()
	return nil
}

// current is the token's secret.
func (n *nodeToken) current() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.secret
}

// renewIfGone replaces the token when secret, refused by another node,
// is the current one and is no longer in the store (somebody deleted it:
// harvest token rm, or a sweep while this node's heartbeat was late).
func (n *nodeToken) renewIfGone(ctx context.Context, secret string) error {
	_, err := n.st.TokenByHash(ctx, server.HashToken(secret))
	if !errors.Is(err, store.ErrNotFound) {
		return err // still there (refused for another reason), or unknown
	}
	n.mu.Lock()
	same := secret == n.secret
	old := n.id
	n.mu.Unlock()
	if !same {
		return nil // renewed meanwhile
	}
	if err := n.mint(ctx); err != nil {
		return err
	}
	if err := n.st.DeleteToken(ctx, old); err != nil && !errors.Is(err, store.ErrNotFound) {
		n.log.Warn("deleting this node's previous token", "token", old, "err", err)
	}
	n.log.Info("this node's token was refused as unknown; made a new one", "old", old)
	return nil
}

// remove deletes the token (the node stops).
func (n *nodeToken) remove() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n.mu.Lock()
	id := n.id
	n.mu.Unlock()
	if err := n.st.DeleteToken(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		n.log.Warn("deleting this node's token (any other node deletes it once this node's heartbeat runs out)", "token", id, "err", err)
	}
}

// nodeTokenGrace is how old a node's token must be before another node
// deletes it for its node being absent from the node list: a starting
// node makes its token around its first heartbeat.
const nodeTokenGrace = time.Minute

// sweepNodeTokens deletes the tokens of nodes that are not live (they
// died without deleting theirs), made more than grace ago.
func sweepNodeTokens(ctx context.Context, st store.Store, grace time.Duration, log *slog.Logger) error {
	ts, err := st.ListTokens(ctx)
	if err != nil {
		return err
	}
	var live map[string]bool
	for _, t := range ts {
		node, ok := server.NodeOf(t)
		if !ok || time.Since(t.CreatedAt) < grace {
			continue
		}
		if live == nil {
			nodes, err := st.ListNodes(ctx)
			if err != nil {
				return err
			}
			live = map[string]bool{}
			for _, n := range nodes {
				live[n.ID] = true
			}
		}
		if live[node] {
			continue
		}
		if err := st.DeleteToken(ctx, t.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		log.Info("deleted the token of a node that is gone", "token", t.ID, "node", node)
	}
	return nil
}

// sweepNodeTokensEvery runs sweepNodeTokens now and then every period
// until ctx ends.
func sweepNodeTokensEvery(ctx context.Context, st store.Store, period time.Duration, log *slog.Logger) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := sweepNodeTokens(ctx, st, nodeTokenGrace, log); err != nil && ctx.Err() == nil {
			log.Warn("deleting the tokens of nodes that are gone", "err", err)
		}
		t.Reset(period)
	}
}

// nodeLive is server.Config.NodeLive: whether node is in the store's
// list of live nodes.
func nodeLive(st store.Store) func(ctx context.Context, node string) (bool, error) {
	return func(ctx context.Context, node string) (bool, error) {
		nodes, err := st.ListNodes(ctx)
		if err != nil {
			return false, err
		}
		for _, n := range nodes {
			if n.ID == node {
				return true, nil
			}
		}
		return false, nil
	}
}

// nodeSessions is the webhook side's session layer with several nodes: a
// message for a session another live node owns is sent to that node
// (see the top of this file); everything else is the Manager's.
type nodeSessions struct {
	*session.Manager
	token *nodeToken
	self  string
	log   *slog.Logger
}

var _ ghbot.Sessions = (*nodeSessions)(nil)

// SendMessage sends out to session id: here when this node owns the
// session or nobody does (the Manager takes the lease), else to its
// owner. A send to an owner that is not live (its lease runs out soon) is
// ErrUnavailable: the delivery is tried again, and goes to the node that
// took the session over, or here.
func (n *nodeSessions) SendMessage(ctx context.Context, owner, id string, out session.Outgoing) (*store.Message, error) {
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
func (n *nodeSessions) Cancel(ctx context.Context, owner, id string) error {
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
func (n *nodeSessions) Stop(ctx context.Context, owner, id string, req session.StopRequest) error {
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
func (n *nodeSessions) send(ctx context.Context, owner string, node store.Node, id string, out session.Outgoing) (*store.Message, error) {
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
func (n *nodeSessions) forward(ctx context.Context, owner string, node store.Node, id, doing, sender string, call func(*client.Client, context.Context) error) error {
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
