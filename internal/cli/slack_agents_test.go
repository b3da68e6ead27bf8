package cli

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sim/slacksim"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// slackClaudeScript: the real Claude Code, asked in Slack to check calc,
// runs calc's test with its Bash tool, posts a line in the thread with
// the Slack app's slack_update, then reports.
const slackClaudeScript = `
rules:
  - name: title
    when: {api: anthropic, system: "Generate a concise, sentence-case title"}
    reply: {text: '{"title": "Check calc"}', usage: {input_tokens: 100, output_tokens: 8}}
  - name: report
    when: {api: anthropic, last_user: "check calc", tool_result: "posted"}
    reply: {text: "Checked calc with Claude Code: its test passes.", usage: {input_tokens: 300, output_tokens: 30}}
  - name: update
    when: {api: anthropic, last_user: "check calc", tool_result: "PASS", tools: [mcp__slack__slack_update]}
    reply:
      tool_calls: [{name: mcp__slack__slack_update, input: {text: "The test passes; writing it up"}}]
      usage: {input_tokens: 200, output_tokens: 20}
  - name: test
    when: {api: anthropic, last_user: "check calc", tools: [Bash]}
    reply:
      tool_calls: [{name: Bash, input: {command: "sh test.sh", description: "Run calc's test"}}]
      usage: {input_tokens: 200, output_tokens: 20}
`

// TestSlackClaudeCode: with --slack-agent claudecode, a mention starts a
// session the real Claude Code runs: its Bash tool runs the test, its
// slack_update (the host MCP server "slack", bridged into the box) posts
// its line in the thread, and the turn ends with the final message
// (Claude Code's answer, Open in Harvest) and ✅.
func TestSlackClaudeCode(t *testing.T) {
	testbin.Claude(t)
	se := newSlackEnvWith(t, slacksim.Options{}, slackClaudeScript)
	se.serve(t, false, "--slack-agent", "claudecode")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	m := se.post(t, se.alice, se.mention()+" check calc please", "")
	final := se.waitFinal(t, ctx, m.TS, 1)
	if !strings.HasPrefix(final.Text, "Checked calc with Claude Code: its test passes.") {
		t.Errorf("final message: %q", final.Text)
	}
	if b := buttons(final); !strings.HasPrefix(b["harvest-open"], "http://harvest.example/sessions/s-") {
		t.Errorf("the final message's buttons: %v", b)
	}
	var update bool
	for _, r := range se.botReplies(m.TS) {
		if r.Text == "💬 The test passes; writing it up" {
			update = true
		}
	}
	if !update {
		t.Errorf("no slack_update line in the thread: %+v", se.botReplies(m.TS))
	}
	waitUntil(t, ctx, "✅ on the mention", func() bool {
		r := se.reactions(m.TS)
		return slices.Contains(r, "white_check_mark") && !slices.Contains(r, "eyes")
	})
	ss := se.slackSessions(t, ctx)
	if len(ss) != 1 || ss[0].Agent != "claudecode" || ss[0].User != "usr-alice" {
		t.Fatalf("sessions: %+v", ss)
	}
}

// TestSlackGitHub: with the GitHub stand-in, a mention naming acme/calc
// starts a session on the GitHub repository (alice's Harvest user is
// linked to ada, who may write there); the agent fixes, commits and
// pushes; the pull request is opened, and the turn's final message in
// the thread carries its link, a Pull request button and Open in
// Harvest.
func TestSlackGitHub(t *testing.T) {
	g := newGHEnv(t)
	se := newSlackEnvWith(t, slacksim.Options{}, githubScript)
	st, err := sqlite.Open(filepath.Join(se.e.home, "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	err = st.AddIdentity(context.Background(), &store.Identity{User: "usr-alice", Kind: store.IdentityGitHub, Subject: strconv.FormatInt(g.ada.ID, 10), Login: "ada"})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	se.serve(t, false, g.serveArgs()...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	m := se.post(t, se.alice, se.mention()+" fix the failing test in acme/calc", "")
	final := se.waitFinal(t, ctx, m.TS, 1)
	ada := g.client(t, g.ada)
	prs, _, err := ada.PullRequests.List(ctx, "acme", "calc", &github.PullRequestListOptions{State: "open"})
	if err != nil {
		t.Fatal(err)
	}
	if len(prs) != 1 {
		t.Fatalf("open pull requests on acme/calc: %d, want 1; the final message: %q", len(prs), final.Text)
	}
	pr := prs[0]
	if !strings.Contains(pr.GetBody(), "Fixed add in calc.sh") {
		t.Errorf("pull request body: %q", pr.GetBody())
	}
	if !strings.HasPrefix(final.Text, "Fixed add in calc.sh") || !strings.Contains(final.Text, "Pull request: "+pr.GetHTMLURL()) {
		t.Errorf("final message: %q; want the summary and %s", final.Text, pr.GetHTMLURL())
	}
	b := buttons(final)
	if b["harvest-pr"] != pr.GetHTMLURL()+"pr" || !strings.HasPrefix(b["harvest-open"], "http://harvest.example/sessions/s-") {
		t.Errorf("the final message's buttons: %v; want the pull request %s and Open in Harvest", b, pr.GetHTMLURL())
	}
	sha := mustBranch(t, g, pr.GetHead().GetRef())
	bare := filepath.Join(g.gs.Dir(), "repos", "acme", "calc.git")
	if got := testbin.Git(t, bare, "show", sha+":calc.sh"); !strings.Contains(got, "$1 + $2") {
		t.Errorf("calc.sh on the pull request's branch: %q", got)
	}
	waitUntil(t, ctx, "✅ on the mention", func() bool { return slices.Contains(se.reactions(m.TS), "white_check_mark") })
	ss := se.slackSessions(t, ctx)
	if len(ss) != 1 || len(ss[0].Repos) != 1 || ss[0].Repos[0].GitHub != "acme/calc" || ss[0].User != "usr-alice" {
		t.Fatalf("sessions: %+v", ss)
	}
}

// TestSlackGitHubClaudeCode: with --slack-agent claudecode and the GitHub
// stand-in, a mention naming acme/calc starts a session the real Claude
// Code runs: it fixes, tests, commits and pushes from the box with its
// Bash tool; the pull request is opened, and the final message in the
// thread carries its link and Claude Code's answer, ✅ on the mention.
func TestSlackGitHubClaudeCode(t *testing.T) {
	testbin.Claude(t)
	g := newGHEnv(t)
	se := newSlackEnvWith(t, slacksim.Options{}, claudeGitHubScript)
	st, err := sqlite.Open(filepath.Join(se.e.home, "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	err = st.AddIdentity(context.Background(), &store.Identity{User: "usr-alice", Kind: store.IdentityGitHub, Subject: strconv.FormatInt(g.ada.ID, 10), Login: "ada"})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	se.serve(t, false, append(g.serveArgs(), "--slack-agent", "claudecode")...)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	m := se.post(t, se.alice, se.mention()+" fix the failing test in acme/calc", "")
	final := se.waitFinal(t, ctx, m.TS, 1)
	prs, _, err := g.client(t, g.ada).PullRequests.List(ctx, "acme", "calc", &github.PullRequestListOptions{State: "open"})
	if err != nil {
		t.Fatal(err)
	}
	if len(prs) != 1 {
		t.Fatalf("open pull requests on acme/calc: %d, want 1; the final message: %q", len(prs), final.Text)
	}
	pr := prs[0]
	if !strings.HasPrefix(final.Text, "Fixed add in calc.sh with Claude Code") || !strings.Contains(final.Text, "Pull request: "+pr.GetHTMLURL()) {
		t.Errorf("final message: %q; want Claude Code's answer and %s", final.Text, pr.GetHTMLURL())
	}
	if b := buttons(final); b["harvest-pr"] != pr.GetHTMLURL()+"pr" || !strings.HasPrefix(b["harvest-open"], "http://harvest.example/sessions/s-") {
		t.Errorf("the final message's buttons: %v; want the pull request %s and Open in Harvest", b, pr.GetHTMLURL())
	}
	sha := mustBranch(t, g, pr.GetHead().GetRef())
	bare := filepath.Join(g.gs.Dir(), "repos", "acme", "calc.git")
	if got := testbin.Git(t, bare, "log", "-1", "--format=%s", sha); got != "Fix add (Claude Code)" {
		t.Errorf("the pushed commit: %q", got)
	}
	waitUntil(t, ctx, "✅ on the mention", func() bool { return slices.Contains(se.reactions(m.TS), "white_check_mark") })
	ss := se.slackSessions(t, ctx)
	if len(ss) != 1 || ss[0].Agent != "claudecode" || len(ss[0].Repos) != 1 || ss[0].Repos[0].GitHub != "acme/calc" {
		t.Fatalf("sessions: %+v", ss)
	}
}
