package server_test

import (
	"net/http"
	"testing"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/server"
)

// TestIdempotencyKey: POST .../messages with an Idempotency-Key answers a
// retry with the message stored the first time; the key with another body
// is 409; the key is the token's own (another token's same key is another
// message); and a malformed key is refused.
func TestIdempotencyKey(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	v := e.create(e.AliceC, "msg hello")
	key := client.NewIdempotencyKey()
	first, err := e.AliceC.SendOnce(ctx, v.ID, key, "msg again", "")
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.AliceC.SendOnce(ctx, v.ID, key, "msg again", "")
	if err != nil || again.ID != first.ID || again.Seq != first.Seq {
		t.Fatalf("the retry: %+v, %v; want %s back", again, err, first.ID)
	}
	_, err = e.AliceC.SendOnce(ctx, v.ID, key, "msg different", "")
	if client.StatusOf(err) != http.StatusConflict {
		t.Fatalf("the key with another body: %v, want 409", err)
	}
	if ce, ok := err.(*client.Error); !ok || ce.Code != server.CodeConflict {
		t.Fatalf("the key with another body: %#v, want code conflict", err)
	}
	// The admin sees alice's session; its same key is its own.
	byAdmin, err := e.AdminC.SendOnce(ctx, v.ID, key, "msg again", "")
	if err != nil || byAdmin.ID == first.ID {
		t.Fatalf("the admin's send with alice's key: %+v, %v; want a message of its own", byAdmin, err)
	}
	if _, err := e.AliceC.SendOnce(ctx, v.ID, "two words", "msg x", ""); client.StatusOf(err) != http.StatusBadRequest {
		t.Fatalf("a key with a space: %v, want 400", err)
	}
	if _, err := e.AliceC.SendOnce(ctx, v.ID, "", "msg x", ""); client.StatusOf(err) != http.StatusBadRequest {
		t.Fatalf("an empty key: %v, want 400", err)
	}
	msgs, err := e.Store.Messages(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 3 {
		t.Fatalf("%d messages stored, want 3 (the prompt, alice's, the admin's)", len(msgs))
	}
}
