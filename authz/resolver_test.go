package authz_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/sim/ghsim"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// TestResolver: the rules over real repositories — directories under
// roots with and without a policy (teams from the store, a symlink into
// another root, a nested root), GitHub repositories through the stand-in
// — for people of each role.
func TestResolver(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "h.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w := newGHWorld(t)

	base := t.TempDir()
	mk := func(p string) string {
		d := filepath.Join(base, p)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	shared, private, inner := mk("shared/app"), mk("private/x"), mk("shared/secret/y")
	// A symlink in the private root leading into shared/secret: the
	// policy of where it leads counts.
	link := filepath.Join(base, "private", "to-secret")
	if err := os.Symlink(filepath.Join(base, "shared", "secret", "y"), link); err != nil {
		t.Fatal(err)
	}
	var roots []authz.Root
	for _, spec := range []string{
		filepath.Join(base, "shared") + "?read=role:viewer&write=team:backend",
		filepath.Join(base, "private"),
		filepath.Join(base, "shared", "secret") + "?read=team:ops&write=team:ops",
	} {
		r, err := authz.ParseRoot(spec)
		if err != nil {
			t.Fatal(err)
		}
		roots = append(roots, r)
	}
	pol, err := authz.NewPolicy(roots)
	if err != nil {
		t.Fatal(err)
	}

	users := map[string]store.Role{"usr-ann": store.RoleMember, "usr-bea": store.RoleMember, "usr-cy": store.RoleViewer, "usr-ops": store.RoleMember}
	for id, role := range users {
		if err := st.CreateUser(ctx, &store.User{ID: id, Name: id, Role: role}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tm := range [][2]string{{"backend", "usr-ann"}, {"backend", "usr-cy"}, {"ops", "usr-ops"}} {
		if err := st.CreateTeam(ctx, &store.Team{Name: tm[0]}); err != nil && !errors.Is(err, store.ErrConflict) {
			t.Fatal(err)
		}
		if err := st.AddTeamMember(ctx, tm[0], tm[1]); err != nil {
			t.Fatal(err)
		}
	}
	// ann is GitHub's ada (write on acme/calc), cy is bob (read).
	for user, login := range map[string]string{"usr-ann": "ada", "usr-cy": "bob"} {
		if err := st.AddIdentity(ctx, &store.Identity{User: user, Kind: store.IdentityGitHub, Subject: w.subject(login), Login: login}); err != nil {
			t.Fatal(err)
		}
	}
	res := authz.NewResolver(authz.Config{Store: st, Policy: pol, GitHub: authz.NewGitHubPerms(w.check, time.Minute, w.clock.Now)})
	if !res.Shared() {
		t.Fatal("Shared() is false with a GitHub and a policy")
	}

	dir := func(d string) store.Repo { return store.Repo{Source: d, Origin: d} }
	calc := store.Repo{GitHub: "acme/calc"}
	session := func(user string, repos ...store.Repo) *store.Session {
		return &store.Session{ID: "s-x", Owner: "tok-" + user, User: user, Repos: repos}
	}
	sub := func(user string) authz.Subject {
		return authz.Subject{User: user, Token: "tok-" + user, Role: users[user]}
	}
	for _, c := range []struct {
		name string
		who  string
		s    *store.Session
		want authz.Level
	}{
		{"own, private root", "usr-bea", session("usr-bea", dir(private)), authz.Write},
		{"someone's, private root", "usr-ann", session("usr-bea", dir(private)), authz.None},
		{"someone's, shared, team backend writes", "usr-ann", session("usr-bea", dir(shared)), authz.Write},
		{"someone's, shared, a member reads (role:viewer)", "usr-bea", session("usr-ann", dir(shared)), authz.Read},
		{"someone's, shared, a viewer in backend reads", "usr-cy", session("usr-ann", dir(shared)), authz.Read},
		{"someone's, nested root, not in ops", "usr-ann", session("usr-ops", dir(inner)), authz.None},
		{"someone's, nested root, in ops", "usr-ops", session("usr-ann", dir(inner)), authz.Write},
		{"someone's, symlink into the nested root, in ops", "usr-ops", session("usr-ann", store.Repo{Source: link}), authz.Write},
		{"someone's, git URL", "usr-ann", session("usr-bea", store.Repo{Source: "https://git.example.com/x.git", Origin: "https://git.example.com/x.git"}), authz.None},
		{"someone's, GitHub, write", "usr-ann", session("usr-bea", calc), authz.Write},
		{"someone's, GitHub, viewer with read", "usr-cy", session("usr-ann", calc), authz.Read},
		{"someone's, GitHub, no identity", "usr-bea", session("usr-ann", calc), authz.None},
		{"someone's, GitHub and shared dir: the lower", "usr-cy", session("usr-bea", calc, dir(shared)), authz.Read},
		{"someone's, GitHub and private dir", "usr-ann", session("usr-bea", calc, dir(private)), authz.None},
	} {
		got, err := res.For(sub(c.who)).Session(ctx, c.s)
		if err != nil || got != c.want {
			t.Errorf("%s: %v, %v; want %v", c.name, got, err, c.want)
		}
	}

	for _, c := range []struct {
		name string
		who  string
		refs []authz.RepoRef
		want string
	}{
		{"member, private root", "usr-bea", []authz.RepoRef{{Dir: private, Name: private}}, ""},
		{"member, shared root, in backend", "usr-ann", []authz.RepoRef{{Dir: shared, Name: shared}}, ""},
		{"member, shared root, not in backend", "usr-bea", []authz.RepoRef{{Dir: shared, Name: shared}}, "role:viewer"},
		{"member, GitHub write", "usr-ann", []authz.RepoRef{{GitHub: "acme/calc", Name: "acme/calc"}}, ""},
		{"member, GitHub without identity", "usr-bea", []authz.RepoRef{{GitHub: "acme/calc", Name: "acme/calc"}}, "sign in with GitHub"},
		{"viewer, private root", "usr-cy", []authz.RepoRef{{Dir: private, Name: private}}, "viewers read"},
	} {
		refusal, err := res.For(sub(c.who)).Start(ctx, c.refs)
		switch {
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want == "" && refusal != nil:
			t.Errorf("%s: refused: %v", c.name, refusal)
		case c.want != "" && (refusal == nil || !strings.Contains(refusal.Error(), c.want)):
			t.Errorf("%s: %v, want a refusal saying %q", c.name, refusal, c.want)
		}
	}

	// GitHub down: a GitHub repository's level is ErrUnavailable (after
	// the cache ran out), a directory's still known.
	w.clock.Advance(2 * time.Minute)
	if err := w.gs.AddFault(ghsim.FaultSpec{Path: "/repos/acme/calc/collaborators/ada/permission", Status: 503, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := res.For(sub("usr-ann")).Session(ctx, session("usr-bea", calc)); !errors.Is(err, authz.ErrUnavailable) {
		t.Errorf("GitHub down: %v, want ErrUnavailable", err)
	}
	if l, err := res.For(sub("usr-ann")).Session(ctx, session("usr-bea", dir(shared))); err != nil || l != authz.Write {
		t.Errorf("GitHub down, a directory: %v, %v", l, err)
	}
}
