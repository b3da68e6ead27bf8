package authz_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/gh"
	"github.com/harvest-dev/harvest/sim/ghsim"
)

// clock is a settable clock GitHub's stand-in, the gh client and the
// cache share.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// ghWorld is GitHub's stand-in with the app installed on acme, a private
// acme/calc, and ada (write), bob (read) and eve (no access); and Harvest's
// client of it.
type ghWorld struct {
	gs    *ghsim.Server
	gh    *gh.GitHub
	clock *clock
	users map[string]ghsim.User
	inst  int64
}

func newGHWorld(t *testing.T) *ghWorld {
	t.Helper()
	w := &ghWorld{clock: &clock{t: time.Now().Truncate(time.Second)}, users: map[string]ghsim.User{}}
	gs, err := ghsim.Start(ghsim.Options{Now: w.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gs.Close() })
	w.gs = gs
	app, err := gs.CreateApp(ghsim.AppSpec{Slug: "harvest"})
	if err != nil {
		t.Fatal(err)
	}
	if w.inst, err = gs.CreateInstallation(ghsim.InstallationSpec{AppID: app.ID, Account: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := gs.CreateRepo(context.Background(), ghsim.RepoSpec{Owner: "acme", Name: "calc", Dir: t.TempDir(), Private: true}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []struct {
		login string
		perm  ghsim.Permission
	}{{"ada", ghsim.PermWrite}, {"bob", ghsim.PermRead}, {"eve", ghsim.PermNone}} {
		if w.users[u.login], err = gs.AddUser(ghsim.UserSpec{Login: u.login}); err != nil {
			t.Fatal(err)
		}
		w.set(t, u.login, u.perm)
	}
	if w.gh, err = gh.New(gh.Config{APIURL: gs.URL() + "/api/v3/", WebURL: gs.URL() + "/", AppID: app.ID,
		PrivateKey: []byte(app.PrivateKeyPEM), Now: w.clock.Now}); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *ghWorld) set(t *testing.T, login string, p ghsim.Permission) {
	t.Helper()
	if err := w.gs.SetPermission(ghsim.PermissionSpec{Repo: "acme/calc", Login: login, Permission: p}); err != nil {
		t.Fatal(err)
	}
}

// check is the GitHubCheck harvest serve wires (internal/cli): gh's
// Permission, with GitHub's permanent refusals as ErrDenied.
func (w *ghWorld) check(ctx context.Context, repo, login string) (string, int64, error) {
	p, id, err := w.gh.Permission(ctx, repo, login)
	if err != nil && gh.Permanent(err) {
		err = fmt.Errorf("%w: %w", authz.ErrDenied, err)
	}
	return p, id, err
}

// permissionRequests counts the stand-in's answers to the permission API.
func (w *ghWorld) permissionRequests() int {
	n := 0
	for _, r := range w.gs.Requests() {
		if strings.HasSuffix(r.Path, "/permission") {
			n++
		}
	}
	return n
}

func (w *ghWorld) subject(login string) string { return fmt.Sprint(w.users[login].ID) }

// TestGitHubPerms: GitHub's answer for each person, cached for the TTL
// (one request per person and repository), asked again after it: a
// removed collaborator is none within the TTL, not before it is asked
// again; an answer for another account of the same login is none.
func TestGitHubPerms(t *testing.T) {
	w := newGHWorld(t)
	ctx := context.Background()
	p := authz.NewGitHubPerms(w.check, time.Minute, w.clock.Now)
	for _, c := range []struct {
		login string
		want  authz.Level
	}{{"ada", authz.Write}, {"bob", authz.Read}, {"eve", authz.None}} {
		l, why, err := p.Level(ctx, "acme/calc", w.subject(c.login), c.login)
		if err != nil || l != c.want || !strings.Contains(why, "@"+c.login) {
			t.Errorf("%s: Level = %v (%s), %v; want %v", c.login, l, why, err, c.want)
		}
	}
	// Not on GitHub at all: GitHub's 404, none.
	if l, _, err := p.Level(ctx, "acme/calc", "999999", "nobody"); err != nil || l != authz.None {
		t.Errorf("an unknown login: %v, %v; want none", l, err)
	}
	asked := w.permissionRequests()
	if asked != 4 {
		t.Fatalf("%d permission requests for 4 people, want 4", asked)
	}

	// bob loses his access: still read from the cache inside the TTL...
	w.set(t, "bob", ghsim.PermNone)
	w.clock.Advance(59 * time.Second)
	if l, _, err := p.Level(ctx, "acme/calc", w.subject("bob"), "bob"); err != nil || l != authz.Read {
		t.Errorf("bob inside the TTL: %v, %v; want the cached read", l, err)
	}
	if n := w.permissionRequests(); n != asked {
		t.Errorf("a cached answer asked GitHub again (%d requests, want %d)", n, asked)
	}
	// ...and none once it ran out.
	w.clock.Advance(time.Second)
	if l, why, err := p.Level(ctx, "ACME/calc", w.subject("bob"), "bob"); err != nil || l != authz.None || !strings.Contains(why, "no access") {
		t.Errorf("bob after the TTL: %v (%s), %v; want none", l, why, err)
	}

	// The identity's id is not the account GitHub answers for (the login
	// was renamed and taken): none, though the login has write.
	if l, why, err := p.Level(ctx, "acme/calc", "12345", "ada"); err != nil || l != authz.None || !strings.Contains(why, "no longer the account") {
		t.Errorf("another account's login: %v (%s), %v; want none", l, why, err)
	}
}

// TestGitHubPermsFailClosed: GitHub failing (5xx, a secondary rate limit)
// is ErrUnavailable, never a level, even with an expired answer in the
// cache; an answer after the failure is used again.
func TestGitHubPermsFailClosed(t *testing.T) {
	w := newGHWorld(t)
	ctx := context.Background()
	p := authz.NewGitHubPerms(w.check, time.Minute, w.clock.Now)
	if l, _, err := p.Level(ctx, "acme/calc", w.subject("ada"), "ada"); err != nil || l != authz.Write {
		t.Fatalf("ada: %v, %v", l, err)
	}
	w.clock.Advance(2 * time.Minute)
	if err := w.gs.AddFault(ghsim.FaultSpec{Method: "GET", Path: "/repos/acme/calc/collaborators/ada/permission", Status: 502, Count: 1}); err != nil {
		t.Fatal(err)
	}
	l, _, err := p.Level(ctx, "acme/calc", w.subject("ada"), "ada")
	if !errors.Is(err, authz.ErrUnavailable) || l != authz.None || !strings.Contains(err.Error(), "@ada") {
		t.Fatalf("GitHub answering 502: %v, %v; want ErrUnavailable naming @ada", l, err)
	}
	// gh keeps off GitHub for a pause after a 5xx: wait it out on the
	// shared clock, then GitHub answers again.
	w.clock.Advance(2 * time.Minute)
	if l, _, err := p.Level(ctx, "acme/calc", w.subject("ada"), "ada"); err != nil || l != authz.Write {
		t.Fatalf("after the fault: %v, %v; want write", l, err)
	}

	// A secondary rate limit on the installation: refused, not guessed.
	w.clock.Advance(2 * time.Minute)
	if err := w.gs.SetSecondaryLimit(ghsim.SecondaryLimitSpec{LimitScope: ghsim.LimitScope{InstallationID: w.inst}, For: 60}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Level(ctx, "acme/calc", w.subject("ada"), "ada"); !errors.Is(err, authz.ErrUnavailable) {
		t.Fatalf("inside a secondary limit: %v, want ErrUnavailable", err)
	}
}
