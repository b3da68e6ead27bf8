package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/wire"
)

// followTurn prints a session's events after seq after until the turn that
// takes message msg ends.
func followTurn(ctx context.Context, cmd *cobra.Command, c *client.Client, id, msg string, after int64, asJSON bool) error {
	out := newEventPrinter(cmd.OutOrStdout(), asJSON)
	defer out.close()
	st := c.Events(ctx, id, client.StreamOptions{After: after})
	defer st.Close()
	turn := ""
	for {
		ev, err := st.Next()
		if err != nil {
			if ctx.Err() != nil {
				return exitCode(exitCancelled, nil)
			}
			return apiErr(err)
		}
		out.event(ev)
		switch p := ev.Data.(type) {
		case event.MessageDelivered:
			if p.MessageID == msg {
				turn = ev.Turn
			}
		case event.TurnFinished, event.TurnFailed, event.TurnCancelled:
			if turn != "" && ev.Turn == turn {
				if _, ok := p.(event.TurnFinished); ok {
					return nil
				}
				return exitCode(exitTurnFailed, nil)
			}
		case event.SessionState:
			if s := wire.State(p.State); s.Ended() {
				return exitCode(exitTurnFailed, fmt.Errorf("session %s %s: %s", id, s, p.Reason))
			}
		}
	}
}

// eventPrinter shows events: as JSON lines (stored events only), or for
// people (the agent's events as harvest run shows them, the session's own
// as short lines; live pieces as they come).
type eventPrinter struct {
	json bool
	w    io.Writer
	view *textView
	// live joins the live pieces printed and the stored events after them
	// (event/live.go), so text streamed is printed once.
	live event.Joiner
	// last is the seq of the last stored event printed.
	last int64
}

func newEventPrinter(w io.Writer, asJSON bool) *eventPrinter {
	p := &eventPrinter{json: asJSON, w: w}
	if !asJSON {
		p.view = newTextView(w, isTerminal(w))
	}
	return p
}

func (p *eventPrinter) event(ev event.Event) {
	if p.json {
		// The durable record: live pieces come again, joined, in the
		// stored event after them.
		if ev.Live == 0 {
			(&jsonView{w: p.w}).event(ev)
		}
		return
	}
	ev, ok := p.live.Next(ev)
	if !ok {
		return
	}
	last := p.last
	if ev.Live == 0 {
		p.last = ev.Seq
	}
	v := p.view
	switch d := ev.Data.(type) {
	case event.EventsCompacted:
		// Events the server's retention policy removed (event/retention.go).
		v.mu.Lock()
		if n := d.Missed(last); n > 0 {
			v.line("%s", v.style("2", fmt.Sprintf("· %d earlier %s removed by the retention policy (seqs %d–%d)", n, plural(int(n), "event was", "events were"), max(d.From, last+1), d.To)))
		}
		v.mu.Unlock()
	case event.SessionState:
		v.mu.Lock()
		reason := ""
		if d.Reason != "" {
			reason = " (" + d.Reason + ")"
		}
		v.line("%s", v.style("2", fmt.Sprintf("· %s%s", d.State, reason)))
		v.mu.Unlock()
	case event.MessageQueued:
		v.mu.Lock()
		v.line("%s", v.style("2", fmt.Sprintf("· message %s queued (%s, position %d): %s", d.MessageID, d.Mode, d.Position, firstLineOf(d.Text, 80))))
		v.mu.Unlock()
	case event.TurnStarted:
		v.mu.Lock()
		v.answered = false
		v.line("%s", v.style("1", fmt.Sprintf("── %s: %s", ev.Turn, firstLineOf(d.Prompt, 100))))
		v.mu.Unlock()
	default:
		v.event(ev)
	}
}

func (p *eventPrinter) close() {
	if p.view != nil {
		p.view.close()
	}
}
