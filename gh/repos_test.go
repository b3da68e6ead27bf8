package gh

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sim/ghsim"
	"github.com/harvest-dev/harvest/sim/ghsim/ghschema"
)

// listRequests counts the stand-in's answers to GET path.
func (s *standIn) listRequests(path string) int {
	n := 0
	for _, r := range s.gs.Requests() {
		if r.Method == http.MethodGet && r.Path == "/api/v3"+path {
			n++
		}
	}
	return n
}

// TestInstalledRepos: the repositories of every installation of the app,
// sorted, across pages (GET /app/installations, GET
// /installation/repositories with a token of each installation); cached
// for reposTTL, forgotten with an installation's facts (an installation
// event), a suspended installation's left out; a token is no app; a
// primary-limit window is not waited for (a *RateLimitedError), and
// nothing is cached from it. Every exchange is as GitHub's description
// says.
func TestInstalledRepos(t *testing.T) {
	s := newStandIn(t)
	t.Cleanup(func() {
		for _, err := range ghschema.CheckExchanges(s.gs.Requests(), nil) {
			t.Error(err)
		}
	})
	ctx := context.Background()
	for i := range 105 { // more than a page of 100
		if _, err := s.gs.CreateRepo(ctx, ghsim.RepoSpec{Owner: "acme", Name: fmt.Sprintf("r%03d", i), Dir: t.TempDir()}); err != nil {
			t.Fatal(err)
		}
	}
	g := s.github(t)
	got, err := g.InstalledRepos(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Repos) != 108 || got.Cut || got.Repos[0] != "acme/app" || got.Repos[1] != "acme/lib" || got.Repos[2] != "acme/r000" || got.Repos[107] != "other/x" {
		t.Fatalf("installed repositories: %d (cut %v), first %v, last %v; want acme/app, acme/lib, acme/r000..r104, other/x",
			len(got.Repos), got.Cut, got.Repos[:min(3, len(got.Repos))], got.Repos[len(got.Repos)-1])
	}
	if n := s.listRequests("/installation/repositories"); n != 3 {
		t.Errorf("/installation/repositories asked %d times, want 3 (two pages of acme's, one of other's)", n)
	}
	// Cached: nothing asked again, until the TTL passes or an
	// installation event.
	if _, err := g.InstalledRepos(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.listRequests("/app/installations"); n != 1 {
		t.Errorf("/app/installations asked %d times, want once (cached)", n)
	}
	g.ForgetInstallation(s.inst["other"])
	if _, err := g.InstalledRepos(ctx); err != nil {
		t.Fatal(err)
	}
	if n := s.listRequests("/app/installations"); n != 2 {
		t.Errorf("/app/installations asked %d times after an installation event, want twice", n)
	}
	if err := s.gs.SuspendInstallation(ghsim.InstallationActionSpec{InstallationID: s.inst["other"]}); err != nil {
		t.Fatal(err)
	}
	s.advance(reposTTL + time.Second)
	got, err = g.InstalledRepos(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Repos) != 107 || slices.Contains(got.Repos, "other/x") {
		t.Errorf("with other's installation suspended: %d repositories (other/x listed: %v), want acme's 107",
			len(got.Repos), slices.Contains(got.Repos, "other/x"))
	}

	// A limit: told when to retry, at once; the next call asks again.
	s.advance(reposTTL + time.Second)
	if err := s.gs.SetRateLimit(ghsim.RateLimitSpec{LimitScope: ghsim.LimitScope{AppID: s.app.ID}, Remaining: 0, ResetIn: 60}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = g.InstalledRepos(cctx)
	var rl *RateLimitedError
	if !errors.As(err, &rl) || RetryAt(err).IsZero() {
		t.Errorf("inside a primary-limit window: %v, want a *RateLimitedError with when to retry", err)
	}
	g.mu.Lock()
	cached := g.repoList != nil
	g.mu.Unlock()
	if cached {
		t.Error("a failed listing is cached")
	}

	// A token is no app.
	tg, err := New(Config{APIURL: s.gs.URL() + "/api/v3/", WebURL: s.gs.URL() + "/", Token: "ghp_x", Now: s.clock})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tg.InstalledRepos(ctx); err == nil || !strings.Contains(err.Error(), "not an app") {
		t.Errorf("a token's installed repositories: %v, want an error saying it is no app", err)
	}
}
