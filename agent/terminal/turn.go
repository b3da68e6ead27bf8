package terminal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/event"
)

// The phases of a turn (see the package doc's diagram).
type phase int

const (
	phaseStarting   phase = iota // the CLI is starting: wait until it is ready for input
	phasePasted                  // Claude Code: the prompt is pasted; Enter follows once it is shown
	phaseSubmitted               // Claude Code: Enter typed; wait for its UserPromptSubmit hook
	phaseWorking                 // wait for the completion signal
	phaseSettling                // completion seen: let the last of the output arrive
	phaseCancelling              // cancel keys typed: wait for the CLI to settle, else escalate
)

var phaseNames = [...]string{"starting", "pasted", "submitted", "working", "settling", "cancelling"}

func (p phase) String() string { return phaseNames[p] }

// Timing of the turn's steps. Quiet means no terminal output.
const (
	readyQuiet   = 500 * time.Millisecond // after the CLI's first render: ready for input
	pasteQuiet   = 50 * time.Millisecond  // after a paste was echoed: type Enter
	pasteMax     = time.Second            // type Enter by then anyway
	submitRetry  = 3 * time.Second        // Claude Code: Enter again if the prompt was not submitted
	submitTries  = 3                      // Enters typed in all before giving up
	settleQuiet  = 150 * time.Millisecond // after the completion signal
	settleMax    = 2 * time.Second
	cancelQuiet  = time.Second     // after the cancel keys: the CLI settled
	cancelRepeat = 2 * time.Second // a generic CLI not settled: its cancel keys again
	commandQuiet = time.Second     // Claude Code: a slash command is done when its TUI is idle this long
	promptQuiet  = 5 * time.Second // Claude Code: idle this long without a Stop hook, the turn is over
	signalGrace  = 5 * time.Second // SIGINT, then SIGKILL, each gets this long
	maxWake      = 250 * time.Millisecond
	errorTail    = 12  // lines of screen quoted in errors
	screenLines  = 200 // lines of screen searched for a result read off it
	matchLines   = 64  // lines at the end of the output a done pattern is matched against
	toolOutputMx = 64 << 10
)

type openTool struct {
	name  string
	start time.Time
	seq   int
}

// turn is one Turn's state; only the caller's goroutine touches it.
type turn struct {
	a      *Agent
	ctx    context.Context
	emit   func(event.Payload)
	prompt string
	start  time.Time

	c       *cli
	phase   phase
	since   time.Time // when the phase began
	resumed bool      // Claude Code: this run was started with --resume
	fresh   bool      // a failed --resume was already retried without it

	tries      int
	command    bool // Claude Code: the prompt is a slash command
	submitted  bool // Claude Code: its UserPromptSubmit hook ran for the prompt
	promptID   string
	result     string
	stopReason string
	failure    *event.TurnFailed
	tools      map[string]openTool
	toolSeq    int
	textVer    uint64
	textMatch  bool
	cancel     string    // why the turn is cancelled ("" while it is not)
	cancelDone bool      // Claude Code: its Stop hook ran after the cancel keys
	keysAt     time.Time // when the cancel keys were last typed
	signalled  time.Time
	killed     time.Time
	flushDue   time.Time
}

// Turn implements agent.Agent: it (re)starts the CLI when needed, types
// the prompt, streams the terminal's bytes as terminal.output and ends
// with the completion signal, a cancel or the CLI's exit.
func (a *Agent) Turn(ctx context.Context, prompt string, emit func(event.Payload)) agent.Outcome {
	a.turnMu.Lock()
	defer a.turnMu.Unlock()
	t := &turn{a: a, ctx: ctx, emit: emit, prompt: prompt, start: time.Now(), tools: map[string]openTool{}}
	model := ""
	if a.claude != nil {
		model = a.cfg.Model
	}
	emit(event.TurnStarted{Prompt: prompt, Model: model})
	if d := a.out.setInTurn(true); d > 0 {
		a.logger.Warn("terminal output dropped between turns", "bytes", d)
	}
	defer a.out.setInTurn(false)
	var out agent.Outcome
	if a.closed {
		out = t.fail(event.FailCLIStart, "the terminal agent is closed")
	} else {
		out = t.run()
	}
	t.flush(time.Now(), true)
	t.closeTools("the turn ended before the tool finished")
	emit(out.Payload())
	a.logger.Debug("turn ended", "outcome", out.Payload().EventType(), "phase", t.phase, "duration", time.Since(t.start))
	return out
}

func (t *turn) run() agent.Outcome {
	a := t.a
	if a.claude != nil && strings.TrimSpace(pasteText(t.prompt)) == "" {
		return t.fail(event.FailCLIInput, "the prompt is empty: Claude Code does not submit an empty input")
	}
	if t.ctx.Err() != nil {
		t.cancel = cancelReason(t.ctx)
		return t.cancelled() // nothing typed
	}
	if a.claude != nil && !a.claude.w.running() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), 30*time.Second)
		err := a.claude.w.start(ctx)
		cancel()
		if err != nil {
			return t.fail(event.FailCLIStart, err.Error())
		}
		a.logger.Warn("the hook log's tail had ended: started it again")
	}
	t.c = a.currentCLI()
	if t.c != nil && t.c.exited() {
		a.logger.Info("the CLI exited between turns; starting it again", "status", t.c.status())
		a.reap(t.c)
		t.c = nil
	}
	switch {
	case t.c == nil:
		if err := t.startCLI(); err != nil {
			return t.fail(event.FailCLIStart, err.Error())
		}
	case !t.c.ready:
		t.setPhase(phaseStarting)
	default:
		t.submit()
	}

	var marks <-chan struct{}
	if a.claude != nil {
		marks = a.claude.w.notify
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	ctxDone, closing := t.ctx.Done(), a.closing.Done()
	for {
		now := time.Now()
		if out, done := t.step(now); done {
			return out
		}
		timer.Reset(max(t.wake(now).Sub(now), time.Millisecond))
		select {
		case <-a.out.notify:
		case <-marks:
		case <-t.c.p.Done():
		case <-timer.C:
		case <-ctxDone:
			ctxDone, closing = nil, nil
			t.cancel = cancelReason(t.ctx)
		case <-closing:
			ctxDone, closing = nil, nil
			t.cancel = cancelReason(a.closing)
		}
	}
}

func cancelReason(ctx context.Context) string {
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
		return c.Error()
	}
	return "cancelled"
}

func (t *turn) setPhase(p phase) {
	t.phase, t.since = p, time.Now()
}

// startCLI starts the CLI (Claude Code with --resume once it has a
// session) on a fresh PTY.
func (t *turn) startCLI() error {
	a := t.a
	var args, env []string
	if a.claude != nil {
		args, env = a.claude.args(&a.cfg), a.claude.env(&a.cfg)
		id, _ := a.claude.session()
		t.resumed = id != ""
	} else {
		args, env = a.cfg.Command, a.cfg.Env
	}
	rows, cols := a.size()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), 30*time.Second)
	defer cancel()
	a.out.mark()
	c, err := startCLI(ctx, a.sb, args, env, a.cfg.Workdir, rows, cols, a.out)
	if err != nil {
		return fmt.Errorf("starting the CLI in the box: %w", err)
	}
	a.logger.Info("CLI started", "pid", c.p.PID(), "resume", t.resumed)
	a.setCLI(c)
	t.c = c
	t.setPhase(phaseStarting)
	return nil
}

// submit types the prompt.
func (t *turn) submit() {
	a := t.a
	a.out.mark()
	t.textVer, t.textMatch = 0, false
	if a.claude != nil {
		t.command = strings.HasPrefix(strings.TrimSpace(t.prompt), "/")
		t.setPhase(phasePasted) // before the paste: its echo comes after
		t.c.send(pasted(t.prompt))
		return
	}
	in := []byte(t.prompt)
	if a.cfg.Paste {
		in = pasted(t.prompt)
	}
	t.c.send(append(in, a.cfg.SubmitKeys...))
	t.setPhase(phaseWorking)
}

// pasted wraps text in bracketed-paste markers, so that its newlines are
// part of the input instead of Enter. Markers inside the text are removed:
// a prompt cannot end the paste early and type keys of its own.
func pasted(s string) []byte {
	return []byte("\x1b[200~" + pasteText(s) + "\x1b[201~")
}

// pasteText is the text of a paste: newlines as "\n", no paste markers.
func pasteText(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	s = strings.ReplaceAll(s, "\x1b[200~", "")
	return strings.ReplaceAll(s, "\x1b[201~", "")
}

// step looks at everything that may have changed and moves the turn on.
func (t *turn) step(now time.Time) (agent.Outcome, bool) {
	a := t.a
	t.flush(now, false)
	if a.claude != nil {
		for _, line := range a.claude.w.take() {
			t.hook(line)
		}
	}
	if t.c.exited() {
		return t.exited()
	}
	if t.cancel != "" && t.phase != phaseCancelling {
		if t.phase == phaseStarting {
			return t.cancelled(), true // nothing typed yet; the CLI goes on starting
		}
		t.setPhase(phaseCancelling)
		t.c.send(a.cfg.CancelKeys)
		t.keysAt = now
		a.logger.Info("turn cancelled: typed the cancel keys", "keys", fmt.Sprintf("%q", a.cfg.CancelKeys), "reason", t.cancel)
	}
	last := a.out.lastOutput()
	quiet := now.Sub(later(last, t.since))
	switch t.phase {
	case phaseStarting:
		if now.Sub(t.c.started) >= a.cfg.StartTimeout {
			return t.fail(event.FailCLIStart, fmt.Sprintf("the CLI did not get to its prompt within %s; its screen shows:\n%s", a.cfg.StartTimeout, a.out.tail(errorTail))), true
		}
		var ready bool
		switch {
		case a.claude != nil:
			ready = t.c.sessionStarted && quiet >= readyQuiet && !t.claudeBusy()
		case a.cfg.ReadyPattern != nil:
			ready = t.matches(a.cfg.ReadyPattern) && quiet >= settleQuiet
		default:
			ready = quiet >= readyQuiet
		}
		if ready {
			t.c.ready = true
			t.submit()
		}
	case phasePasted:
		// Enter once the paste is echoed and the screen settled: typed
		// before the TUI took the paste, it would land on an empty input
		// (seen under load with a slash command, which has no hook to
		// retry on).
		echoed := last.After(t.since)
		if (echoed && quiet >= pasteQuiet) || now.Sub(t.since) >= pasteMax {
			t.c.send(KeyEnter)
			t.tries = 1
			if t.command {
				// Claude Code runs slash commands without the
				// UserPromptSubmit hook (and most without Stop).
				t.setPhase(phaseWorking)
			} else {
				t.setPhase(phaseSubmitted)
			}
		}
	case phaseSubmitted:
		if now.Sub(t.since) >= submitRetry {
			// Before typing Enter again: the hook may have run with its
			// line not yet through the tail.
			if t.pollHooks() {
				return agent.Outcome{}, false
			}
			if t.tries >= submitTries {
				out := t.fail(event.FailCLIInput, fmt.Sprintf("Claude Code did not take the prompt (no UserPromptSubmit hook after %d Enters); the next turn starts it again. Its screen shows:\n%s", t.tries, a.out.tail(errorTail)))
				// The prompt may still sit in its input box: start afresh
				// (--resume) rather than type the next one after it.
				ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), 2*signalGrace)
				defer cancel()
				if err := t.c.terminate(ctx, signalGrace, syscall.SIGINT); err != nil {
					a.logger.Warn("ending Claude Code after it did not take the prompt", "err", err)
				}
				a.reap(t.c)
				return out, true
			}
			t.tries++
			t.c.send(KeyEnter)
			t.since = now
			a.logger.Warn("prompt not submitted yet: typing Enter again", "try", t.tries)
		}
	case phaseWorking:
		if a.claude == nil && a.cfg.DonePattern != nil && t.matches(a.cfg.DonePattern) {
			t.stopReason = StopDonePattern
			t.setPhase(phaseSettling)
			break
		}
		if a.claude != nil && quiet >= commandQuiet && (t.command || quiet >= promptQuiet) && !t.claudeBusy() {
			if !t.command && t.pollHooks() {
				break // its Stop may be among them: the next step takes them
			}
			if t.command && t.tries < submitTries && now.Sub(t.since) >= commandQuiet && commandPending(a.out.tail(screenLines), t.prompt) {
				// The command still sits in the input box over its
				// completion menu: the Enter came while the TUI was
				// drawing the menu (seen under load) and was taken by
				// it. Enter again; it runs the command.
				t.tries++
				t.since = now
				t.c.send(KeyEnter)
				a.logger.Warn("slash command not run yet: typing Enter again", "try", t.tries)
				break
			}
			// Back at its prompt without a Stop hook: a slash command
			// ran, or the prompt ended some other way (a hook of the
			// caller's settings refused it, say).
			if !t.command {
				a.logger.Warn("Claude Code is idle at its prompt but its Stop hook did not run: ending the turn", "quiet", quiet)
			}
			t.stopReason = StopPrompt
			t.result = claudeScreenText(a.out.tail(screenLines), t.prompt)
			return t.finished(), true
		}
		if quiet >= a.cfg.IdleTimeout {
			t.stopReason = StopIdle
			if a.claude != nil {
				t.result = claudeScreenText(a.out.tail(screenLines), t.prompt)
			} else {
				text, _ := a.out.text(0)
				t.result = genericResult(text, t.prompt, nil)
			}
			a.logger.Warn("no completion signal: the turn ends on the idle timeout", "idle", a.cfg.IdleTimeout)
			return t.finished(), true
		}
	case phaseSettling:
		if t.claudeBusy() {
			// Still working after its Stop hook: another Stop hook (of
			// the caller's settings) told it to go on. Wait for the next.
			if now.Sub(t.since) >= settleMax {
				a.logger.Info("Claude Code went on working after its Stop hook")
				t.result, t.failure = "", nil
				t.setPhase(phaseWorking)
			}
			break
		}
		if quiet >= settleQuiet || now.Sub(t.since) >= settleMax {
			if a.claude == nil {
				if !t.matches(a.cfg.DonePattern) {
					t.setPhase(phaseWorking) // more came after the prompt: not done
					break
				}
				text, _ := a.out.text(0)
				t.result = genericResult(text, t.prompt, a.cfg.DonePattern)
			}
			if t.failure != nil {
				return agent.Outcome{Failed: t.failure}, true
			}
			return t.finished(), true
		}
	case phaseCancelling:
		var settled bool
		switch {
		case t.cancelDone:
			settled = true
		case a.claude != nil:
			// Idle again: the status line no longer offers "esc to
			// interrupt" and the interrupted render is done; or nothing
			// moved for a while (working, its spinner redraws at least
			// twice a second).
			busy := t.claudeBusy()
			settled = !busy && quiet >= settleQuiet && (last.After(t.since) || quiet >= cancelQuiet) ||
				quiet >= 2*cancelQuiet
		case a.cfg.DonePattern != nil:
			settled = t.matches(a.cfg.DonePattern) && quiet >= settleQuiet
		default:
			settled = quiet >= cancelQuiet
		}
		if settled {
			return t.cancelled(), true
		}
		if a.claude == nil && t.signalled.IsZero() && now.Sub(t.keysAt) >= cancelRepeat {
			// A shell's Ctrl-C is lost when it comes between the fork of
			// a command and the command taking the terminal's foreground
			// (the SIGINT goes to the shell, which waits on): type it
			// again, as a person would. (Not Claude Code's Esc: twice is
			// its rewind menu.)
			t.c.send(a.cfg.CancelKeys)
			t.keysAt = now
			a.logger.Info("turn cancelled: the CLI did not settle; typed the cancel keys again", "keys", fmt.Sprintf("%q", a.cfg.CancelKeys))
		}
		if out, done := t.escalate(now); done {
			return out, true
		}
	}
	return agent.Outcome{}, false
}

// escalate: the CLI did not settle after the cancel keys. SIGINT after
// CancelGrace, SIGKILL of its tree signalGrace later; if even that does not
// end it, the turn gives it up (the next turn starts a new one).
func (t *turn) escalate(now time.Time) (agent.Outcome, bool) {
	a := t.a
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), signalGrace)
	defer cancel()
	switch {
	case t.signalled.IsZero() && now.Sub(t.since) >= a.cfg.CancelGrace:
		a.logger.Warn("the CLI did not settle after the cancel keys: SIGINT", "grace", a.cfg.CancelGrace)
		t.signalled = now
		if err := t.c.p.Signal(ctx, syscall.SIGINT); err != nil {
			a.logger.Warn("SIGINT", "err", err)
		}
	case !t.signalled.IsZero() && t.killed.IsZero() && now.Sub(t.signalled) >= signalGrace:
		a.logger.Warn("the CLI ignored SIGINT: killing it")
		t.killed = now
		if err := t.c.p.Kill(ctx); err != nil {
			a.logger.Warn("kill", "err", err)
		}
	case !t.killed.IsZero() && now.Sub(t.killed) >= signalGrace:
		a.logger.Error("the CLI is still there after SIGKILL: abandoning it", "pid", t.c.p.PID())
		a.reap(t.c)
		return t.cancelled(), true
	}
	return agent.Outcome{}, false
}
