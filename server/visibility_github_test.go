package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/gh"
	"github.com/harvest-dev/harvest/internal/stacktest/apitest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sim/ghsim"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// ghClock is the clock GitHub's stand-in, gh and the permission cache
// share.
type ghClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *ghClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *ghClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestWhoSeesWhatGitHub: sessions on a GitHub repository are seen by
// whoever GitHub lets read it, through the GitHub identity of their user:
// a collaborator with read reads (and may not send), one with no access
// and a user with no GitHub account see nothing; a collaborator whose
// access is removed on GitHub still reads inside the cache's lifetime and
// not after it (list, URL, stream); GitHub failing is a 503 that says
// what could not be checked, never a guess.
func TestWhoSeesWhatGitHub(t *testing.T) {
	const ttl = time.Minute
	clock := &ghClock{t: time.Now().Truncate(time.Second)}
	// The server first (its leak check runs last), asking GitHub through
	// check once the stand-in below exists.
	var check authz.GitHubCheck
	e := newAPIEnv(t, apitest.WithAccess(func(a *apitest.API) *authz.Resolver {
		return authz.NewResolver(authz.Config{Store: a.Store, GitHub: authz.NewGitHubPerms(func(ctx context.Context, repo, login string) (string, int64, error) {
			return check(ctx, repo, login)
		}, ttl, clock.Now), Recheck: 20 * time.Millisecond})
	}))
	ctx := testbin.Context(t)
	gs, err := ghsim.Start(ghsim.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gs.Close() })
	app, err := gs.CreateApp(ghsim.AppSpec{Slug: "harvest"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gs.CreateInstallation(ghsim.InstallationSpec{AppID: app.ID, Account: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := gs.CreateRepo(context.Background(), ghsim.RepoSpec{Owner: "acme", Name: "calc", Dir: t.TempDir(), Private: true}); err != nil {
		t.Fatal(err)
	}
	ghUsers := map[string]ghsim.User{}
	for _, u := range []struct {
		login string
		perm  ghsim.Permission
	}{{"ada", ghsim.PermWrite}, {"bob", ghsim.PermRead}, {"eve", ghsim.PermNone}} {
		if ghUsers[u.login], err = gs.AddUser(ghsim.UserSpec{Login: u.login}); err != nil {
			t.Fatal(err)
		}
		if err := gs.SetPermission(ghsim.PermissionSpec{Repo: "acme/calc", Login: u.login, Permission: u.perm}); err != nil {
			t.Fatal(err)
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	ghc, err := gh.New(gh.Config{APIURL: gs.URL() + "/api/v3/", WebURL: gs.URL() + "/", AppID: app.ID, PrivateKey: []byte(app.PrivateKeyPEM), Now: clock.Now,
		HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	check = func(ctx context.Context, repo, login string) (string, int64, error) {
		p, id, err := ghc.Permission(ctx, repo, login)
		if err != nil && gh.Permanent(err) {
			err = fmt.Errorf("%w: %w", authz.ErrDenied, err)
		}
		return p, id, err
	}

	// alice is ada on GitHub (and started the session), bob is bob, eve
	// is eve; carol has no GitHub account.
	alice := &person{name: "alice", secret: e.Alice, token: e.AliceID, user: store.UserIDForToken(e.AliceID), c: e.AliceC}
	bob := &person{name: "bob", secret: e.Bob, token: e.BobID, user: store.UserIDForToken(e.BobID), c: e.BobC}
	eve := newPerson(t, e, "eve", store.RoleMember)
	carol := newPerson(t, e, "carol", store.RoleMember)
	for _, p := range []struct {
		who   *person
		login string
	}{{alice, "ada"}, {bob, "bob"}, {eve, "eve"}} {
		if err := e.Store.AddIdentity(ctx, &store.Identity{User: p.who.user, Kind: store.IdentityGitHub, Subject: fmt.Sprint(ghUsers[p.login].ID), Login: p.login}); err != nil {
			t.Fatal(err)
		}
	}
	// A session GitHub started for ada, suspended (a store row: what is
	// seen does not depend on its box).
	at := time.Now().UTC()
	const id = "s-githubcalcsessio"
	if err := e.Store.CreateSession(ctx, &store.Session{ID: id, Owner: "github", User: alice.user, State: store.StateSuspended, Backend: "local",
		Repos: []store.Repo{{Name: "calc", Source: "acme/calc", GitHub: "acme/calc"}}, CreatedAt: at, UpdatedAt: at}, nil); err != nil {
		t.Fatal(err)
	}
	path := "/v1/sessions/" + id
	status := func(p *person, method, u string) (int, string, http.Header) {
		t.Helper()
		s, info, h := e.doRaw(method, u, p.bearer(), "", nil)
		return s, info.Message, h
	}
	sees := func(p *person) bool {
		t.Helper()
		return slices.Contains(listIDs(t, p, ""), id)
	}

	for _, c := range []struct {
		who  *person
		want bool
	}{{alice, true}, {bob, true}, {eve, false}, {carol, false}} {
		if got := sees(c.who); got != c.want {
			t.Errorf("%s lists the session: %v, want %v", c.who.name, got, c.want)
		}
		s, msg, _ := status(c.who, "GET", path)
		if (s == 200) != c.want || (!c.want && s != 404) {
			t.Errorf("%s: GET %s = %d %s", c.who.name, path, s, msg)
		}
	}

	// The repository's memory follows the same levels, sessions of one's
	// own there or not: bob (read) reads it but may not change it, eve
	// (none) may not read it, alice (write) changes it.
	mem := client.MemoryScope{Repo: "acme/calc"}
	if _, err := alice.c.PutMemoryEntity(ctx, mem, "tests", wire.MemoryEntityRequest{Type: "procedure", Observations: []string{"run make test"}}); err != nil {
		t.Errorf("alice (write) edits the memory of acme/calc: %v", err)
	}
	if g, err := bob.c.ListMemory(ctx, mem, ""); err != nil || len(g.Entities) != 1 {
		t.Errorf("bob (read) reads the memory of acme/calc: %+v, %v; want alice's entry", g, err)
	}
	var ce *client.Error
	if _, err := bob.c.PutMemoryEntity(ctx, mem, "tests", wire.MemoryEntityRequest{Type: "procedure", Observations: []string{"skip the tests"}}); !errors.As(err, &ce) || ce.Status != http.StatusForbidden || !strings.Contains(ce.Message, "may not change its memory") {
		t.Errorf("bob (read) edits the memory of acme/calc: %v; want 403", err)
	}
	if _, err := eve.c.ListMemory(ctx, mem, ""); !errors.As(err, &ce) || ce.Status != http.StatusForbidden || !strings.Contains(ce.Message, "may not read its memory") {
		t.Errorf("eve (no access) reads the memory of acme/calc: %v; want 403", err)
	}
	// Each is told what they may do, so a page shows only those controls.
	for _, c := range []struct {
		who  *person
		want string
	}{{alice, "write"}, {bob, "read"}} {
		if v, err := c.who.c.GetSession(ctx, id); err != nil || v.Access != c.want {
			t.Errorf("%s: GET %s says access %q (%v), want %q", c.who.name, path, v.Access, err, c.want)
		}
	}
	if s, _, _ := status(eve, "GET", path+"/events"); s != 404 {
		t.Errorf("eve's event stream: %d, want 404", s)
	}
	e.openRaw(bob.secret, id, nil, "").close()
	if s, msg, _ := status(bob, "POST", path+"/cancel"); s != 403 || !strings.Contains(msg, "@bob has read access to acme/calc on GitHub") {
		t.Errorf("bob cancels: %d %s; want a 403 saying GitHub gives him read", s, msg)
	}
	asked := 0
	for _, r := range gs.Requests() {
		if strings.HasSuffix(r.Path, "/permission") {
			asked++
		}
	}
	if asked != 3 {
		t.Errorf("GitHub was asked %d times for ada's (her memory edit), bob's and eve's permissions, want 3 (answers cached)", asked)
	}

	// bob's access is removed on GitHub: inside the cache's lifetime he
	// still reads; once it ran out, he does not, anywhere, and the stream
	// he had open ends as if the session were gone.
	stream := e.openRaw(bob.secret, id, nil, "")
	if err := gs.SetPermission(ghsim.PermissionSpec{Repo: "acme/calc", Login: "bob", Permission: ghsim.PermNone}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(ttl - time.Second)
	if !sees(bob) {
		t.Error("bob's access was dropped before the cache's lifetime ran out")
	}
	clock.Advance(time.Second)
	for {
		ev, err := stream.next()
		if err != nil {
			t.Fatalf("bob's open stream ended without a stream.error: %v", err)
		}
		if ev.typ == "stream.error" {
			if !strings.Contains(ev.data, `"code":"deleted"`) || !strings.Contains(ev.data, "not found") {
				t.Errorf("bob's open stream ended with %s; want deleted, saying not found", ev.data)
			}
			break
		}
	}
	if sees(bob) {
		t.Error("bob lists the session after his access was removed and the cache's lifetime ran out")
	}
	for _, p := range []string{path, path + "/events", path + "/log"} {
		if s, _, _ := status(bob, "GET", p); s != 404 {
			t.Errorf("bob, removed: GET %s = %d, want 404", p, s)
		}
	}
	// The owner sees their own session without asking GitHub.
	if s, _, _ := status(alice, "GET", path); s != 200 {
		t.Errorf("alice gets her own session: %d", s)
	}

	// GitHub failing: 503 with Retry-After, naming what could not be
	// checked; never the session.
	clock.Advance(2 * ttl)
	if err := gs.SetPermission(ghsim.PermissionSpec{Repo: "acme/calc", Login: "bob", Permission: ghsim.PermRead}); err != nil {
		t.Fatal(err)
	}
	if err := gs.AddFault(ghsim.FaultSpec{Method: "GET", Path: "/repos/acme/calc/collaborators/bob/permission", Status: 502, Count: 1}); err != nil {
		t.Fatal(err)
	}
	s, msg, h := status(bob, "GET", path)
	if s != 503 || h.Get("Retry-After") == "" || !strings.Contains(msg, "@bob") || !strings.Contains(msg, "acme/calc") {
		t.Errorf("GitHub failing: %d %s (Retry-After %q); want a 503 naming @bob and acme/calc", s, msg, h.Get("Retry-After"))
	}
	if s, _, _ := status(bob, "GET", "/v1/sessions"); s != 503 {
		t.Errorf("GitHub failing, bob lists: %d, want 503", s)
	}
	// Once GitHub answers again (after gh's pause), bob reads again.
	clock.Advance(2 * time.Minute)
	if !sees(bob) {
		t.Error("bob, given read again, does not see the session once GitHub answers")
	}
}
