package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/stacktest/apitest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/wire"
)

// TestNodeToken: a node's token (several nodes forwarding the GitHub app's
// messages to each other) sends a message keyed as the sender it names,
// so the owner's own send with that key and sender finds it, and a retry
// stores nothing; it is refused on any other route, once its node is not
// live, and to sign in; only it may name a sender, and only with a key;
// and no API call makes a token with a node's name.
func TestNodeToken(t *testing.T) {
	var live atomic.Bool
	live.Store(true)
	e := newAPIEnv(t, apitest.WithNodeLive(func(_ context.Context, node string) (bool, error) {
		return node == "b-0a1b2c" && live.Load(), nil
	}))
	ctx := testbin.Context(t)
	secret, tok := server.NewNodeToken("b-0a1b2c", time.Now())
	if err := e.Store.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	v := e.create(e.AliceC, "msg hello")
	path := "/v1/sessions/" + v.ID + "/messages"
	send := func(token string, hdr map[string]string, text string) (int, wire.Message, wire.ErrorInfo) {
		t.Helper()
		b, _ := json.Marshal(wire.SendRequest{Text: text})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL+path, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := e.Transport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m wire.Message
		var eb wire.ErrorBody
		if resp.StatusCode < 300 {
			json.NewDecoder(resp.Body).Decode(&m)
		} else {
			json.NewDecoder(resp.Body).Decode(&eb)
		}
		return resp.StatusCode, m, eb.Error
	}
	keyed := map[string]string{wire.IdempotencyKeyHeader: "github-delivery-1", server.NodeSenderHeader: "github"}

	st, first, ei := send(secret, keyed, "msg from github")
	if st != http.StatusAccepted {
		t.Fatalf("the node's send: %d %+v", st, ei)
	}
	st, again, ei := send(secret, keyed, "msg from github")
	if st != http.StatusAccepted || again.ID != first.ID {
		t.Fatalf("the node's send again: %d %+v %+v; want %s back", st, again, ei, first.ID)
	}
	// The owner's own send as the GitHub app (ghbot) finds it.
	m, err := e.Manager.SendMessage(ctx, "", v.ID, session.Outgoing{Text: "msg from github", Key: "github-delivery-1", Sender: "github"})
	if err != nil || m.ID != first.ID {
		t.Fatalf("the GitHub app's send with the key: %+v, %v; want %s", m, err, first.ID)
	}

	for _, c := range []struct {
		name   string
		token  string
		hdr    map[string]string
		status int
		says   string
	}{
		{"a sender from a person's token", e.Admin, keyed, http.StatusForbidden, "only a node"},
		{"a sender without a key", secret, map[string]string{server.NodeSenderHeader: "github"}, http.StatusBadRequest, "give the key too"},
		{"a token's id as sender", secret, map[string]string{wire.IdempotencyKeyHeader: "k2", server.NodeSenderHeader: "tok-0123456789ab"}, http.StatusBadRequest, "not a token's id"},
		{"a malformed sender", secret, map[string]string{wire.IdempotencyKeyHeader: "k2", server.NodeSenderHeader: "Git Hub"}, http.StatusBadRequest, "lower-case"},
	} {
		if st, _, ei := send(c.token, c.hdr, "msg x"); st != c.status || !strings.Contains(ei.Message, c.says) {
			t.Errorf("%s: %d %q; want %d saying %q", c.name, st, ei.Message, c.status, c.says)
		}
	}
	// Any other route: 403, even an admin's.
	if st, ei, _ := e.doRaw(http.MethodGet, "/v1/sessions", "Bearer "+secret, "", nil); st != http.StatusForbidden || !strings.Contains(ei.Message, "node b-0a1b2c") {
		t.Errorf("GET /v1/sessions with a node's token: %d %q; want 403", st, ei.Message)
	}
	if st, ei, _ := e.doRaw(http.MethodPost, "/v1/tokens", "Bearer "+secret, "application/json", []byte(`{"name":"x","admin":true}`)); st != http.StatusForbidden {
		t.Errorf("POST /v1/tokens with a node's token: %d %q; want 403", st, ei.Message)
	}
	if st, ei, _ := e.doRaw(http.MethodPost, "/v1/auth/session", "", "application/json", []byte(`{"token":"`+secret+`"}`)); st != http.StatusForbidden || !strings.Contains(ei.Message, "never signs in") {
		t.Errorf("signing in with a node's token: %d %q; want 403", st, ei.Message)
	}
	// Nobody makes a token with a node's name.
	if st, ei, _ := e.doRaw(http.MethodPost, "/v1/tokens", "Bearer "+e.Admin, "application/json", []byte(`{"name":"node:b-0a1b2c","admin":true}`)); st != http.StatusBadRequest || !strings.Contains(ei.Message, "reserved") {
		t.Errorf("POST /v1/tokens named node:…: %d %q; want 400", st, ei.Message)
	}
	// Its node gone, the token is worth nothing.
	live.Store(false)
	if st, _, ei := send(secret, map[string]string{wire.IdempotencyKeyHeader: "github-delivery-2", server.NodeSenderHeader: "github"}, "msg late"); st != http.StatusUnauthorized || !strings.Contains(ei.Message, "not live") {
		t.Errorf("the token of a node that is not live: %d %q; want 401", st, ei.Message)
	}
	msgs, err := e.Store.Messages(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 {
		t.Errorf("%d messages stored, want 2 (the prompt, the node's once)", len(msgs))
	}
}
