package ghbot

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/gh"
)

// TestIgnorable: every recorded payload (@octokit/webhooks-examples) that
// ignorable stores done at receipt is one process does nothing for, read
// through go-github as process reads it; and those Harvest acts on or
// learns from (a person's comment created or edited, a pull request
// closed, a review submitted, a review comment created, a check suite
// completed, a labelled or assigned issue, installations and pushes) are
// all left to process.
func TestIgnorable(t *testing.T) {
	events := recordedPayloads(t)
	h := &Hooks{cfg: HookConfig{Label: "harvest"}}
	ignored, kept := 0, 0
	for _, ev := range events {
		for i, raw := range ev.Examples {
			why := h.ignorable(ev.Name, raw)
			acts := false // process may act on it, or learns from it
			parsed, err := github.ParseWebHook(ev.Name, raw)
			if err == nil {
				switch e := parsed.(type) {
				case *github.IssueCommentEvent:
					acts = (e.GetAction() == "created" || e.GetAction() == "edited") && e.GetSender().GetType() != "Bot"
				case *github.IssuesEvent:
					acts = e.GetAction() == "assigned" || e.GetAction() == "labeled" && strings.EqualFold(e.GetLabel().GetName(), "harvest")
				case *github.PullRequestEvent:
					acts = e.GetAction() == "closed"
				case *github.PullRequestReviewEvent:
					acts = e.GetAction() == "submitted"
				case *github.PullRequestReviewCommentEvent:
					acts = e.GetAction() == "created"
				case *github.CheckSuiteEvent:
					acts = e.GetAction() == "completed"
				case *github.InstallationEvent, *github.InstallationRepositoriesEvent, *github.PushEvent:
					acts = true
				}
			}
			switch {
			case acts && why != "":
				t.Errorf("%s example %d (action %q): ignored at receipt (%q), but Harvest acts on it", ev.Name, i, action(raw), why)
			case !acts && err == nil && why == "":
				t.Errorf("%s example %d (action %q): queued, though nothing is done for it", ev.Name, i, action(raw))
			case why != "" && !strings.HasPrefix(why, "ignored: "):
				t.Errorf("%s example %d: result %q", ev.Name, i, why)
			}
			if why != "" {
				ignored++
			} else {
				kept++
			}
		}
	}
	if ignored == 0 || kept == 0 {
		t.Fatalf("%d ignored, %d kept: the examples do not exercise both", ignored, kept)
	}
	// A payload that does not parse is left to process, which says what
	// is wrong with it.
	if why := h.ignorable("issues", []byte("{")); why != "" {
		t.Errorf("a malformed payload: %q", why)
	}
}

func action(raw []byte) string {
	var p struct {
		Action string `json:"action"`
	}
	json.Unmarshal(raw, &p)
	return p.Action
}

// TestIgnorableOwnCheckSuite: a check suite completed is dropped at
// receipt when it is the app's own (its "Harvest" check runs, checks.go),
// and left to process when it is another app's, whatever its conclusion.
func TestIgnorableOwnCheckSuite(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	g, err := gh.New(gh.Config{AppID: 42, PrivateKey: pemKey})
	if err != nil {
		t.Fatal(err)
	}
	h := &Hooks{svc: &Service{gh: g}}
	suite := func(app int64) []byte {
		return []byte(fmt.Sprintf(`{"action":"completed","check_suite":{"conclusion":"failure","app":{"id":%d}},"sender":{"type":"Bot"}}`, app))
	}
	if why := h.ignorable("check_suite", suite(42)); why != "ignored: Harvest's own check suite" {
		t.Errorf("the app's own suite: %q", why)
	}
	if why := h.ignorable("check_suite", suite(15368)); why != "" {
		t.Errorf("another app's suite: %q; want it processed", why)
	}
}
