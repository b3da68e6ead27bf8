package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/sim/ghsim"
	"github.com/harvest-dev/harvest/sim/slacksim"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// pickerGroups are the option groups of a message's static_select
// harvest-repo: label → option values (nil when it has none).
func pickerGroups(m slacksim.Message) map[string][]string {
	var blocks []struct {
		Elements []struct {
			Type     string `json:"type"`
			ActionID string `json:"action_id"`
			Groups   []struct {
				Label struct {
					Text string `json:"text"`
				} `json:"label"`
				Options []struct {
					Value string `json:"value"`
				} `json:"options"`
			} `json:"option_groups"`
		} `json:"elements"`
	}
	json.Unmarshal(m.Blocks, &blocks)
	var out map[string][]string
	for _, b := range blocks {
		for _, e := range b.Elements {
			if e.Type != "static_select" || e.ActionID != "harvest-repo" {
				continue
			}
			for _, g := range e.Groups {
				if out == nil {
					out = map[string][]string{}
				}
				for _, o := range g.Options {
					out[g.Label.Text] = append(out[g.Label.Text], o.Value)
				}
			}
		}
	}
	return out
}

// TestSlackPickerGitHub: with a GitHub App installed on acme/calc (ada
// may write) and acme/docs (ada may only read), alice (linked to ada)
// mentions the app naming no repository: the picker lists acme/calc
// under "GitHub" (not acme/docs) and her directory under "Directories";
// choosing acme/calc starts the session on the GitHub repository, as a
// mention naming it does, and the turn's final message carries the pull
// request's link. Every Slack and GitHub exchange is checked against
// their descriptions (the environments' cleanups).
func TestSlackPickerGitHub(t *testing.T) {
	g := newGHEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	docs := t.TempDir()
	os.WriteFile(filepath.Join(docs, "README.md"), []byte("# docs\n"), 0o644)
	if _, err := g.gs.CreateRepo(ctx, ghsim.RepoSpec{Owner: "acme", Name: "docs", Dir: docs, DefaultBranch: "main", Private: true}); err != nil {
		t.Fatal(err)
	}
	if err := g.gs.SetPermission(ghsim.PermissionSpec{Repo: "acme/docs", Login: "ada", Permission: "read"}); err != nil {
		t.Fatal(err)
	}
	se := newSlackEnvWith(t, slacksim.Options{}, githubScript)
	st, err := sqlite.Open(filepath.Join(se.e.home, "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	err = st.AddIdentity(ctx, &store.Identity{User: "usr-alice", Kind: store.IdentityGitHub, Subject: strconv.FormatInt(g.ada.ID, 10), Login: "ada"})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	se.serve(t, false, g.serveArgs()...)

	m := se.post(t, se.alice, se.mention()+" fix the failing test please", "")
	var picker slacksim.Message
	waitUntil(t, ctx, "the picker in the thread", func() bool {
		for _, r := range se.botReplies(m.TS) {
			if pickerGroups(r) != nil || pickerOptions(r) != nil {
				picker = r
				return true
			}
		}
		return false
	})
	groups := pickerGroups(picker)
	if len(groups) != 2 || !slices.Equal(groups["GitHub"], []string{"acme/calc"}) || !slices.Equal(groups["Directories"], []string{"calc"}) {
		t.Fatalf("the picker's groups: %v; want GitHub [acme/calc] (not acme/docs: ada only reads it) and Directories [calc]", groups)
	}
	for _, p := range []string{"/api/v3/app/installations", "/api/v3/installation/repositories",
		"/api/v3/repos/acme/calc/collaborators/ada/permission", "/api/v3/repos/acme/docs/collaborators/ada/permission"} {
		if g.count("GET", p) != 1 {
			t.Errorf("GET %s was asked %d times, want once", p, g.count("GET", p))
		}
	}

	if err := se.ss.Click(slacksim.ClickSpec{User: se.alice.ID, Channel: se.general.ID, TS: picker.TS, ActionID: "harvest-repo", Value: "acme/calc"}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "the picker edited", func() bool {
		p, _ := se.ss.Message(se.general.ID, picker.TS)
		return strings.Contains(p.Text, "Starting on `acme/calc`") && pickerGroups(p) == nil
	})
	final := se.waitFinal(t, ctx, m.TS, 1)
	prs, _, err := g.client(t, g.ada).PullRequests.List(ctx, "acme", "calc", &github.PullRequestListOptions{State: "open"})
	if err != nil {
		t.Fatal(err)
	}
	if len(prs) != 1 {
		t.Fatalf("open pull requests on acme/calc: %d, want 1; the final message: %q", len(prs), final.Text)
	}
	if !strings.HasPrefix(final.Text, "Fixed add in calc.sh") || !strings.Contains(final.Text, "Pull request: "+prs[0].GetHTMLURL()) {
		t.Errorf("final message: %q; want the summary and %s", final.Text, prs[0].GetHTMLURL())
	}
	ss := se.slackSessions(t, ctx)
	if len(ss) != 1 || len(ss[0].Repos) != 1 || ss[0].Repos[0].GitHub != "acme/calc" || ss[0].User != "usr-alice" || ss[0].Title != "fix the failing test please" {
		t.Fatalf("sessions: %+v", ss)
	}
}
