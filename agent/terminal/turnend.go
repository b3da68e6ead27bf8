package terminal

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/event"
)

// How a turn tells it is over — the CLI's output matching a pattern, its
// hooks, its exit — and the outcomes it ends with.

// wake is when step should look again if nothing happens before.
func (t *turn) wake(now time.Time) time.Time {
	a := t.a
	last := later(a.out.lastOutput(), t.since)
	var cands []time.Time
	if !t.flushDue.IsZero() {
		cands = append(cands, t.flushDue)
	}
	switch t.phase {
	case phaseStarting:
		cands = append(cands, t.c.started.Add(a.cfg.StartTimeout), last.Add(readyQuiet), last.Add(settleQuiet))
	case phasePasted:
		cands = append(cands, last.Add(pasteQuiet), t.since.Add(pasteMax))
	case phaseSubmitted:
		cands = append(cands, t.since.Add(submitRetry))
	case phaseWorking:
		cands = append(cands, last.Add(a.cfg.IdleTimeout), last.Add(commandQuiet), last.Add(promptQuiet))
	case phaseSettling:
		cands = append(cands, last.Add(settleQuiet), t.since.Add(settleMax))
	case phaseCancelling:
		cands = append(cands, last.Add(cancelQuiet), last.Add(2*cancelQuiet), last.Add(settleQuiet), t.since.Add(a.cfg.CancelGrace))
		if !t.signalled.IsZero() {
			cands = append(cands, t.signalled.Add(signalGrace))
		}
		if !t.killed.IsZero() {
			cands = append(cands, t.killed.Add(signalGrace))
		}
	}
	w := now.Add(maxWake)
	for _, c := range cands {
		if c.After(now) && c.Before(w) {
			w = c
		}
	}
	return w
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// matches reports whether re matches the end of the text since the input
// (re-evaluated only when output came).
func (t *turn) matches(re *regexp.Regexp) bool {
	if re == nil {
		return false
	}
	if !t.a.out.changed(t.textVer) && t.textVer != 0 {
		return t.textMatch
	}
	text, v := t.a.out.text(matchLines)
	_, t.textMatch = matchEnd(re, text)
	t.textVer = v
	return t.textMatch
}

// matchEnd finds re's last match in text and reports whether only blanks
// follow it; start is where that match begins.
func matchEnd(re *regexp.Regexp, text string) (start int, ok bool) {
	locs := re.FindAllStringIndex(text, -1)
	if len(locs) == 0 {
		return 0, false
	}
	l := locs[len(locs)-1]
	return l[0], strings.TrimSpace(text[l[1]:]) == ""
}

// genericResult is a generic CLI's answer: the text it printed after the
// input, without the echo of the input and without the prompt it ended
// with.
func genericResult(text, prompt string, done *regexp.Regexp) string {
	if done != nil {
		if start, ok := matchEnd(done, text); ok {
			text = text[:start]
		}
	}
	lines := strings.Split(text, "\n")
	for _, p := range strings.Split(strings.ReplaceAll(prompt, "\r\n", "\n"), "\n") {
		p = strings.TrimSpace(p)
		if p == "" || len(lines) == 0 || !strings.HasSuffix(strings.TrimSpace(lines[0]), p) {
			break
		}
		lines = lines[1:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

// flush emits the output that is due (all of it when force).
func (t *turn) flush(now time.Time, force bool) {
	chunks, due := t.a.out.take(now, force)
	for _, c := range chunks {
		t.emit(event.TerminalOutput{Data: c})
	}
	t.flushDue = due
}

// exited: the CLI's process is gone (and all its output is in).
func (t *turn) exited() (agent.Outcome, bool) {
	a := t.a
	t.flush(time.Now(), true)
	_, werr := t.c.p.Wait(context.Background())
	status, screen := t.c.status(), a.out.tail(errorTail)
	a.logger.Info("the CLI exited", "status", status, "phase", t.phase)
	a.reap(t.c)
	switch {
	case t.phase == phaseCancelling:
		return t.cancelled(), true
	case werr != nil:
		return t.fail(event.FailSandbox, fmt.Sprintf("lost the CLI: %v", werr)), true
	case t.phase == phaseStarting && t.resumed && !t.fresh:
		// Claude Code could not resume the conversation (a transcript it
		// cannot read): start a new one rather than fail every turn.
		a.logger.Warn("Claude Code exited while resuming its session: starting a new conversation", "status", status, "screen", screen)
		a.claude.forgetSession()
		t.fresh = true
		if err := t.startCLI(); err != nil {
			return t.fail(event.FailCLIStart, err.Error()), true
		}
		return agent.Outcome{}, false
	case t.phase == phaseStarting:
		return t.fail(event.FailCLIStart, fmt.Sprintf("the CLI exited (%s) before it was ready for input; its screen shows:\n%s", status, screen)), true
	}
	return t.fail(event.FailCLIExited, fmt.Sprintf("the CLI exited during the turn (%s); the next turn starts it again. Its screen shows:\n%s", status, screen)), true
}

// pollHooks reads Claude Code's hook log directly, for lines its tail has
// not delivered; true: there were some (the next step takes them).
func (t *turn) pollHooks() bool {
	if t.a.claude == nil {
		return false
	}
	return t.a.claude.w.poll(t.ctx)
}

// reap forgets a CLI that is gone.
func (a *Agent) reap(c *cli) {
	c.release()
	a.mu.Lock()
	if a.cli == c {
		a.cli = nil
	}
	a.mu.Unlock()
}

func (a *Agent) currentCLI() *cli {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cli
}

// hook acts on one line of Claude Code's hook log.
func (t *turn) hook(line string) {
	a := t.a
	ev, err := a.claude.w.read(context.WithoutCancel(t.ctx), line)
	if err != nil {
		a.logger.Warn("ignoring a hook log line", "err", err)
		return
	}
	a.claude.noteSession(ev)
	switch ev.Event {
	case hookSessionStart:
		if t.phase == phaseStarting {
			t.c.sessionStarted = true
		}
	case hookUserPromptSubmit:
		switch {
		case t.phase == phasePasted, t.phase == phaseSubmitted:
		case t.phase == phaseWorking && t.command && !t.submitted:
			// "/something" that is not a command goes to the model.
		default:
			return
		}
		t.promptID, t.submitted = ev.PromptID, true
		if got, want := strings.TrimSpace(ev.Prompt), strings.TrimSpace(pasteText(t.prompt)); got != want {
			a.logger.Warn("Claude Code received a prompt other than the one typed", "got", got, "want", want)
		}
		t.setPhase(phaseWorking)
	case hookPreToolUse:
		if t.phase != phaseWorking {
			return
		}
		t.toolSeq++
		t.tools[ev.ToolUseID] = openTool{name: ev.ToolName, start: time.Now(), seq: t.toolSeq}
		t.emit(event.ToolStarted{CallID: ev.ToolUseID, Tool: ev.ToolName, Input: ev.ToolInput, Summary: toolSummary(ev.ToolName, ev.ToolInput)})
	case hookPostToolUse, hookPostToolUseFailure:
		ot, ok := t.tools[ev.ToolUseID]
		if !ok {
			return
		}
		delete(t.tools, ev.ToolUseID)
		fin := event.ToolFinished{CallID: ev.ToolUseID, Tool: ot.name, DurationMS: time.Since(ot.start).Milliseconds()}
		if ev.Event == hookPostToolUse {
			fin.Output = toolOutput(ev.ToolResponse)
		} else {
			fin.IsError = true
			fin.Output = jsonText(ev.Error)
		}
		t.emit(fin)
	case hookStop, hookStopFailure:
		if t.promptID != "" && ev.PromptID != "" && ev.PromptID != t.promptID {
			a.logger.Debug("a Stop hook of an earlier prompt", "prompt_id", ev.PromptID)
			return
		}
		switch {
		case t.phase == phaseCancelling:
			t.cancelDone = true
			return
		case t.phase != phaseWorking && t.phase != phaseSettling:
			return // before this prompt was submitted: an earlier one's
		case !t.submitted && !t.command:
			return
		}
		t.result = ev.LastAssistantMessage
		t.stopReason = StopHook
		if ev.Event == hookStopFailure {
			msg := "Claude Code ended the turn on an API error: " + jsonText(ev.Error)
			if ev.ErrorDetails != "" {
				msg += ": " + ev.ErrorDetails
			}
			t.failure = &event.TurnFailed{Kind: event.FailModel, Error: msg}
		} else if t.result != "" {
			t.emit(event.AssistantMessage{Text: t.result})
		}
		t.setPhase(phaseSettling)
	}
}

// closeTools finishes the tool calls still open (a cancel interrupted them).
func (t *turn) closeTools(why string) {
	open := make([]string, 0, len(t.tools))
	for id := range t.tools {
		open = append(open, id)
	}
	sort.Slice(open, func(i, j int) bool { return t.tools[open[i]].seq < t.tools[open[j]].seq })
	for _, id := range open {
		ot := t.tools[id]
		t.emit(event.ToolFinished{CallID: id, Tool: ot.name, Output: why, IsError: true, DurationMS: time.Since(ot.start).Milliseconds()})
		delete(t.tools, id)
	}
}

func (t *turn) finished() agent.Outcome {
	return agent.Outcome{Finished: &event.TurnFinished{
		Result: t.result, StopReason: t.stopReason, DurationMS: time.Since(t.start).Milliseconds(),
	}}
}

func (t *turn) cancelled() agent.Outcome {
	return agent.Outcome{Cancelled: &event.TurnCancelled{Reason: t.cancel}}
}

func (t *turn) fail(kind event.FailureKind, msg string) agent.Outcome {
	return agent.Outcome{Failed: &event.TurnFailed{Kind: kind, Error: msg}}
}

// claudeBusyText is on Claude Code's status line while it works (2.1.197).
const claudeBusyText = "esc to interrupt"

// claudeBusy reports whether Claude Code's screen says it is working.
func (t *turn) claudeBusy() bool {
	return t.a.claude != nil && strings.Contains(t.a.out.tail(4), claudeBusyText)
}

// claudeScreenText is the best-effort answer read off Claude Code's screen
// (for a slash command, or a turn ended by the idle timeout): the lines
// after the last echo of the prompt ("❯ prompt"), without the input box,
// its rules and the status line, and without the "⎿" and "●" gutters.
// Claude Code redraws its whole screen at times (after /compact, for one),
// so the lines are searched for the echo rather than taken from a position.
func claudeScreenText(screen, prompt string) string {
	lines := strings.Split(screen, "\n")
	first := strings.TrimSpace(strings.SplitN(pasteText(prompt), "\n", 2)[0])
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "❯") && first != "" && strings.Contains(l, first) {
			lines = lines[i+1:]
			break
		}
	}
	var out []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		switch {
		case l == "", strings.Trim(l, "─") == "", strings.Contains(l, "⏵⏵"), strings.Contains(l, "? for shortcuts"),
			strings.HasPrefix(l, "❯"):
			continue
		}
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(l, "⎿"), "●"))
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// commandPending reports whether Claude Code's input box (the last "❯"
// line of its screen) still holds the slash command prompt: typed, not
// yet run. Once run, the box is empty again (or the CLI is gone).
func commandPending(screen, prompt string) bool {
	cmd := strings.TrimSpace(strings.SplitN(pasteText(prompt), "\n", 2)[0])
	lines := strings.Split(screen, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if rest, ok := strings.CutPrefix(l, "❯"); ok {
			return cmd != "" && strings.TrimSpace(rest) == cmd
		}
	}
	return false
}
