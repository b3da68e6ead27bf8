package ghbot

import (
	"context"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/gh"
	"github.com/harvest-dev/harvest/store"
)

// The acknowledgement: 👀 on a comment that asks Harvest, given as soon as
// its delivery is stored, not when the processing loop comes to it.
//
// The person who asked waits for the 👀 and nothing else until the
// session starts. Before, it came after the loop had read the pending
// deliveries from the store and recorded the attempt (a write, an fsync,
// queued behind whatever sessions were writing: a turn's end writes its
// events, the pull request, the progress comment's marks), and after any
// delivery ahead of it in the loop. Now ServeHTTP hands the delivery it
// just stored to the acknowledger (a goroutine of Run's) in memory, which
// asks what processing would ask before its 👀 (commentAsks: the event
// and action, not a bot, Harvest mentioned as a person reads it, the
// sender allowed; the installation not suspended) and reacts. The store
// is not read or written on that path; the delivery's one write (before
// the 202) is.
//
//	ServeHTTP ─► AddDelivery ─► 202
//	                 │ arrived (a buffered channel; full: processing reacts)
//	                 ▼
//	runAcks ─► commentAsks ─► 👀 ─► ack.done (reacted or not)
//	processOne ─► (claim) ─► waits for it ─► BeginDelivery ─► onComment: reacted? yes: no second 👀; no: 👀 as before
//
// Exactly once: the acknowledgement is the one effect that may run
// before the attempt is recorded, and it is idempotent on GitHub (a
// reaction the app gave already is returned, not made again). Processing
// an acknowledged delivery waits for its acknowledgement to end before it
// begins it (after claiming it, when servers share the store: the one
// that received it keeps it): the two never ask GitHub at once (into a
// limit's window nobody knew of, one request is refused, not two), the
// 👀 does not share the two cores with the attempt's write, and one
// process sends the 👀 once. A retry, a replay, a restart after a crash, or
// another node processing the delivery reacts again, which GitHub answers
// with the same reaction. Nothing else moves out of processing: a
// refusal, a session, a message stay there, recorded as before.

// ackState is one delivery's acknowledgement: done is closed when it
// ended; reacted (written before done is closed) says GitHub has the 👀.
type ackState struct {
	done    chan struct{}
	reacted bool
	at      time.Time
}

// ackKeep is how long an acknowledgement is remembered for its
// processing: past it (another node processed the delivery, say) it is
// forgotten, and processing reacts itself.
const ackKeep = 10 * time.Minute

// ackQueue bounds the deliveries waiting for their acknowledgement.
const ackQueue = 64

// ackTimeout bounds an acknowledgement: its requests to GitHub.
const ackTimeout = 30 * time.Second

// queueAck hands a delivery just stored (pending) to the acknowledger.
// A full queue drops it: processing reacts, as it would have.
func (h *Hooks) queueAck(d *store.Delivery) {
	if d.Event != "issue_comment" {
		return // only comments are acknowledged early (see above)
	}
	a := &ackState{done: make(chan struct{}), at: h.now()}
	h.mu.Lock()
	for id, o := range h.acks {
		select {
		case <-o.done:
			if h.now().Sub(o.at) > ackKeep {
				delete(h.acks, id)
			}
		default:
		}
	}
	h.acks[d.ID] = a
	h.mu.Unlock()
	select {
	case h.arrived <- d:
	default:
		close(a.done) // not reacted: processing does
	}
}

// runAcks acknowledges the deliveries ServeHTTP hands it, one at a time,
// until ctx ends. It is Run's goroutine.
func (h *Hooks) runAcks(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case d := <-h.arrived:
			h.mu.Lock()
			a := h.acks[d.ID]
			h.mu.Unlock()
			if a == nil {
				continue // processed and forgotten already
			}
			actx, cancel := context.WithTimeout(gh.NoWait(ctx), ackTimeout)
			a.reacted = h.acknowledge(actx, d)
			cancel()
			close(a.done)
		}
	}
}

// acknowledge reacts 👀 to d's comment when processing would, and
// reports whether GitHub has it. Anything in the way (a limit's window,
// an error, a question not answered) leaves it to processing, which
// reacts or says why not.
func (h *Hooks) acknowledge(ctx context.Context, d *store.Delivery) bool {
	if h.suspended(ctx, d) != "" {
		return false
	}
	ev, err := github.ParseWebHook(d.Event, d.Payload)
	e, ok := ev.(*github.IssueCommentEvent)
	if err != nil || !ok {
		return false
	}
	if ignored, err := h.commentEvent(ctx, e); err != nil || ignored != "" {
		return false
	}
	full := e.GetRepo().GetFullName()
	a, err := h.commentAsks(ctx, full, e.GetSender(), e.GetComment().GetBody())
	if err != nil || a.ignored != "" || a.refused != "" {
		return false
	}
	owner, name := split(full)
	if _, _, err := a.c.Reactions.CreateIssueCommentReaction(ctx, owner, name, e.GetComment().GetID(), "eyes"); err != nil {
		h.log.Warn("acknowledging a comment (processing reacts again)", "delivery", d.ID, "err", explain(err, "reacting to the comment"))
		return false
	}
	return true
}

// acked reports whether delivery id's comment has its 👀 from the
// acknowledger, waiting for an acknowledgement under way.
func (h *Hooks) acked(ctx context.Context, id string) bool {
	h.mu.Lock()
	a := h.acks[id]
	h.mu.Unlock()
	if a == nil {
		return false
	}
	select {
	case <-a.done:
		return a.reacted
	case <-ctx.Done():
		return false
	}
}

// forgetAck drops delivery id's acknowledgement once an attempt at it
// ended: a later attempt reacts itself.
func (h *Hooks) forgetAck(id string) {
	h.mu.Lock()
	a := h.acks[id]
	if a != nil {
		select {
		case <-a.done:
			delete(h.acks, id)
		default: // under way: runAcks closes it; pruned by queueAck later
		}
	}
	h.mu.Unlock()
}

// ask is what a comment asks of Harvest, read as processing reads it
// before its 👀: ignored says why it asks nothing (a bot's, no mention),
// refused why its sender may not ask (they are told so, once); else text
// is the request (the mention taken out) and c a client for the
// repository.
type ask struct {
	ignored, refused string
	text             string
	c                *github.Client
}

// commentAsks reads a comment by who on repo: see ask.
func (h *Hooks) commentAsks(ctx context.Context, repo string, who *github.User, body string) (ask, error) {
	if who.GetType() == "Bot" || h.isBot(ctx, who) {
		return ask{ignored: "ignored: a bot's comment"}, nil
	}
	text, ok, err := h.mentioned(ctx, body)
	if err != nil {
		return ask{}, err
	}
	if !ok {
		return ask{ignored: "ignored: Harvest is not mentioned"}, nil
	}
	c, err := h.svc.gh.Client(repoScope(repo))
	if err != nil {
		return ask{}, err
	}
	why, err := h.allowed(ctx, c, repo, who)
	if err != nil {
		return ask{}, err
	}
	return ask{refused: why, text: text, c: c}, nil
}
