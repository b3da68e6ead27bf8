package slackbot

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/gh"
	"github.com/harvest-dev/harvest/sim/ghsim"
	"github.com/harvest-dev/harvest/sim/ghsim/ghschema"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// TestSplit: a picker's 100 options are shared between its GitHub
// repositories and its directories: both whole when they fit, else the
// shorter list whole up to half and the longer the rest.
func TestSplit(t *testing.T) {
	for _, c := range []struct{ a, b, wa, wb int }{
		{10, 20, 10, 20}, {0, 121, 0, 100}, {121, 0, 100, 0}, {30, 80, 30, 70},
		{80, 30, 70, 30}, {80, 80, 50, 50}, {50, 50, 50, 50}, {100, 1, 99, 1},
	} {
		if a, b := split(c.a, c.b); a != c.wa || b != c.wb || a+b > MaxChoices {
			t.Errorf("split(%d, %d) = %d, %d; want %d, %d", c.a, c.b, a, b, c.wa, c.wb)
		}
	}
}

// TestGHChoices: with a GitHub App (the stand-in) installed on acme's
// 105 repositories, a person who may write to acme/r000, acme/r050 and
// acme/r104 is offered the first two: only the first 100 by name are
// checked, and the note says so. A person whose access GitHub will not
// tell now (a rate-limit window) is offered none, and told how many
// could not be checked.
func TestGHChoices(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	gs, err := ghsim.Start(ghsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, err := range ghschema.CheckExchanges(gs.Requests(), nil) {
			t.Error(err)
		}
		gs.Close()
	})
	app, err := gs.CreateApp(ghsim.AppSpec{Slug: "harvest", Name: "Harvest"})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := gs.CreateInstallation(ghsim.InstallationSpec{AppID: app.ID, Account: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	people := map[string]ghsim.User{}
	for _, login := range []string{"ada", "grace"} {
		if people[login], err = gs.AddUser(ghsim.UserSpec{Login: login}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 105 {
		if _, err := gs.CreateRepo(ctx, ghsim.RepoSpec{Owner: "acme", Name: fmt.Sprintf("r%03d", i), Dir: t.TempDir(), Private: true}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []string{"acme/r000", "acme/r050", "acme/r104"} {
		for _, login := range []string{"ada", "grace"} {
			if err := gs.SetPermission(ghsim.PermissionSpec{Repo: r, Login: login, Permission: "write"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	g, err := gh.New(gh.Config{APIURL: gs.URL() + "/api/v3/", WebURL: gs.URL() + "/", AppID: app.ID, PrivateKey: []byte(app.PrivateKeyPEM)})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for login, p := range people {
		if err := st.CreateUser(ctx, &store.User{ID: "usr-" + login, Name: login, Role: store.RoleMember}); err != nil {
			t.Fatal(err)
		}
		if err := st.AddIdentity(ctx, &store.Identity{User: "usr-" + login, Kind: store.IdentityGitHub, Subject: strconv.FormatInt(p.ID, 10), Login: login}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(ctx context.Context, repo, login string) (string, int64, error) {
		return g.Permission(ctx, repo, login)
	}
	b := &Bot{log: slog.New(slog.DiscardHandler), cfg: Config{GitHub: true,
		Access: authz.NewResolver(authz.Config{Store: st, GitHub: authz.NewGitHubPerms(check, 0, nil)}),
		Installed: func(ctx context.Context) ([]string, bool, error) {
			in, err := g.InstalledRepos(ctx)
			return in.Repos, in.Cut, err
		}}}

	names, note := b.ghChoices(ctx, &store.User{ID: "usr-ada", Role: store.RoleMember})
	if !slices.Equal(names, []string{"acme/r000", "acme/r050"}) || !strings.Contains(note, "Only the first 100 GitHub repositories") {
		t.Errorf("ada's choices: %v, note %q; want acme/r000 and acme/r050, and a note that only 100 were looked at", names, note)
	}
	if err := gs.SetRateLimit(ghsim.RateLimitSpec{LimitScope: ghsim.LimitScope{InstallationID: inst}, Remaining: 0, ResetIn: 600}); err != nil {
		t.Fatal(err)
	}
	names, note = b.ghChoices(ctx, &store.User{ID: "usr-grace", Role: store.RoleMember})
	if len(names) != 0 || !strings.Contains(note, "I couldn't check your access to 100 GitHub repositories") {
		t.Errorf("grace's choices in a rate-limit window: %v, note %q; want none and a note saying 100 could not be checked", names, note)
	}
}
