package claudecode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/event"
)

// turn is one running turn. Only the turn's goroutine uses it.
type turn struct {
	a     *Agent
	ctx   context.Context
	emit  func(event.Payload)
	m     *mapper
	start time.Time
	cost  float64 // the turn's, from its result
}

// phase of a turn's cancel ladder.
type phase int

const (
	working     phase = iota
	interrupted       // the interrupt control request was sent
	signalled         // SIGINT was sent
)

func (t *turn) run(prompt string) agent.Outcome {
	a := t.a
	p, err := a.running(t.ctx)
	if err != nil {
		if t.ctx.Err() != nil {
			return t.cancelled("")
		}
		if !a.box.Alive() {
			return t.fail(event.FailSandbox, fmt.Sprintf("the box is gone, so Claude Code cannot run: %v", err))
		}
		return t.fail(event.FailCLICrashed, fmt.Sprintf("Claude Code could not be started in the box: %v", err))
	}
	t.discardStale(p)
	if err := p.send(t.ctx, newUserMessage(prompt)); err != nil {
		if t.ctx.Err() != nil {
			return t.cancelled("")
		}
		// It exited: the loop reads what it printed and says so.
	}
	return t.loop(p)
}

// discardStale drops lines printed between turns (a late answer to an
// interrupt): they belong to no turn.
func (t *turn) discardStale(p *proc) {
	for {
		select {
		case b, ok := <-p.lines:
			if !ok {
				return
			}
			t.a.log.Debug("claude code: output between turns ignored", "line", quote(b, 200))
		default:
			return
		}
	}
}

// loop reads the CLI's lines until the turn ends: its result (then a
// control request it must answer), its exit, a watchdog, or the cancel
// ladder (interrupt, SIGINT, kill).
func (t *turn) loop(p *proc) agent.Outcome {
	a := t.a
	cfg := a.cfg
	watch := time.NewTimer(cfg.NoOutputTimeout)
	defer watch.Stop()
	var (
		ph       = working
		ladder   <-chan time.Time
		ctxDone  = t.ctx.Done()
		result   *line
		pingID   string
		cancelAt time.Time
	)
	for {
		select {
		case b, ok := <-p.lines:
			if !ok {
				return t.exited(p, ph, result)
			}
			if len(bytes.TrimSpace(b)) == 0 {
				continue
			}
			if result == nil {
				watch.Reset(cfg.NoOutputTimeout)
			}
			var l line
			if err := json.Unmarshal(b, &l); err != nil || l.Type == "" {
				a.kill(t.ctx, p)
				return t.fail(event.FailCLIProtocol, fmt.Sprintf("Claude Code printed a line that is not a stream-json message: %s; it was killed, and the next turn starts it again with the conversation so far", quote(b, 300)))
			}
			switch l.Type {
			case "result":
				if result != nil {
					a.log.Warn("claude code printed a second result for one turn; ignored")
					continue
				}
				result = &l
				t.cost = l.TotalCostUSD - p.cost
				if t.cost < 0 { // a new process counts from zero
					t.cost = l.TotalCostUSD
				}
				p.cost = l.TotalCostUSD
				t.m.result(t.cost, "The turn ended before this tool call finished.")
				if ph != working {
					return t.cancelled("")
				}
				// The result is in; the CLI must now be idle and
				// listening. A control request proves it (and flushes
				// anything it still had to print).
				pingID = a.nextID("ping")
				if err := p.send(t.ctx, controlRequest(pingID, "mcp_status")); err != nil && t.ctx.Err() == nil {
					continue // it exited: the next read says so
				}
				watch.Reset(cfg.ResultTimeout)
			case "control_response":
				if l.Response != nil && pingID != "" && l.Response.RequestID == pingID {
					return t.finished(p, result)
				}
				a.log.Debug("claude code: control response", "request", responseID(&l))
			case "control_request":
				// Permission prompts and hook callbacks would wait for an
				// SDK host; Harvest is not one.
				_ = p.send(t.ctx, controlError(l.RequestID, "Harvest does not answer control requests; run with bypassPermissions and command hooks"))
				a.log.Warn("claude code asked Harvest a control request; refused", "request", string(deref(l.Request)))
			default:
				if result != nil {
					a.log.Debug("claude code: output after the result ignored", "type", l.Type)
					continue
				}
				t.m.handle(&l)
			}

		case <-watch.C:
			a.kill(t.ctx, p)
			t.m.end("The turn ended before this tool call finished.")
			if result != nil {
				return t.fail(event.FailCLIHung, fmt.Sprintf("Claude Code printed its result (%s) but then did not answer a control request within %s; it was killed, and the next turn starts it again with the conversation so far", quote([]byte(result.Result), 200), cfg.ResultTimeout))
			}
			if ph != working {
				return t.cancelled("Claude Code stopped printing while it was being interrupted; it was killed")
			}
			return t.fail(event.FailCLIHung, fmt.Sprintf("Claude Code printed nothing for %s (NoOutputTimeout); it was killed, and the next turn starts it again with the conversation so far", cfg.NoOutputTimeout))

		case <-ctxDone:
			ctxDone = nil
			cancelAt = time.Now()
			if result != nil {
				// Finished, but not yet confirmed idle: the cancel wins,
				// the late answer is discarded next turn.
				return t.cancelled("")
			}
			ph = interrupted
			if err := p.send(context.WithoutCancel(t.ctx), controlRequest(a.nextID("interrupt"), "interrupt")); err != nil {
				a.log.Debug("claude code: sending the interrupt", "err", err)
			}
			ladder = time.After(cfg.InterruptGrace)

		case <-ladder:
			switch ph {
			case interrupted:
				a.log.Warn("Claude Code did not stop on its interrupt request; sending SIGINT", "after", time.Since(cancelAt))
				ph = signalled
				sctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), 5*time.Second)
				if err := p.signal(sctx, syscall.SIGINT); err != nil {
					a.log.Warn("claude code: SIGINT", "err", err)
				}
				cancel()
				ladder = time.After(cfg.InterruptGrace)
			default:
				a.log.Warn("Claude Code did not stop on SIGINT; killing it", "after", time.Since(cancelAt))
				a.kill(t.ctx, p)
				t.m.end("The turn was cancelled before this tool call finished.")
				return t.cancelled("")
			}
		}
	}
}

// exited ends a turn whose CLI's output ended: it exited or crashed.
func (t *turn) exited(p *proc, ph phase, result *line) agent.Outcome {
	a := t.a
	sctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), 10*time.Second)
	status := p.status(sctx)
	cancel()
	readErr := p.readErr
	a.kill(t.ctx, p)
	t.m.end("The turn ended before this tool call finished.")
	switch {
	case errors.Is(readErr, bufio.ErrTooLong):
		return t.fail(event.FailCLIProtocol, fmt.Sprintf("Claude Code printed a line over %d MiB; it was killed, and the next turn starts it again with the conversation so far", maxLine>>20))
	case ph != working:
		return t.cancelled("")
	case result != nil:
		// Its result is complete; that it exited afterwards only means
		// the next turn starts it again.
		a.log.Warn("Claude Code exited after its result", "status", status, "stderr", p.stderr.String())
		return t.finished(p, result)
	}
	msg := fmt.Sprintf("Claude Code exited during the turn (%s); the next turn starts it again with the conversation so far", status)
	if s := p.stderr.String(); s != "" {
		msg += ". Its last words on stderr: " + lastLines(s, 5, 1000)
	}
	return t.fail(event.FailCLICrashed, msg)
}

// finished maps the CLI's result line to the turn's outcome.
func (t *turn) finished(p *proc, r *line) agent.Outcome {
	cost := t.cost
	usage := t.m.usage
	if r.Usage != nil {
		usage = r.Usage.event()
	}
	steps := t.m.steps
	if steps == 0 {
		steps = r.NumTurns
	}
	failed := func(kind event.FailureKind, msg string) agent.Outcome {
		return agent.Outcome{Failed: &event.TurnFailed{Kind: kind, Error: msg, Usage: usage, Cost: cost}}
	}
	detail := strings.TrimSpace(r.Result)
	if len(r.Errors) > 0 {
		detail = strings.Join(r.Errors, "; ")
	}
	switch {
	case r.Subtype == "success" && !r.IsError:
		return agent.Outcome{Finished: &event.TurnFinished{
			Result: r.Result, StopReason: r.StopReason, Steps: steps, Usage: usage, CostUSD: cost,
			DurationMS: time.Since(t.start).Milliseconds(),
		}}
	case r.APIErrorStatus != nil:
		return failed(event.FailModel, fmt.Sprintf("the model API answered Claude Code with status %d: %s", *r.APIErrorStatus, detail))
	case r.Subtype == "error_max_turns":
		return failed(event.FailMaxSteps, "Claude Code reached its maximum number of turns: "+detail)
	case r.Subtype == "error_max_budget_usd":
		return failed(event.FailBudget, "Claude Code reached its budget: "+detail)
	}
	return failed(event.FailCLIError, fmt.Sprintf("Claude Code ended the turn with an error (%s): %s", r.Subtype, detail))
}

func (t *turn) fail(kind event.FailureKind, msg string) agent.Outcome {
	return agent.Outcome{Failed: &event.TurnFailed{Kind: kind, Error: msg, Usage: t.m.usage}}
}

func (t *turn) cancelled(note string) agent.Outcome {
	reason := "cancelled"
	if c := context.Cause(t.ctx); c != nil && !errors.Is(c, context.Canceled) {
		reason = c.Error()
	}
	if note != "" {
		reason += " (" + note + ")"
	}
	return agent.Outcome{Cancelled: &event.TurnCancelled{Reason: reason}}
}

// quote shows at most n bytes of b, quoted.
func quote(b []byte, n int) string {
	s := string(b)
	if len(s) > n {
		s = truncate(s, n) + "…"
	}
	return fmt.Sprintf("%q", s)
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// lastLines returns the last k lines of s, at most n bytes.
func lastLines(s string, k, n int) string {
	ls := strings.Split(s, "\n")
	if len(ls) > k {
		ls = ls[len(ls)-k:]
	}
	out := strings.Join(ls, "\n")
	if len(out) > n {
		out = "…" + out[len(out)-n:]
	}
	return out
}

func responseID(l *line) string {
	if l.Response == nil {
		return ""
	}
	return l.Response.RequestID
}

func deref(r *json.RawMessage) []byte {
	if r == nil {
		return nil
	}
	return *r
}
