package session

import (
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// Two events are journaled after the store write they report, so a crash
// between the two loses them; recovery journals them late instead (with
// the time of the recovery).
//
//   - message.delivered: runTurn marks the message delivered, then
//     journals the event (asynchronously, before turn.started). A crash
//     before the journal commits it loses it and everything the turn
//     journaled after it; the turn is then recovered as interrupted, and
//     repairDelivered journals the event first.
//   - message.queued of the prompt: Create stores the session and its
//     prompt in one transaction, then journals the event. repairPrompt
//     journals it for a session that has its prompt but not the event.
//
// (Send has no such gap: the message and its event are one transaction.)

// repairDelivered journals message.delivered for the message turn tid took
// if the store says it was delivered and the journal does not.
func (r *runner) repairDelivered(tid string) error {
	msgs, err := r.d.st.Messages(r.ctx, r.id, store.MessageDelivered)
	if err != nil {
		return err
	}
	var took *store.Message
	for _, m := range msgs {
		if m.Turn == tid {
			took = m
		}
	}
	if took == nil {
		return nil // the turn never took its message: it is still queued
	}
	found, err := r.findBack(func(ev event.Event) (bool, bool) {
		if d, ok := ev.Data.(event.MessageDelivered); ok && d.MessageID == took.ID {
			return true, true
		}
		// The events before turn tid are the previous turn's: stop there.
		return false, ev.Turn != "" && ev.Turn != tid
	})
	if err != nil || found {
		return err
	}
	r.log.Info("journaling the message.delivered a crash lost", "turn", tid, "message", took.ID)
	_, err = r.d.j.AppendSync(r.ctx, r.event(tid, event.MessageDelivered{MessageID: took.ID}))
	return err
}

// repairPrompt journals message.queued for the session's prompt (its first
// message, stored with the session) if no event says it was queued.
func (r *runner) repairPrompt() error {
	msgs, err := r.d.st.Messages(r.ctx, r.id)
	if err != nil || len(msgs) == 0 || msgs[0].Seq != 1 {
		return err
	}
	first := msgs[0]
	found := false
	// It is among the first few events (Create journals it second), or
	// soon after them if a recovery journaled it late.
	for after, page := int64(0), 8; !found; page = 256 {
		evs, err := r.d.st.Events(r.ctx, r.id, after, page)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if q, ok := ev.Data.(event.MessageQueued); ok && q.MessageID == first.ID {
				found = true
				break
			}
		}
		if len(evs) < page {
			break
		}
		after = evs[len(evs)-1].Seq
	}
	if found {
		return nil
	}
	r.log.Info("journaling the message.queued of the prompt that a crash lost", "message", first.ID)
	ev := event.Event{Session: r.id, Time: r.d.clock.Now().UTC(), Data: event.MessageQueued{MessageID: first.ID, Text: first.Text, Mode: first.Mode, Position: 1}}
	_, err = r.d.j.AppendSync(r.ctx, ev)
	return err
}

// findBack pages back from the newest event, calling match on each (newest
// first) until it reports found or stop.
func (r *runner) findBack(match func(event.Event) (found, stop bool)) (bool, error) {
	const page = 256
	last, err := r.d.st.LastSeq(r.ctx, r.id)
	if err != nil {
		return false, err
	}
	for hi := last; hi > 0; hi -= page {
		lo := max(0, hi-page)
		evs, err := r.d.st.Events(r.ctx, r.id, lo, int(hi-lo))
		if err != nil {
			return false, err
		}
		for i := len(evs) - 1; i >= 0; i-- {
			found, stop := match(evs[i])
			if found || stop {
				return found, nil
			}
		}
	}
	return false, nil
}
