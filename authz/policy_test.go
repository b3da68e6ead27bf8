package authz

import (
	"slices"
	"strings"
	"testing"
)

// TestParseRoot: a root with and without a policy; every mistake refused
// with a message that says what was wrong.
func TestParseRoot(t *testing.T) {
	for _, c := range []struct {
		spec  string
		path  string
		read  []string
		write []string
		err   string // part of the error; "" none
	}{
		{spec: "/srv/repos", path: "/srv/repos"},
		{spec: "/srv/repos?read=role:viewer&write=team:backend,user:usr-3f2a", path: "/srv/repos",
			read: []string{"role:viewer"}, write: []string{"team:backend", "user:usr-3f2a"}},
		{spec: "/srv/oss?read=everyone&write=role:member&write=team:qa", path: "/srv/oss",
			read: []string{"role:viewer"}, write: []string{"role:member", "team:qa"}},
		{spec: "/srv/x?read=team:qa,team:qa", path: "/srv/x", read: []string{"team:qa"}},
		{spec: "?read=everyone", err: "give the directory before the ?"},
		{spec: "/srv/x?", err: "a ? with no policy"},
		{spec: "/srv/x?admin=role:admin", err: `unknown key "admin"`},
		{spec: "/srv/x?read=role:root", err: "a role is viewer, member or admin"},
		{spec: "/srv/x?read=team:Backend", err: "team name"},
		{spec: "/srv/x?read=group:a", err: `unknown kind "group"`},
		{spec: "/srv/x?read=alice", err: "give role:viewer|member|admin"},
		{spec: "/srv/x?read=", err: "give role:viewer|member|admin"},
		{spec: "/srv/x?write=user:alice", err: "named by their id"},
		{spec: "/srv/x?read=%zz", err: "not key=value pairs"},
	} {
		r, err := ParseRoot(c.spec)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseRoot(%q) = %+v, %v; want an error saying %q", c.spec, r, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseRoot(%q): %v", c.spec, err)
			continue
		}
		if r.Path != c.path {
			t.Errorf("ParseRoot(%q).Path = %q, want %q", c.spec, r.Path, c.path)
		}
		if (r.Rules == nil) != (c.read == nil && c.write == nil) {
			t.Errorf("ParseRoot(%q).Rules = %+v", c.spec, r.Rules)
			continue
		}
		if r.Rules == nil {
			continue
		}
		names := func(ps []Principal) []string {
			var out []string
			for _, p := range ps {
				out = append(out, p.String())
			}
			slices.Sort(out)
			return out
		}
		if got := names(r.Rules.Read); !slices.Equal(got, c.read) {
			t.Errorf("ParseRoot(%q) read = %v, want %v", c.spec, got, c.read)
		}
		if got := names(r.Rules.Write); !slices.Equal(got, c.write) {
			t.Errorf("ParseRoot(%q) write = %v, want %v", c.spec, got, c.write)
		}
	}
}
