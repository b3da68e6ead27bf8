package server_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/stacktest/apitest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// person is a user of the test with a token.
type person struct {
	name, secret, token, user string
	c                         *client.Client
}

// newPerson makes a token (and so a user) named name, with role.
func newPerson(t *testing.T, e *apiEnv, name string, role store.Role) *person {
	t.Helper()
	secret, id := e.Token(name, false)
	p := &person{name: name, secret: secret, token: id, user: store.UserIDForToken(id), c: e.Client(secret)}
	if role != store.RoleMember {
		if _, err := e.Store.UpdateUser(context.Background(), p.user, func(u *store.User) error { u.Role = role; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func (p *person) bearer() string { return "Bearer " + p.secret }

// listIDs is what p lists with query (default scope: visible).
func listIDs(t *testing.T, p *person, scope string) []string {
	t.Helper()
	l, err := p.c.ListSessionsPage(testbin.Context(t), client.ListOptions{Scope: scope})
	if err != nil {
		t.Fatalf("%s lists: %v", p.name, err)
	}
	var ids []string
	for _, s := range l.Sessions {
		ids = append(ids, s.ID)
	}
	return ids
}

// TestWhoSeesWhat: a root whose policy lets team readers read and team
// writers write. The owner (alice, a writer), a reader (bob), a stranger
// (carol, in no team) and a viewer (vera, named a writer): the stranger
// is refused everywhere with the 404 of a session that does not exist
// (list, direct URL, log, lock, event stream, diff, shell, send, cancel,
// stop, delete); the reader reads (list, URL, stream, diff) and is
// refused the rest with a 403 that says why; the viewer reads and never
// sends, cancels or starts; a team change takes effect on the next
// request; every refusal is in the audit log.
func TestWhoSeesWhat(t *testing.T) {
	e := newAPIEnv(t, apitest.WithAccess(func(a *apitest.API) *authz.Resolver {
		root, err := authz.ParseRoot(a.RepoRoot + "?read=team:readers&write=team:writers")
		if err != nil {
			t.Fatal(err)
		}
		pol, err := authz.NewPolicy([]authz.Root{root})
		if err != nil {
			t.Fatal(err)
		}
		return authz.NewResolver(authz.Config{Store: a.Store, Policy: pol})
	}))
	ctx := testbin.Context(t)
	alice := &person{name: "alice", secret: e.Alice, token: e.AliceID, user: store.UserIDForToken(e.AliceID), c: e.AliceC}
	bob := &person{name: "bob", secret: e.Bob, token: e.BobID, user: store.UserIDForToken(e.BobID), c: e.BobC}
	carol := newPerson(t, e, "carol", store.RoleMember)
	vera := newPerson(t, e, "vera", store.RoleViewer)
	for _, m := range [][2]string{{"writers", alice.user}, {"readers", bob.user}, {"writers", vera.user}} {
		if err := e.Store.CreateTeam(ctx, &store.Team{Name: m[0]}); err != nil && !strings.Contains(err.Error(), "exists") {
			t.Fatal(err)
		}
		if err := e.Store.AddTeamMember(ctx, m[0], m[1]); err != nil {
			t.Fatal(err)
		}
	}

	v := e.create(alice.c, "msg hi")
	st := alice.c.Events(ctx, v.ID, client.StreamOptions{})
	defer st.Close()
	stacktest.ReadUntil(t, st, "idle", stacktest.IsState(store.StateIdle))
	path := "/v1/sessions/" + v.ID

	// The 404 a stranger gets is the one of a session that does not exist.
	const ghost = "s-zzzzzzzzzzzzzzzz"
	_, none, _ := e.doRaw(http.MethodGet, "/v1/sessions/"+ghost, alice.bearer(), "", nil)
	notFound := func(who *person, method, p string) {
		t.Helper()
		status, info, _ := e.doRaw(method, p, who.bearer(), "", nil)
		if status != http.StatusNotFound || info.Code != none.Code || strings.ReplaceAll(info.Message, v.ID, ghost) != none.Message {
			t.Errorf("%s: %s %s = %d %+v; want the 404 of a missing session (%+v)", who.name, method, p, status, info, none)
		}
	}
	forbidden := func(who *person, method, p, why string) {
		t.Helper()
		status, info, _ := e.doRaw(method, p, who.bearer(), "", nil)
		if status != http.StatusForbidden || !strings.Contains(info.Message, why) {
			t.Errorf("%s: %s %s = %d %+v; want a 403 saying %q", who.name, method, p, status, info, why)
		}
	}

	// List.
	for _, c := range []struct {
		who   *person
		scope string
		sees  bool
	}{{alice, "", true}, {alice, "mine", true}, {bob, "", true}, {bob, "visible", true}, {bob, "mine", false}, {vera, "", true}, {carol, "", false}, {carol, "mine", false}} {
		if got := slices.Contains(listIDs(t, c.who, c.scope), v.ID); got != c.sees {
			t.Errorf("%s lists (scope %q): sees the session %v, want %v", c.who.name, c.scope, got, c.sees)
		}
	}
	if status, info, _ := e.doRaw(http.MethodGet, "/v1/sessions?scope=all", bob.bearer(), "", nil); status != 400 || !strings.Contains(info.Message, "mine") {
		t.Errorf("scope=all: %d %+v, want a 400 naming the scopes", status, info)
	}

	// The stranger: nothing, anywhere.
	for _, r := range [][2]string{
		{"GET", path}, {"GET", path + "/log"}, {"GET", path + "/lock"}, {"GET", path + "/events"}, {"GET", path + "/diff"},
		{"GET", path + "/shell"}, {"POST", path + "/cancel"}, {"POST", path + "/stop"}, {"DELETE", path},
	} {
		notFound(carol, r[0], r[1])
	}
	if status, info, _ := e.doRaw(http.MethodPost, path+"/messages", carol.bearer(), "application/json", []byte(`{"text":"hi"}`)); status != 404 || info.Message != strings.ReplaceAll(none.Message, ghost, v.ID) {
		t.Errorf("carol sends: %d %+v, want the 404", status, info)
	}

	// The reader and the viewer read: the session, its stream, its diff.
	for _, p := range []*person{bob, vera} {
		if got, err := p.c.GetSession(ctx, v.ID); err != nil || got.ID != v.ID {
			t.Errorf("%s gets the session: %v", p.name, err)
		}
		rs := e.openRaw(p.secret, v.ID, nil, "")
		if ev, err := rs.next(); err != nil || ev.id != "1" {
			t.Errorf("%s's event stream: %+v, %v; want the first event", p.name, ev, err)
		}
		rs.close()
		if ch, err := p.c.Changes(ctx, v.ID); err != nil || len(ch.Repos) != 1 {
			t.Errorf("%s reads the diff: %+v, %v", p.name, ch, err)
		}
		// A reader's view hides the host's paths, as for any user.
		if got, _ := p.c.GetSession(ctx, v.ID); got != nil && got.Repos[0].Path != "" {
			t.Errorf("%s sees the workspace's host path %s", p.name, got.Repos[0].Path)
		}
	}
	// ...and act on nothing.
	for _, r := range [][2]string{{"GET", path + "/shell"}, {"POST", path + "/cancel"}, {"POST", path + "/stop"}, {"DELETE", path}} {
		forbidden(bob, r[0], r[1], "needs write access")
		forbidden(vera, r[0], r[1], "viewers read")
	}
	if _, err := vera.c.Send(ctx, v.ID, "hi", ""); err == nil || !strings.Contains(err.Error(), "viewers read") {
		t.Errorf("vera sends: %v, want a 403 saying viewers read", err)
	}
	if _, err := bob.c.Send(ctx, v.ID, "hi", ""); err == nil || !strings.Contains(err.Error(), "does not name you") && !strings.Contains(err.Error(), "for read") {
		t.Errorf("bob sends: %v, want a 403 saying why", err)
	}

	// Starting sessions: the viewer never; carol, who may not write the
	// root, neither; alice may.
	for _, c := range []struct {
		who *person
		why string
	}{{vera, "viewers read"}, {carol, "does not name you"}} {
		_, err := c.who.c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: e.Repo}}})
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != http.StatusForbidden || !strings.Contains(ce.Message, c.why) {
			t.Errorf("%s starts a session: %v, want a 403 saying %q", c.who.name, err, c.why)
		}
	}
	if _, err := alice.c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: e.Repo}}}); err != nil {
		t.Errorf("alice, a writer, starts a session: %v", err)
	}

	// bob joins the writers: his next request may send.
	if err := e.Store.AddTeamMember(ctx, "writers", bob.user); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.c.Send(ctx, v.ID, "msg again", ""); err != nil {
		t.Errorf("bob, a writer now, sends: %v", err)
	}
	stacktest.ReadUntil(t, st, "the second turn", stacktest.IsState(store.StateWorking))
	stacktest.ReadUntil(t, st, "idle again", stacktest.IsState(store.StateIdle))

	// The audit log has the refusals: the stranger's reads as
	// session.read not_found, the viewer's send as session.send forbidden.
	es, err := e.Store.ListAudit(ctx, store.AuditFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	count := func(user, action, result string) int {
		n := 0
		for _, a := range es {
			if a.User == user && a.Action == action && a.Result == result && a.Target == v.ID {
				n++
			}
		}
		return n
	}
	if n := count(carol.user, "session.read", "not_found"); n != 5 {
		t.Errorf("%d session.read refusals of carol in the audit log, want 5 (get, log, lock, events, diff)", n)
	}
	for _, a := range []string{"session.shell", "session.cancel", "session.stop", "session.delete", "session.send"} {
		if n := count(vera.user, a, "forbidden"); n != 1 {
			t.Errorf("%d %s refusals of vera in the audit log, want 1", n, a)
		}
		if n := count(carol.user, a, "not_found"); n != 1 {
			t.Errorf("%d %s refusals of carol in the audit log, want 1", n, a)
		}
	}
	if n := count(bob.user, "session.send", store.AuditOK); n != 1 {
		t.Errorf("bob's send once he writes: %d entries, want 1", n)
	}
}
