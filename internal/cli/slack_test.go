package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sim/slacksim"
	"github.com/harvest-dev/harvest/sim/slacksim/slackschema"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// slackScript: "fix calc" runs calc's test in the box, then reports;
// "msg ..." gets "ok"; "long task" waits for a file that never comes
// (until Stop).
const slackScript = `
rules:
  - name: report
    when: {last_user: "fix calc", tool_result: "PASS"}
    reply: {text: "Fixed calc: its test passes now.", usage: {input_tokens: 300, output_tokens: 30}}
  - name: fix
    when: {last_user: "fix calc"}
    reply:
      tool_calls: [{name: bash, input: {command: "sh test.sh"}}]
      usage: {input_tokens: 200, output_tokens: 20}
  - name: reported
    when: {last_user: "report progress", tool_result: "SCAN-DONE"}
    reply: {text: "Reported.", usage: {input_tokens: 100, output_tokens: 10}}
  - name: scan
    when: {last_user: "report progress", tool_result: "posted"}
    reply:
      tool_calls: [{name: bash, input: {command: "` + slackScan + `"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: update
    when: {last_user: "report progress", tools: [mcp__slack__slack_update]}
    reply:
      tool_calls: [{name: mcp__slack__slack_update, input: {text: "Halfway there: the tests pass"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: msg
    when: {last_user_regexp: "msg"}
    reply: {text: "ok", usage: {input_tokens: 100, output_tokens: 10}}
  - name: long
    when: {last_user: "long task"}
    reply:
      tool_calls: [{name: bash, input: {command: "until [ -e go ]; do sleep 0.01; done; echo released", timeout: 600000}}]
      usage: {input_tokens: 100, output_tokens: 10}
`

// slackScan dumps what the box could hold the Slack token in (its
// environment and every process's, the process table) and lists the
// files under the writable places that hold a Slack token (the pattern
// does not match itself).
const slackScan = `echo SCAN-START; env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\\\0' '\\\\n'; ps -eo args; ` +
	`echo FILES:; grep -rIl -e 'xox[b]-' -e 'xap[p]-' /workspace /home /tmp /run /etc /root 2>/dev/null; echo SCAN-DONE`

// slackEnv is a Slack stand-in with people in #general, a harvest serve
// whose Slack app it is, and a repository root holding calc.
//
//	alice  a member, linked by the email of her OIDC identity
//	carol  a viewer (may not start sessions), linked the same way
//	bob    no Harvest user
type slackEnv struct {
	ss                 *slacksim.Server
	tok                slacksim.Tokens
	alice, bob, carol  slacksim.User
	general            slacksim.Channel
	e                  *serveEnv
	s                  *serveProc
	root, secretFile   string
	tokenFile, appFile string
}

func newSlackEnv(t testing.TB, opts slacksim.Options) *slackEnv {
	t.Helper()
	return newSlackEnvWith(t, opts, slackScript)
}

// newSlackEnvWith is newSlackEnv with script as the model.
func newSlackEnvWith(t testing.TB, opts slacksim.Options, script string) *slackEnv {
	t.Helper()
	return newSlackEnvOn(t, opts, script, nil)
}

// newSlackEnvOn is newSlackEnvWith with setup run on the serve
// environment before the people are stored (onPostgres: several nodes).
func newSlackEnvOn(t testing.TB, opts slacksim.Options, script string, setup func(*serveEnv)) *slackEnv {
	t.Helper()
	ss, err := slacksim.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	se := &slackEnv{ss: ss, tok: ss.Tokens()}
	// Everything said in the test is checked against Slack's
	// descriptions at its end.
	t.Cleanup(func() {
		for _, err := range slackschema.CheckExchanges(ss.Calls(), ss.Envelopes()) {
			t.Error(err)
		}
	})
	for _, u := range []struct {
		p     *slacksim.User
		name  string
		email string
	}{{&se.alice, "alice", "alice@example.com"}, {&se.bob, "bob", "bob@example.com"}, {&se.carol, "carol", "carol@example.com"}} {
		if *u.p, err = ss.AddUser(slacksim.UserSpec{Name: u.name, Email: u.email}); err != nil {
			t.Fatal(err)
		}
	}
	if se.general, err = ss.AddChannel(slacksim.ChannelSpec{Name: "general", Members: []string{se.alice.ID, se.bob.ID, se.carol.ID}}); err != nil {
		t.Fatal(err)
	}
	se.e = newServeEnvWith(t, script)
	if setup != nil {
		setup(se.e)
	}
	se.root = t.TempDir()
	calc := filepath.Join(se.root, "calc")
	os.Mkdir(calc, 0o755)
	os.WriteFile(filepath.Join(calc, "test.sh"), []byte("echo PASS\n"), 0o644)
	// The people, before the server starts.
	ctx := context.Background()
	st, err := openServerStore(ctx, se.e.store, se.e.home)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct{ id, email string }{{"usr-alice", "alice@example.com"}, {"usr-carol", "carol@example.com"}} {
		role := store.RoleMember
		if p.id == "usr-carol" {
			role = store.RoleViewer
		}
		if err := st.CreateUser(ctx, &store.User{ID: p.id, Name: p.id, Role: role}); err != nil {
			t.Fatal(err)
		}
		if err := st.AddIdentity(ctx, &store.Identity{User: p.id, Kind: store.IdentityOIDC, Issuer: "https://idp.example", Subject: p.id, Email: p.email}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	dir := t.TempDir()
	se.tokenFile, se.appFile, se.secretFile = filepath.Join(dir, "bot"), filepath.Join(dir, "app"), filepath.Join(dir, "secret")
	os.WriteFile(se.tokenFile, []byte(se.tok.Bot+"\n"), 0o600)
	os.WriteFile(se.appFile, []byte(se.tok.App+"\n"), 0o600)
	os.WriteFile(se.secretFile, []byte(se.tok.SigningSecret+"\n"), 0o600)
	return se
}

// serve starts harvest serve as the stand-in's app: over Socket Mode,
// or over HTTP (the stand-in's Request URL pointed at it).
func (se *slackEnv) serve(t testing.TB, overHTTP bool, args ...string) {
	t.Helper()
	base := []string{"--repo-root", se.root, "--public-url", "http://harvest.example",
		"--slack-bot-token-file", se.tokenFile, "--slack-api-url", se.ss.APIURL()}
	if overHTTP {
		base = append(base, "--slack-signing-secret-file", se.secretFile)
	} else {
		base = append(base, "--slack-app-token-file", se.appFile)
	}
	se.s = se.e.start(append(base, args...)...)
	if overHTTP {
		if err := se.ss.SetRequestURL(se.s.url + "/v1/slack/events"); err != nil {
			t.Fatal(err)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waitUntil(t, ctx, "the app's Socket Mode connection", func() bool { return len(se.ss.Connections()) > 0 })
}

func (se *slackEnv) mention() string { return "<@" + se.tok.BotUserID + ">" }

func (se *slackEnv) post(t testing.TB, user slacksim.User, text, thread string) slacksim.Message {
	t.Helper()
	m, err := se.ss.Post(slacksim.PostSpec{User: user.ID, Channel: se.general.ID, Text: text, ThreadTS: thread})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// reactions are a message's reactions' names.
func (se *slackEnv) reactions(ts string) []string {
	m, _ := se.ss.Message(se.general.ID, ts)
	var out []string
	for _, r := range m.Reactions {
		out = append(out, r.Name)
	}
	return out
}

// botReplies are the app's messages in a thread.
func (se *slackEnv) botReplies(ts string) []slacksim.Message {
	var out []slacksim.Message
	for _, m := range se.ss.Thread(se.general.ID, ts) {
		if m.BotID != "" {
			out = append(out, m)
		}
	}
	return out
}

// waitFinal waits for the n-th final message of a thread (one with the
// Open in Harvest link) and returns it.
func (se *slackEnv) waitFinal(t testing.TB, ctx context.Context, ts string, n int) slacksim.Message {
	t.Helper()
	var got slacksim.Message
	waitUntil(t, ctx, "final message "+string(rune('0'+n))+" in the thread", func() bool {
		k := 0
		for _, m := range se.botReplies(ts) {
			if strings.Contains(m.Text, "http://harvest.example/sessions/") {
				if k++; k == n {
					got = m
					return true
				}
			}
		}
		return false
	})
	return got
}

// buttons are the action ids and urls of a message's buttons.
func buttons(m slacksim.Message) map[string]string {
	var blocks []struct {
		Elements []struct {
			ActionID string `json:"action_id"`
			URL      string `json:"url"`
			Value    string `json:"value"`
		} `json:"elements"`
	}
	json.Unmarshal(m.Blocks, &blocks)
	out := map[string]string{}
	for _, b := range blocks {
		for _, e := range b.Elements {
			out[e.ActionID] = e.URL + e.Value
		}
	}
	return out
}

// TestSlackMention: a mention naming a repository gets 👀 at once, a
// session (the builtin agent), a progress message with a Stop button, and
// a final message with the result and the Harvest link, ✅ at the end; a
// reply in the thread is a follow-up with its own final message; /harvest
// status answers; a retried event changes nothing; the audit log names
// the user and the channel slack.
func TestSlackMention(t *testing.T) {
	se := newSlackEnv(t, slacksim.Options{})
	se.serve(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	m := se.post(t, se.alice, se.mention()+" fix calc please", "")
	waitUntil(t, ctx, "👀 on the mention", func() bool { return slices.Contains(se.reactions(m.TS), "eyes") })
	final := se.waitFinal(t, ctx, m.TS, 1)
	if !strings.Contains(final.Text, "Fixed calc: its test passes now.") {
		t.Errorf("final message: %q", final.Text)
	}
	waitUntil(t, ctx, "✅ on the mention", func() bool {
		r := se.reactions(m.TS)
		return slices.Contains(r, "white_check_mark") && !slices.Contains(r, "eyes")
	})
	// The progress message's last edit follows (within chat.update's
	// pace): done, without its Stop button.
	waitUntil(t, ctx, "the progress message's last edit", func() bool {
		r := se.botReplies(m.TS)
		return len(r) == 2 && strings.HasPrefix(r[0].Text, "✅ Done") && buttons(r[0])["harvest-stop"] == ""
	})
	if b := buttons(final); !strings.HasPrefix(b["harvest-open"], "http://harvest.example/sessions/s-") {
		t.Errorf("the final message's buttons: %v", b)
	}

	// A follow-up in the thread.
	r := se.post(t, se.alice, "msg: and the docs", m.TS)
	waitUntil(t, ctx, "👀 on the reply", func() bool { return slices.Contains(se.reactions(r.TS), "eyes") })
	final2 := se.waitFinal(t, ctx, m.TS, 2)
	if !strings.HasPrefix(final2.Text, "ok") {
		t.Errorf("the follow-up's final message: %q", final2.Text)
	}
	waitUntil(t, ctx, "✅ on the reply", func() bool { return slices.Contains(se.reactions(r.TS), "white_check_mark") })

	// /harvest status: the session, ephemerally, in the ack.
	if err := se.ss.Command(slacksim.CommandSpec{User: se.alice.ID, Channel: se.general.ID, Command: "/harvest", Text: "status"}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "the status answer", func() bool {
		for _, e := range se.ss.Ephemerals() {
			if e.User == se.alice.ID && strings.Contains(e.Text, "fix calc please") && strings.Contains(e.Text, "idle") {
				return true
			}
		}
		return false
	})
	if _, err := se.ss.WaitEnvelopes(ctx); err != nil {
		t.Fatal(err)
	}
	for _, e := range se.ss.Envelopes() {
		if e.State != slacksim.StateAcked {
			t.Errorf("envelope %s %s: %s", e.Kind, e.Topic, e.State)
		}
	}
	checkRetryAfter(t, se.ss.Calls())
	for _, c := range se.ss.Calls() {
		if c.Status == 429 && c.Method == "chat.update" {
			t.Errorf("an edit refused for its rate (at most one a second per channel): %s", c.Time)
		}
	}
	st, err := sqlite.Open(filepath.Join(se.e.home, "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	audit, err := st.ListAudit(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var created int
	for _, a := range audit {
		if a.Action == "session.create" && a.Channel == store.ChannelSlack && a.User == "usr-alice" {
			created++
		}
	}
	if created != 1 {
		t.Errorf("session.create entries of channel slack by usr-alice: %d, want 1", created)
	}
}

// checkRetryAfter: after a 429, no call came before its Retry-After
// was over.
func checkRetryAfter(t *testing.T, calls []slacksim.Call) (refused int) {
	t.Helper()
	var until time.Time
	for _, c := range calls {
		if c.Time.Before(until) {
			t.Errorf("%s at %s, inside a Retry-After that ends at %s", c.Method, c.Time.Format(time.StampMilli), until.Format(time.StampMilli))
		}
		if c.Status == 429 {
			refused++
			if end := c.Time.Add(time.Duration(c.RetryAfter) * time.Second); end.After(until) {
				until = end
			}
		}
	}
	return refused
}
