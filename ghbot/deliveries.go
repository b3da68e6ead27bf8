package ghbot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/gh"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// How an attempt at a delivery ends (finish):
//
//	done                              → done, with what it did
//	installation suspended            → done, "suspended: ...", not retried
//	held back by one of GitHub's       → due again when the window ends, the
//	  windows (gh.ErrRateLimited)        attempt given back (DeferDelivery)
//	permanent (not installed, no       → failed at once; the person who asked
//	  access, invalid), or the last      is told why and what to do, where a
//	  attempt                            comment can be posted
//	anything else                     → due again after a growing pause
//	                                    (RetryDelivery)
//
// A failed delivery is listed (ListDeliveries) and can be replayed
// (Replay), once however many ask.

// finish records the end of an attempt at d.
func (h *Hooks) finish(ctx context.Context, d *store.Delivery, result string, err error) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	now := h.now()
	switch {
	case err == nil && strings.HasPrefix(result, "suspended:"):
		h.log.Warn("a webhook delivery for a suspended installation: nothing done", "delivery", d.ID, "event", d.Event, "result", result)
		h.observe(d.Event, DeliveryIgnored)
		h.record(fctx, d, store.DeliveryDone, result)
	case err == nil:
		h.log.Info("webhook delivery processed", "delivery", d.ID, "event", d.Event, "result", result)
		h.observe(d.Event, outcome(result))
		h.record(fctx, d, store.DeliveryDone, result)
	case errors.Is(err, gh.ErrSuspended):
		result = "suspended: " + err.Error()
		h.log.Warn("a webhook delivery for a suspended installation: nothing done", "delivery", d.ID, "event", d.Event, "err", err)
		h.observe(d.Event, DeliveryIgnored)
		h.record(fctx, d, store.DeliveryDone, result)
	case errors.Is(err, gh.ErrRateLimited) && !isPermanent(err):
		at := gh.RetryAt(err)
		if at.Before(now) {
			at = now
		}
		at = at.Add(rand.N(time.Second)) // deliveries held back together do not all go at once
		h.observe(d.Event, DeliveryDeferred)
		h.log.Info("a webhook delivery is held back by GitHub's limits", "delivery", d.ID, "event", d.Event, "until", at.UTC().Format(time.RFC3339), "err", err)
		if err := h.st.DeferDelivery(fctx, d.ID, at, "held back until "+at.UTC().Format(time.RFC3339)+": "+err.Error()); err != nil {
			h.log.Error("putting off a webhook delivery", "delivery", d.ID, "err", err)
		}
	case isPermanent(err) || d.Attempts >= h.cfg.MaxAttempts:
		why := err.Error()
		if !isPermanent(err) {
			why = fmt.Sprintf("failed %d times; the last: %v", d.Attempts, err)
		}
		h.observe(d.Event, DeliveryFailed)
		h.log.Error("a webhook delivery failed for good", "delivery", d.ID, "event", d.Event, "attempts", d.Attempts, "err", err)
		if told := h.tellFailure(fctx, d, err); told != "" {
			why += " (" + told + ")"
		}
		h.record(fctx, d, store.DeliveryFailed, why)
	default:
		wait := min(h.cfg.Retry<<min(d.Attempts-1, 5), time.Minute)
		h.observe(d.Event, DeliveryRetry)
		h.log.Warn("processing a webhook delivery failed; trying again", "delivery", d.ID, "event", d.Event, "attempt", d.Attempts, "in", wait, "err", err)
		if err := h.st.RetryDelivery(fctx, d.ID, now.Add(wait), err.Error()); err != nil {
			h.log.Error("scheduling a webhook delivery's next attempt", "delivery", d.ID, "err", err)
		}
	}
}

func (h *Hooks) record(ctx context.Context, d *store.Delivery, state, result string) {
	if err := h.st.FinishDelivery(ctx, d.ID, state, result); err != nil {
		h.log.Error("recording a webhook delivery's end", "delivery", d.ID, "err", err)
	}
	if strings.HasPrefix(result, "refused ") {
		h.auditRefusal(ctx, d, result)
	}
}

// target is who asked and where, as a delivery's payload says.
type target struct {
	Repo, Sender, Action string
	Number               int
	Installation         int64
	// SenderID is the sender's GitHub user id.
	SenderID int64
}

// payloadTarget reads a payload's repository, issue or pull request,
// sender and installation (zero values for what it lacks).
func payloadTarget(payload []byte) target {
	var p struct {
		Action     string `json:"action"`
		Repository struct {
			FullName string `json:"full_name"`
		} `json:"repository"`
		Issue struct {
			Number int `json:"number"`
		} `json:"issue"`
		PullRequest struct {
			Number int `json:"number"`
		} `json:"pull_request"`
		CheckSuite struct {
			PullRequests []struct {
				Number int `json:"number"`
			} `json:"pull_requests"`
		} `json:"check_suite"`
		Sender struct {
			Login string `json:"login"`
			ID    int64  `json:"id"`
		} `json:"sender"`
		Installation struct {
			ID int64 `json:"id"`
		} `json:"installation"`
	}
	if json.Unmarshal(payload, &p) != nil {
		return target{}
	}
	t := target{Repo: p.Repository.FullName, Sender: p.Sender.Login, Action: p.Action, Installation: p.Installation.ID,
		Number: p.Issue.Number, SenderID: p.Sender.ID}
	if t.Number == 0 {
		t.Number = p.PullRequest.Number
	}
	if t.Number == 0 && len(p.CheckSuite.PullRequests) > 0 {
		t.Number = p.CheckSuite.PullRequests[0].Number
	}
	return t
}

// suspended says why d is not acted on when its installation is
// suspended ("" when it is not). Installation events always go through:
// one of them lifts the suspension.
func (h *Hooks) suspended(ctx context.Context, d *store.Delivery) string {
	if d.Event == "installation" || d.Event == "installation_repositories" {
		return ""
	}
	t := payloadTarget(d.Payload)
	if t.Installation == 0 || !h.svc.gh.IsApp() || !h.svc.gh.Suspended(ctx, t.Installation) {
		return ""
	}
	return fmt.Sprintf("suspended: installation %d of the app is suspended; nothing is done for it until its owner unsuspends it", t.Installation)
}

// replyScope is what a reply needs: commenting on an issue or pull
// request, and nothing else (so it can be posted when a wider token
// cannot be minted).
func replyScope(repo string) gh.Scope {
	return gh.Scope{Repos: []string{repo}, Permissions: map[string]string{"issues": "write", "metadata": "read"}}
}

// tellFailure tells the person who asked why d failed for good, with a
// comment where it was asked, and returns a note of what was done ("" if
// nothing needed telling). A request the session layer refused was told
// already (the progress comment); a repository the app is not installed
// on cannot be commented on: the log says what to do.
func (h *Hooks) tellFailure(ctx context.Context, d *store.Delivery, err error) string {
	t := payloadTarget(d.Payload)
	var p permanent
	switch {
	case session.IsInput(err) || errors.As(err, &p):
		return ""
	case errors.Is(err, gh.ErrNotInstalled):
		h.log.Error("GitHub says the app is not installed on the repository: no reply can be posted there; install the app on it (or add it to the installation's repositories), then replay the delivery",
			"delivery", d.ID, "repo", t.Repo, "replay", "harvest github replay "+d.ID)
		return "not told: the app cannot comment where it is not installed"
	case t.Repo == "" || t.Number == 0:
		return ""
	}
	owner, _ := split(t.Repo)
	var msg string
	switch {
	case errors.Is(err, gh.ErrInvalid) && strings.Contains(err.Error(), "permissions requested are not granted"):
		msg = fmt.Sprintf("the app's installation on %s has not been granted the permissions Harvest needs (GitHub: %v). An admin of %s accepts the permissions the app asks for, in the installation's settings", owner, err, owner)
	case errors.Is(err, gh.ErrInvalid):
		msg = fmt.Sprintf("GitHub refused one of its requests as invalid (%v)", err)
	case errors.Is(err, gh.ErrNoAccess):
		msg = fmt.Sprintf("GitHub refused Harvest (%v). An admin of %s checks the app's installation: its repositories and permissions", err, owner)
	default:
		msg = fmt.Sprintf("it failed %d times; the last error: %v", d.Attempts, err)
	}
	who := ""
	if t.Sender != "" {
		who = " @" + t.Sender
	}
	text := fmt.Sprintf("Sorry%s, Harvest could not do this: %s.\n\nOnce that is fixed, this server's operator can run it again: `harvest github replay %s`.", who, msg, d.ID)
	c, cerr := h.svc.gh.Client(replyScope(t.Repo))
	if cerr == nil {
		rctx, cancel := context.WithTimeout(gh.NoWait(ctx), 30*time.Second)
		cerr = h.reply(rctx, c, t.Repo, t.Number, d.ID+"-failed", text)
		cancel()
	}
	if cerr != nil {
		h.log.Error("telling the person who asked why a webhook delivery failed", "delivery", d.ID, "repo", t.Repo, "number", t.Number, "err", cerr)
		return "not told: " + cerr.Error()
	}
	return fmt.Sprintf("told on %s#%d", t.Repo, t.Number)
}

// ListDeliveries lists the stored deliveries, newest first: all, or only
// those in state (pending, done, failed); at most limit (0: 100).
func (h *Hooks) ListDeliveries(ctx context.Context, state string, limit int) ([]wire.GitHubDelivery, error) {
	ds, err := h.st.ListDeliveries(ctx, store.DeliveryFilter{State: state, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]wire.GitHubDelivery, 0, len(ds))
	for _, d := range ds {
		out = append(out, deliveryView(d))
	}
	return out, nil
}

// Replay makes a failed delivery pending again, processed as if it had
// just arrived: once, however many ask at once (the others are
// store.ErrConflict), and never while it is pending (its own retries).
func (h *Hooks) Replay(ctx context.Context, id string) (wire.GitHubDelivery, error) {
	d, err := h.st.ReplayDelivery(ctx, id)
	if err != nil {
		return wire.GitHubDelivery{}, err
	}
	h.log.Info("a failed webhook delivery is replayed", "delivery", id, "event", d.Event, "replays", d.Replays)
	select {
	case h.wake <- struct{}{}:
	default:
	}
	return deliveryView(d), nil
}

func deliveryView(d *store.Delivery) wire.GitHubDelivery {
	t := payloadTarget(d.Payload)
	return wire.GitHubDelivery{ID: d.ID, Event: d.Event, Action: t.Action, Repo: t.Repo, Number: t.Number, Sender: t.Sender,
		Installation: t.Installation, State: d.State, Attempts: d.Attempts, Replays: d.Replays, Result: d.Result,
		ReceivedAt: d.ReceivedAt, DoneAt: d.DoneAt, NotBefore: d.NotBefore}
}

// SharedMarks is the store's GitHub marks as gh's Shared: what one node
// learns of GitHub's limits and installations, the others know.
func SharedMarks(st store.GitHubMarks) gh.Shared { return storeMarks{st} }

type storeMarks struct{ st store.GitHubMarks }

func (s storeMarks) Marks(ctx context.Context, scope string) ([]gh.Mark, error) {
	ms, err := s.st.GitHubMarks(ctx, scope)
	if err != nil {
		return nil, err
	}
	out := make([]gh.Mark, len(ms))
	for i, m := range ms {
		out[i] = gh.Mark{Scope: m.Scope, Kind: m.Kind, Until: m.Until, Note: m.Note}
	}
	return out, nil
}

func (s storeMarks) PutMark(ctx context.Context, m gh.Mark) error {
	return s.st.PutGitHubMark(ctx, store.GitHubMark{Scope: m.Scope, Kind: m.Kind, Until: m.Until, Note: m.Note})
}

func (s storeMarks) DeleteMark(ctx context.Context, scope, kind string) error {
	return s.st.DeleteGitHubMark(ctx, scope, kind)
}
