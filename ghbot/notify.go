package ghbot

import (
	"context"
	"strings"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/store"
)

// deliveryReader reads a stored webhook delivery (the store).
type deliveryReader interface {
	GetDelivery(ctx context.Context, id string) (*store.Delivery, error)
}

// deliveryKeyPrefix prefixes the idempotency key of a message a webhook
// delivery sent (followed by the delivery's id).
const deliveryKeyPrefix = "github-"

// trigger is what asked for a turn, as GitHub said it: where to answer
// and whom to tell.
type trigger struct {
	// Repo and Number are the thread the request was made in.
	Repo   string
	Number int
	IsPR   bool
	// Login is who asked ("": nobody in particular, a failed check).
	Login string
	// Comment is the issue comment that asked (0: none), for the
	// completion reaction; ReviewComment the review comment, answered in
	// its thread; Review a submitted review, answered with one comment.
	Comment       int64
	ReviewComment int64
	Review        int64
	// Issue: the issue itself asked (labelled or assigned), for the
	// reaction.
	Issue bool
}

// turnTrigger says what asked for a turn: the webhook delivery its
// message names (Key github-ID), else the session's own thread and
// requester (a message sent through the API).
func (s *Service) turnTrigger(ctx context.Context, sess *store.Session, msg *store.Message) trigger {
	var t trigger
	if l := sess.GitHub; l != nil {
		t = trigger{Repo: l.Repo, Number: l.Number, IsPR: l.IsPR, Login: l.Requester}
	}
	if msg == nil || !strings.HasPrefix(msg.Key, deliveryKeyPrefix) || s.deliveries == nil {
		return t
	}
	d, err := s.deliveries.GetDelivery(ctx, strings.TrimPrefix(msg.Key, deliveryKeyPrefix))
	if err != nil {
		s.log.Warn("reading the delivery that asked for a turn", "session", sess.ID, "key", msg.Key, "err", err)
		return t
	}
	ev, err := github.ParseWebHook(d.Event, d.Payload)
	if err != nil {
		return t
	}
	switch e := ev.(type) {
	case *github.IssueCommentEvent:
		t = trigger{Repo: e.GetRepo().GetFullName(), Number: e.GetIssue().GetNumber(), IsPR: e.GetIssue().IsPullRequest(),
			Login: e.GetSender().GetLogin(), Comment: e.GetComment().GetID()}
	case *github.IssuesEvent:
		t = trigger{Repo: e.GetRepo().GetFullName(), Number: e.GetIssue().GetNumber(), Login: e.GetSender().GetLogin(), Issue: true}
	case *github.PullRequestReviewEvent:
		t = trigger{Repo: e.GetRepo().GetFullName(), Number: e.GetPullRequest().GetNumber(), IsPR: true,
			Login: e.GetSender().GetLogin(), Review: e.GetReview().GetID()}
	case *github.PullRequestReviewCommentEvent:
		t = trigger{Repo: e.GetRepo().GetFullName(), Number: e.GetPullRequest().GetNumber(), IsPR: true,
			Login: e.GetSender().GetLogin(), ReviewComment: e.GetComment().GetID()}
	case *github.CheckSuiteEvent:
		if prs := e.GetCheckSuite().PullRequests; len(prs) > 0 {
			t.Repo, t.Number, t.IsPR = e.GetRepo().GetFullName(), prs[0].GetNumber(), true
		}
	}
	return t
}
