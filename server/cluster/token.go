package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/store"
)

// Node tokens: see "Node tokens" in the package doc.

// Token is this node's own token towards the others: made when the node
// starts (NewToken), in its memory only, deleted when it stops (Remove).
type Token struct {
	st   store.Store
	node string
	log  *slog.Logger

	mu     sync.Mutex
	secret string
	id     string
}

// NewToken makes and stores node's token.
func NewToken(ctx context.Context, st store.Store, node string, log *slog.Logger) (*Token, error) {
	if log == nil {
		log = slog.Default()
	}
	n := &Token{st: st, node: node, log: log.With("component", "node-token")}
	if err := n.mint(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *Token) mint(ctx context.Context) error {
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
func (n *Token) current() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.secret
}

// renewIfGone replaces the token when secret, refused by another node,
// is the current one and is no longer in the store (somebody deleted it:
// harvest token rm, or a sweep while this node's heartbeat was late).
func (n *Token) renewIfGone(ctx context.Context, secret string) error {
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

// Remove deletes the token (the node stops).
func (n *Token) Remove() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n.mu.Lock()
	id := n.id
	n.mu.Unlock()
	if err := n.st.DeleteToken(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		n.log.Warn("deleting this node's token (any other node deletes it once this node's heartbeat runs out)", "token", id, "err", err)
	}
}

// TokenGrace is how old a node's token must be before another node
// deletes it for its node being absent from the node list: a starting
// node makes its token around its first heartbeat.
const TokenGrace = time.Minute

// sweepTokens deletes the tokens of nodes that are not live (they
// died without deleting theirs), made more than grace ago.
func sweepTokens(ctx context.Context, st store.Store, grace time.Duration, log *slog.Logger) error {
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

// SweepTokens deletes the tokens of nodes that died without deleting
// theirs (older than TokenGrace), now and then every period, until ctx
// ends. Every node runs it: a token is deleted by whichever node sees its
// node gone first.
func SweepTokens(ctx context.Context, st store.Store, period time.Duration, log *slog.Logger) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := sweepTokens(ctx, st, TokenGrace, log); err != nil && ctx.Err() == nil {
			log.Warn("deleting the tokens of nodes that are gone", "err", err)
		}
		t.Reset(period)
	}
}

// NodeLive is server.Config.NodeLive: whether node is in the store's list
// of live nodes (a node's token is valid only while it is).
func NodeLive(st store.Store) func(ctx context.Context, node string) (bool, error) {
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
