package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/sim/slacksim"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
	"github.com/harvest-dev/harvest/wire"
)

// pickerOptions are the option values of a message's static_select
// harvest-repo ("" when it has none).
func pickerOptions(m slacksim.Message) []string {
	var blocks []struct {
		Elements []struct {
			Type     string `json:"type"`
			ActionID string `json:"action_id"`
			Options  []struct {
				Value string `json:"value"`
			} `json:"options"`
		} `json:"elements"`
	}
	json.Unmarshal(m.Blocks, &blocks)
	var out []string
	for _, b := range blocks {
		for _, e := range b.Elements {
			if e.Type == "static_select" && e.ActionID == "harvest-repo" {
				for _, o := range e.Options {
					out = append(out, o.Value)
				}
			}
		}
	}
	return out
}

// ephemeralsTo are the ephemeral messages to user in a thread that say
// text.
func (se *slackEnv) ephemeralsTo(user slacksim.User, thread, text string) int {
	n := 0
	for _, e := range se.ss.Ephemerals() {
		if e.User == user.ID && e.ThreadTS == thread && strings.Contains(e.Text, text) {
			n++
		}
	}
	return n
}

// auditCount counts the audit entries of channel slack with action and
// result whose detail names the Slack message ts.
func (se *slackEnv) auditCount(t testing.TB, ctx context.Context, action, result string, ts ...string) int {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(se.e.home, "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	es, err := st.ListAudit(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		var d struct {
			TS string `json:"ts"`
		}
		json.Unmarshal(e.Detail, &d)
		if e.Channel == store.ChannelSlack && e.Action == action && e.Result == result && slices.Contains(ts, d.TS) {
			n++
		}
	}
	return n
}

// TestSlackPicker: a mention naming no repository, in a channel with no
// default, gets a picker of exactly the repositories its author may start
// a session on (not a root's whose policy leaves them out; a viewer gets
// a refusal, no picker); someone else's choice is refused; the author's
// choice, made twice at once after harvest serve started again, starts one session on that repository for
// the original request, the picker edited to say so, and the thread ends
// with its final message. Then, in that session's thread, an unlinked
// person's replies get the how-to-link note once and reach nothing, and a
// viewer's reply is refused politely. Over Socket Mode and over HTTP.
// (And a session's own MCP server may not be called slack: a 400.)
func TestSlackPicker(t *testing.T) {
	for _, overHTTP := range []bool{false, true} {
		name := "socket"
		if overHTTP {
			name = "http"
		}
		t.Run(name, func(t *testing.T) { testSlackPicker(t, overHTTP) })
	}
}

func testSlackPicker(t *testing.T, overHTTP bool) {
	se := newSlackEnv(t, slacksim.Options{})
	os.Mkdir(filepath.Join(se.root, "notes"), 0o755)
	locked := t.TempDir() // only usr-dave may start sessions on its repositories
	os.Mkdir(filepath.Join(locked, "secret"), 0o755)
	args := []string{"--repo-root", locked + "?write=user:usr-dave", "--shutdown-grace", "0s"}
	se.serve(t, overHTTP, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	if !overHTTP {
		// The Slack app's MCP server name is reserved for every session.
		_, err := se.e.client(se.s).CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: filepath.Join(se.root, "calc")}},
			MCPServers: []wire.MCPServer{{Name: "slack", Command: []string{"true"}}}})
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != http.StatusBadRequest || !strings.Contains(ce.Message+" "+strings.Join(ce.Details, " "), `the name "slack" is taken`) {
			t.Errorf("a session with its own MCP server slack: %v, want a 400 saying the name is taken", err)
		}
	}

	// A viewer is refused at once: no picker.
	c := se.post(t, se.carol, se.mention()+" msg: tidy up", "")
	se.ephemeralTo(t, ctx, se.carol, "viewers read sessions")

	m := se.post(t, se.alice, se.mention()+" msg: tidy up", "")
	var picker slacksim.Message
	waitUntil(t, ctx, "the picker in the thread", func() bool {
		for _, r := range se.botReplies(m.TS) {
			if pickerOptions(r) != nil {
				picker = r
				return true
			}
		}
		return false
	})
	if got := pickerOptions(picker); !slices.Equal(got, []string{"calc", "notes"}) {
		t.Errorf("the picker offers %v, want [calc notes] (not secret: its root's policy names usr-dave only)", got)
	}
	if len(se.botReplies(c.TS)) != 0 {
		t.Errorf("the viewer's request got replies: %v", se.botReplies(c.TS))
	}
	if r := se.reactions(m.TS); slices.Contains(r, "eyes") {
		t.Errorf("👀 stays on a request waiting for its repository: %v", r)
	}

	// Someone else's choice: refused, whoever they are.
	for _, u := range []slacksim.User{se.bob, se.carol} {
		if err := se.ss.Click(slacksim.ClickSpec{User: u.ID, Channel: se.general.ID, TS: picker.TS, ActionID: "harvest-repo", Value: "notes"}); err != nil {
			t.Fatal(err)
		}
		se.ephemeralTo(t, ctx, u, "Only <@"+se.alice.ID+"> can choose")
	}
	if n := len(se.slackSessions(t, ctx)); n != 0 {
		t.Fatalf("%d sessions after others' choices, want none", n)
	}

	// harvest serve starts again: the picker still works (nothing of it
	// was kept but the message's ts in its block_id).
	if err := se.s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := se.s.wait(); err != nil {
		t.Fatalf("harvest serve after SIGTERM: %v\n%s", err, se.s.stderr)
	}
	// (A click Slack hands a connection that is gone is lost, never
	// sent again: the old one must be known closed.)
	waitUntil(t, ctx, "the old connection closed", func() bool { return len(se.ss.Connections()) == 0 })
	se.serve(t, overHTTP, args...)

	// The author chooses calc, twice at once: one session.
	for range 2 {
		if err := se.ss.Click(slacksim.ClickSpec{User: se.alice.ID, Channel: se.general.ID, TS: picker.TS, ActionID: "harvest-repo", Value: "calc"}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, ctx, "the picker edited", func() bool {
		p, _ := se.ss.Message(se.general.ID, picker.TS)
		return strings.Contains(p.Text, "Starting on `calc`") && pickerOptions(p) == nil
	})
	final := se.waitFinal(t, ctx, m.TS, 1)
	if !strings.HasPrefix(final.Text, "ok") {
		t.Errorf("final message: %q", final.Text)
	}
	waitUntil(t, ctx, "✅ on the request", func() bool { return slices.Contains(se.reactions(m.TS), "white_check_mark") })
	se.ephemeralTo(t, ctx, se.alice, "I'm already working on this request")
	ss := se.slackSessions(t, ctx)
	if len(ss) != 1 {
		t.Fatalf("%d sessions, want 1", len(ss))
	}
	s := ss[0]
	if s.User != "usr-alice" || len(s.Repos) != 1 || s.Repos[0].Source != filepath.Join(se.root, "calc") || s.Title != "msg: tidy up" {
		t.Errorf("the session: user %s, repos %+v, title %q", s.User, s.Repos, s.Title)
	}

	// In the session's thread: bob (no user) twice, carol (a viewer).
	b1 := se.post(t, se.bob, "msg: me too", m.TS)
	b2 := se.post(t, se.bob, "msg: me three", m.TS)
	cr := se.post(t, se.carol, "msg: and me", m.TS)
	waitUntil(t, ctx, "bob's replies refused", func() bool {
		return se.auditCount(t, ctx, "slack.refuse", "unlinked", b1.TS, b2.TS) == 2
	})
	if n := se.ephemeralsTo(se.bob, m.TS, "I don't know who you are in Harvest yet"); n != 1 {
		t.Errorf("bob was told how to link %d times in the thread, want once", n)
	}
	se.ephemeralTo(t, ctx, se.carol, "Sorry, I can't do that for you: steering this session needs write access")
	waitUntil(t, ctx, "carol's reply refused", func() bool {
		return se.auditCount(t, ctx, "slack.refuse", "forbidden", cr.TS) == 1
	})
	st, err := sqlite.Open(filepath.Join(se.e.home, "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	msgs, err := st.Messages(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 {
		t.Errorf("the session has %d messages, want its first only", len(msgs))
	}
	for _, ts := range []string{b1.TS, b2.TS, cr.TS} {
		if r := se.reactions(ts); len(r) != 0 {
			t.Errorf("a refused reply got reactions %v", r)
		}
	}
}

// TestSlackPickerMany: a picker lists the first 100 repositories by name
// (Slack's limit for a static_select) and says how many more there are
// and how to name one.
func TestSlackPickerMany(t *testing.T) {
	se := newSlackEnv(t, slacksim.Options{})
	for i := range 120 {
		os.Mkdir(filepath.Join(se.root, fmt.Sprintf("r%03d", i)), 0o755)
	}
	se.serve(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m := se.post(t, se.alice, se.mention()+" msg: tidy up", "")
	var picker slacksim.Message
	waitUntil(t, ctx, "the picker in the thread", func() bool {
		for _, r := range se.botReplies(m.TS) {
			if pickerOptions(r) != nil {
				picker = r
				return true
			}
		}
		return false
	})
	got := pickerOptions(picker)
	want := []string{"calc"}
	for i := range 99 {
		want = append(want, fmt.Sprintf("r%03d", i))
	}
	if !slices.Equal(got, want) {
		t.Errorf("the picker offers %d: %v, want calc and r000 to r098", len(got), got)
	}
	if !strings.Contains(string(picker.Blocks), "21 more are not listed") {
		t.Errorf("the picker does not say how many more there are: %s", picker.Blocks)
	}
}
