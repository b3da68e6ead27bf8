package cluster

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// TestSweepTokens: a node's token is deleted once its node is gone
// from the node list and the token is older than the grace; a live
// node's token, a young one and a person's token stay. A node
// whose token was deleted makes a new one when another node refuses it,
// and deletes it when it stops.
func TestSweepTokens(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.HeartbeatNode(ctx, store.Node{ID: "a-000001", Addr: "http://127.0.0.1:1"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	add := func(name string, node bool, at time.Time) {
		var tok *store.Token
		if node {
			_, tok = server.NewNodeToken(name, at)
		} else {
			_, tok = server.NewToken(name, true, at)
		}
		if err := st.CreateToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	add("a-000001", true, old)        // live
	add("b-000002", true, old)        // dead: swept
	add("c-000003", true, time.Now()) // just made: its node beats soon
	add("admin", false, old)
	log := slog.New(slog.DiscardHandler)
	if err := sweepTokens(ctx, st, time.Minute, log); err != nil {
		t.Fatal(err)
	}
	var names []string
	ts, err := st.ListTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range ts {
		names = append(names, tok.Name)
	}
	slices.Sort(names)
	if want := []string{"admin", "node:a-000001", "node:c-000003"}; !slices.Equal(names, want) {
		t.Errorf("tokens after the sweep: %v; want %v", names, want)
	}

	n, err := NewToken(ctx, st, "a-000001", log)
	if err != nil {
		t.Fatal(err)
	}
	secret := n.current()
	if err := n.renewIfGone(ctx, secret); err != nil || n.current() != secret {
		t.Fatalf("renewing a token that is still there: %v; it changed: %v", err, n.current() != secret)
	}
	tok, err := st.TokenByHash(ctx, server.HashToken(secret))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if err := n.renewIfGone(ctx, secret); err != nil || n.current() == secret {
		t.Fatalf("renewing a deleted token: %v; a new one: %v", err, n.current() != secret)
	}
	if tok, err := st.TokenByHash(ctx, server.HashToken(n.current())); err != nil || tok.Name != "node:a-000001" || !tok.Admin {
		t.Errorf("the new token: %+v, %v", tok, err)
	}
	n.Remove()
	if _, err := st.TokenByHash(ctx, server.HashToken(n.current())); err == nil {
		t.Errorf("the token is still there after remove")
	}
}
