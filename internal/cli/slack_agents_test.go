package cli

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sim/slacksim"
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
