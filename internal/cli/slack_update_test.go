package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/sim/slacksim"
)

// TestSlackUpdate: the agent's slack_update (the host MCP server
// "slack", bridged into the box) posts its line in the session's
// thread; a scan of the box (files, environment, process table) finds
// no Slack token, and no event of the session holds one.
func TestSlackUpdate(t *testing.T) {
	se := newSlackEnv(t, slacksim.Options{})
	se.serve(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m := se.post(t, se.alice, se.mention()+" report progress on calc", "")
	final := se.waitFinal(t, ctx, m.TS, 1)
	if !strings.HasPrefix(final.Text, "Reported.") {
		t.Errorf("final message: %q", final.Text)
	}
	var update bool
	for _, r := range se.botReplies(m.TS) {
		if r.Text == "💬 Halfway there: the tests pass" {
			update = true
		}
	}
	if !update {
		t.Errorf("no slack_update line in the thread: %+v", se.botReplies(m.TS))
	}

	ss := se.slackSessions(t, ctx)
	if len(ss) != 1 {
		t.Fatalf("sessions: %d", len(ss))
	}
	c := se.e.client(se.s)
	page, err := c.EventLog(ctx, ss[0].ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var scan string
	for _, ev := range page.Events {
		b, _ := json.Marshal(ev)
		for _, secret := range []string{se.tok.Bot, se.tok.App, se.tok.SigningSecret} {
			if strings.Contains(string(b), secret) {
				t.Errorf("event %d (%s) holds a Slack secret", ev.Seq, ev.Type())
			}
		}
		if f, ok := ev.Data.(event.ToolFinished); ok && strings.Contains(f.Output, "SCAN-START") {
			scan = f.Output
		}
	}
	// What follows the last "FILES:" line (the process table shows the
	// command, which names it too) up to SCAN-DONE: the files found.
	i := strings.LastIndex(scan, "\nFILES:\n")
	files, _, done := strings.Cut(scan[max(i, 0):], "SCAN-DONE")
	if i < 0 || !done || strings.TrimSpace(strings.TrimPrefix(files, "\nFILES:\n")) != "" {
		t.Errorf("the scan of the box found Slack tokens in files (or did not run): %q", files)
	}
}
