package ghbot

import (
	"compress/gzip"
	"encoding/json"
	"os"
	"testing"

	"github.com/google/go-github/v75/github"
)

// TestRecordedPayloads feeds every recorded payload of the events Harvest
// handles (@octokit/webhooks-examples, pinned in sim/ghsim/testdata: real
// deliveries carry fields the stand-in does not make) through the parser
// Harvest uses, and checks that what Harvest reads of each is there: the
// repository and sender of every one, and per event the fields its
// trigger reads (a comment's text and its issue, a pull request's head
// branch and whether it was merged, a review's id and state, a suite's
// conclusion and head).
func TestRecordedPayloads(t *testing.T) {
	events := recordedPayloads(t)
	handled := map[string]int{}
	for _, ev := range events {
		for i, raw := range ev.Examples {
			parsed, err := github.ParseWebHook(ev.Name, raw)
			if err != nil {
				t.Errorf("%s example %d: %v", ev.Name, i, err)
				continue
			}
			var action string
			var problems []string
			need := func(ok bool, what string) {
				if !ok {
					problems = append(problems, what)
				}
			}
			switch e := parsed.(type) {
			case *github.IssueCommentEvent:
				action = e.GetAction()
				need(e.GetRepo().GetFullName() != "" && e.GetSender().GetLogin() != "", "repository and sender")
				need(e.GetIssue().GetNumber() > 0 && e.GetComment().GetID() > 0, "the issue's number and the comment's id")
				if action == "edited" {
					need(e.GetChanges().GetBody() != nil, "changes.body")
				}
				// The comment is read as a person reads it.
				readMention(e.GetComment().GetBody(), "@harvest")
			case *github.IssuesEvent:
				action = e.GetAction()
				need(e.GetRepo().GetFullName() != "" && e.GetSender().GetLogin() != "" && e.GetIssue().GetNumber() > 0, "repository, sender, issue")
				if action == "labeled" {
					need(e.GetLabel().GetName() != "", "the label")
				}
				if action == "assigned" {
					need(e.GetAssignee().GetLogin() != "", "the assignee")
				}
			case *github.PullRequestEvent:
				action = e.GetAction()
				pr := e.GetPullRequest()
				need(e.GetRepo().GetFullName() != "" && e.GetSender().GetLogin() != "", "repository and sender")
				need(pr.GetNumber() > 0 && pr.GetHead().GetRef() != "" && pr.GetHead().GetRepo().GetFullName() != "", "the number and head branch")
				need(pr.Merged != nil, "merged")
			case *github.PullRequestReviewEvent:
				action = e.GetAction()
				need(e.GetRepo().GetFullName() != "" && e.GetSender().GetLogin() != "", "repository and sender")
				need(e.GetReview().GetID() > 0 && e.GetReview().GetState() != "", "the review's id and state")
				need(e.GetPullRequest().GetHead().GetRef() != "" && e.GetPullRequest().GetNumber() > 0, "the pull request's head")
			case *github.PullRequestReviewCommentEvent:
				action = e.GetAction()
				need(e.GetRepo().GetFullName() != "" && e.GetSender().GetLogin() != "", "repository and sender")
				need(e.GetComment().GetID() > 0 && e.GetComment().GetPullRequestReviewID() > 0 && e.GetComment().GetPath() != "", "the comment's id, review and path")
				need(e.GetPullRequest().GetHead().GetRef() != "", "the pull request's head")
			case *github.CheckSuiteEvent:
				action = e.GetAction()
				cs := e.GetCheckSuite()
				need(e.GetRepo().GetFullName() != "" && cs.GetID() > 0 && cs.GetHeadSHA() != "", "repository, suite id and head")
				if action == "completed" {
					need(cs.GetConclusion() != "", "the conclusion")
				}
				for _, pr := range cs.PullRequests {
					need(pr.GetHead().GetRef() != "" && pr.GetHead().GetRepo().GetID() != 0, "a suite pull request's head")
				}
			case *github.PushEvent:
				action = "(push)"
				need(e.GetRepo().GetFullName() != "" && e.GetRef() != "", "repository and ref")
			case *github.InstallationEvent, *github.InstallationRepositoriesEvent:
				action = "(installation)"
			default:
				t.Errorf("%s example %d: parsed as %T", ev.Name, i, parsed)
				continue
			}
			for _, p := range problems {
				t.Errorf("%s %s example %d: no %s", ev.Name, action, i, p)
			}
			handled[ev.Name]++
		}
	}
	for _, name := range []string{"issue_comment", "issues", "pull_request", "pull_request_review", "pull_request_review_comment", "check_suite", "push"} {
		if handled[name] == 0 {
			t.Errorf("no recorded %s payload", name)
		}
	}
	t.Logf("recorded payloads parsed: %v", handled)
}

// recordedEvent is one event's recorded payloads.
type recordedEvent struct {
	Name     string            `json:"name"`
	Examples []json.RawMessage `json:"examples"`
}

// recordedPayloads reads the pinned @octokit/webhooks-examples.
func recordedPayloads(t *testing.T) []recordedEvent {
	t.Helper()
	f, err := os.Open("../sim/ghsim/ghschema/descriptions/webhook-examples.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var events []recordedEvent
	if err := json.NewDecoder(zr).Decode(&events); err != nil {
		t.Fatal(err)
	}
	return events
}
