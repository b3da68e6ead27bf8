package apitest

import (
	"net/http"
	"testing"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

const script = `
rules:
  - reply: {text: "ok", usage: {input_tokens: 100, output_tokens: 10}}
`

// TestAPI: a session created over the API runs its turn on the stack's
// sim and box, the tokens see what they own, and the model was asked.
func TestAPI(t *testing.T) {
	a := New(t, script, WithSimHits)
	ctx := testbin.Context(t)
	v, err := a.AliceC.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: a.Repo}}, Prompt: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	st := a.AliceC.Events(ctx, v.ID, client.StreamOptions{})
	defer st.Close()
	stacktest.ReadUntil(t, st, "the first turn's end", stacktest.TurnEnded("t1"))
	stacktest.ReadUntil(t, st, "idle", stacktest.IsState(store.StateIdle))
	select {
	case <-a.SimHits:
	default:
		t.Fatal("the model got no request")
	}
	if _, err := a.BobC.GetSession(ctx, v.ID); err == nil {
		t.Fatal("bob sees alice's session")
	}
	if _, err := a.AdminC.GetSession(ctx, v.ID); err != nil {
		t.Fatalf("the admin does not see alice's session: %v", err)
	}
	resp, err := http.Get(a.URL + "/v1/sessions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %s, want 401", resp.Status)
	}
}
