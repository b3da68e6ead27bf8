package session

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/secrets"
	"github.com/harvest-dev/harvest/sim"
)

const secretScript = `
rules:
  - name: shown
    when: {last_user: "use the secret", tool_result: "SECRET-USED"}
    reply: {text: "used", usage: {input_tokens: 100, output_tokens: 10}}
  - name: use
    when: {last_user: "use the secret"}
    reply:
      tool_calls: [{name: bash, input: {command: "test \"$API_TOKEN\" = sk-session-canary-42 && echo MATCH; echo token=$API_TOKEN; echo other=${SETUP_ONLY:-unset}; echo SECRET-USED"}}]
      usage: {input_tokens: 100, output_tokens: 10}
`

// TestSessionSecrets: a secret marked for sessions reaches the agent's
// commands, and what they print of it is masked in the session's events;
// a setup-only secret does not reach the session.
func TestSessionSecrets(t *testing.T) {
	key := secrets.GenerateKey()
	e := newEnv(t)
	ctx := context.Background()
	scope, err := secrets.UserScope("tok-aaaaaaaaaaaa")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.Put(ctx, e.st, key, scope, "API_TOKEN", "sk-session-canary-42", true, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.Put(ctx, e.st, key, scope, "SETUP_ONLY", "setup-only-canary-7", false, "test"); err != nil {
		t.Fatal(err)
	}
	// Set before any runner exists: they read the Config when they start.
	e.m.cfg.SessionSecrets = func(ctx context.Context, repo, owner string) ([]string, error) {
		_, sess, err := secrets.Resolve(ctx, e.st, key, repo, owner)
		return sess, err
	}
	s, err := sim.ParseScript("secret.yaml", []byte(secretScript))
	if err != nil {
		t.Fatal(err)
	}
	e.Sim.Store(sim.New(s))
	v, err := e.m.Create(ctx, "tok-aaaaaaaaaaaa", CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Prompt: "use the secret"})
	if err != nil {
		t.Fatal(err)
	}
	w := e.watch(v.ID)
	out := stacktest.Typed[event.ToolFinished](w, "t1", nil).Output
	if !strings.Contains(out, "MATCH") || !strings.Contains(out, "token=[secret]") || !strings.Contains(out, "other=unset") {
		t.Fatalf("the session's secret in its command: %q", out)
	}
	w.IdleAfter("t1")
	evs, err := e.st.Events(ctx, v.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		b, _ := json.Marshal(ev)
		if strings.Contains(string(b), "sk-session-canary-42") || strings.Contains(string(b), "setup-only-canary-7") {
			t.Fatalf("event %d holds a secret: %s", ev.Seq, b)
		}
	}
}
