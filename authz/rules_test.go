package authz

import (
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/store"
)

// TestSession is the table of the rules (the package doc's): for each
// kind of subject, their own session and someone else's on repositories
// of each level.
func TestSession(t *testing.T) {
	admin := Subject{User: "usr-root", Token: "tok-root", Role: store.RoleAdmin, Admin: true}
	// An admin user with a member's token acts as a member.
	adminMemberToken := Subject{User: "usr-root", Token: "tok-x", Role: store.RoleAdmin}
	member := Subject{User: "usr-mem", Token: "tok-mem", Role: store.RoleMember}
	viewer := Subject{User: "usr-view", Token: "tok-view", Role: store.RoleViewer}

	w := Grant{Level: Write, Shared: true}
	r := Grant{Level: Read, Shared: true}
	n := Grant{Level: None, Shared: true}
	unshared := Grant{Level: Write, Shared: false}

	for _, c := range []struct {
		name   string
		sub    Subject
		own    bool
		grants []Grant
		want   Level
	}{
		{"admin, someone's, no repos", admin, false, nil, Write},
		{"admin, someone's, repo none", admin, false, []Grant{n}, Write},
		{"admin, unshared", admin, false, []Grant{unshared}, Write},

		{"member, own, no repos", member, true, nil, Write},
		{"member, own, repo none (lost access)", member, true, []Grant{n}, Write},
		{"member, someone's, no repos", member, false, nil, None},
		{"member, someone's, write", member, false, []Grant{w}, Write},
		{"member, someone's, read", member, false, []Grant{r}, Read},
		{"member, someone's, none", member, false, []Grant{n}, None},
		{"member, someone's, unshared", member, false, []Grant{unshared}, None},
		{"member, someone's, write and read", member, false, []Grant{w, r}, Read},
		{"member, someone's, write and none", member, false, []Grant{w, n}, None},
		{"member, someone's, write and unshared", member, false, []Grant{w, unshared}, None},
		{"admin user, member's token, someone's, read", adminMemberToken, false, []Grant{r}, Read},
		{"admin user, member's token, someone's, no repos", adminMemberToken, false, nil, None},

		{"viewer, own", viewer, true, nil, Read},
		{"viewer, someone's, write", viewer, false, []Grant{w}, Read},
		{"viewer, someone's, read", viewer, false, []Grant{r}, Read},
		{"viewer, someone's, none", viewer, false, []Grant{n}, None},
		{"viewer, someone's, unshared", viewer, false, []Grant{unshared}, None},

		{"no role (a node's token is an admin)", Subject{Token: "tok-n"}, false, []Grant{w}, None},
	} {
		if got := Session(c.sub, c.own, c.grants); got != c.want {
			t.Errorf("%s: Session = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestStart: a viewer never starts a session; a member needs write on
// every repository; an admin may always.
func TestStart(t *testing.T) {
	member := Subject{User: "usr-mem", Role: store.RoleMember}
	viewer := Subject{User: "usr-view", Role: store.RoleViewer}
	admin := Subject{User: "usr-root", Role: store.RoleAdmin, Admin: true}
	repos := []string{"acme/calc", "/srv/repos/x"}
	for _, c := range []struct {
		name   string
		sub    Subject
		grants []Grant
		want   string // "" allowed, else a part of the refusal
	}{
		{"member, write on both", member, []Grant{{Level: Write, Shared: true}, {Level: Write}}, ""},
		{"member, read on one", member, []Grant{{Level: Write, Shared: true}, {Level: Read, Shared: true, Why: "team qa reads it"}}, "/srv/repos/x: that needs write access to it (team qa reads it)"},
		{"member, none", member, []Grant{{Level: None, Shared: true, Why: "@ada has no access"}, {Level: Write}}, "acme/calc"},
		{"viewer, write on both", viewer, []Grant{{Level: Write, Shared: true}, {Level: Write}}, "viewers read sessions"},
		{"admin, none", admin, []Grant{{}, {}}, ""},
	} {
		err := Start(c.sub, repos, c.grants)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: Start = %v, want a refusal saying %q", c.name, err, c.want)
		}
	}
}

func TestOwns(t *testing.T) {
	sub := Subject{User: "usr-a", Token: "tok-a"}
	for _, c := range []struct {
		s    store.Session
		want bool
	}{
		{store.Session{User: "usr-a", Owner: "github"}, true},
		{store.Session{User: "usr-b", Owner: "tok-a"}, false}, // made with a token of a's, for b? the user decides
		{store.Session{Owner: "tok-a"}, true},                 // before users: the token's
		{store.Session{Owner: "tok-b"}, false},
	} {
		if got := sub.Owns(&c.s); got != c.want {
			t.Errorf("Owns(%+v) = %v, want %v", c.s, got, c.want)
		}
	}
	if (Subject{Token: "tok-n"}).Owns(&store.Session{User: ""}) {
		t.Error("a subject with no user owns a session with none")
	}
}
