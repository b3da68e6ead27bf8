package authz

import (
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	"github.com/harvest-dev/harvest/store"
)

// # Directory repositories: a root's policy
//
// A --repo-root (harvest serve; repo-root: in the config file) may say who
// reads and who writes the sessions on its repositories, after a "?", as
// a URL's query:
//
//	--repo-root /srv/repos                                  unshared (as before)
//	--repo-root '/srv/repos?read=role:viewer&write=team:backend,user:usr-3f2a'
//	--repo-root '/srv/oss?read=everyone&write=role:member'
//
// read= and write= each take a comma-separated list of principals, and
// may be given more than once (the lists add up):
//
//	role:viewer   every user with that role or a higher one
//	role:member   (admin > member > viewer)
//	role:admin
//	everyone      role:viewer: every user
//	team:NAME     the members of team NAME (harvest team; store/teams.go)
//	user:ID       one user (usr-...)
//
// Write implies read. A role still bounds what its users do: a viewer
// named for write reads. A root with a policy is shared (Grant.Shared):
// its policy decides who sees whose sessions there, and starting a
// session there needs write. A root without one is unshared (see the
// package doc). A directory under two roots (one inside the other) takes
// the policy of the innermost. A team the policy names need not exist
// yet: until it does, it has no members.

// Principal is one who a policy names.
type Principal struct {
	// Kind is "role", "team" or "user".
	Kind string
	// Name is the role, the team's name or the user's id.
	Name string
}

func (p Principal) String() string { return p.Kind + ":" + p.Name }

// Rules are a root's policy.
type Rules struct {
	Read, Write []Principal
}

// Root is a --repo-root with its policy.
type Root struct {
	// Path is the root as given (without the policy): what package
	// workspace's policy takes.
	Path string
	// Rules is its policy; nil for an unshared root.
	Rules *Rules
}

// ParseRoot reads one --repo-root value: a path, and after a "?" its
// policy. The error says what is wrong and how to write it.
func ParseRoot(spec string) (Root, error) {
	path, query, ok := strings.Cut(spec, "?")
	if !ok {
		return Root{Path: spec}, nil
	}
	if path == "" {
		return Root{}, fmt.Errorf("repository root %q: give the directory before the ?, like /srv/repos?read=role:viewer", spec)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return Root{}, fmt.Errorf("repository root %s: the policy %q is not key=value pairs joined by &: %v", path, query, err)
	}
	if len(q) == 0 {
		return Root{}, fmt.Errorf("repository root %s: a ? with no policy after it: give read= and/or write=, like %s?read=role:viewer&write=team:backend, or leave the ? out", path, path)
	}
	r := &Rules{}
	var problems []string
	for key, vals := range q {
		var dst *[]Principal
		switch key {
		case "read":
			dst = &r.Read
		case "write":
			dst = &r.Write
		default:
			problems = append(problems, fmt.Sprintf("unknown key %q: a root's policy takes read= and write=", key))
			continue
		}
		for _, v := range vals {
			for item := range strings.SplitSeq(v, ",") {
				p, err := parsePrincipal(strings.TrimSpace(item))
				if err != nil {
					problems = append(problems, fmt.Sprintf("%s=: %v", key, err))
					continue
				}
				if !slices.Contains(*dst, p) {
					*dst = append(*dst, p)
				}
			}
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return Root{}, fmt.Errorf("repository root %s: %s", path, strings.Join(problems, "; "))
	}
	return Root{Path: path, Rules: r}, nil
}

func parsePrincipal(s string) (Principal, error) {
	if s == "everyone" {
		return Principal{Kind: "role", Name: string(store.RoleViewer)}, nil
	}
	kind, name, ok := strings.Cut(s, ":")
	if !ok || s == "" {
		return Principal{}, fmt.Errorf("%q: give role:viewer|member|admin, team:NAME, user:usr-ID or everyone", s)
	}
	switch kind {
	case "role":
		if !store.Role(name).Valid() {
			return Principal{}, fmt.Errorf("%q: a role is viewer, member or admin", s)
		}
	case "team":
		if err := store.CheckTeamName(name); err != nil {
			return Principal{}, err
		}
	case "user":
		if !strings.HasPrefix(name, "usr-") || len(name) == len("usr-") || strings.ContainsAny(name, " /") {
			return Principal{}, fmt.Errorf("%q: a user is named by their id, like user:usr-0123456789ab (harvest user ls)", s)
		}
	default:
		return Principal{}, fmt.Errorf("%q: unknown kind %q: give role:, team:, user: or everyone", s, kind)
	}
	return Principal{Kind: kind, Name: name}, nil
}

// rank orders the roles: a role: principal names its role and those above.
func rank(r store.Role) int {
	switch r {
	case store.RoleAdmin:
		return 3
	case store.RoleMember:
		return 2
	case store.RoleViewer:
		return 1
	}
	return 0
}

// names says whether p names a user with role and teams.
func (p Principal) names(user string, role store.Role, teams []string) bool {
	switch p.Kind {
	case "role":
		return rank(role) >= rank(store.Role(p.Name))
	case "team":
		return slices.Contains(teams, p.Name)
	case "user":
		return user != "" && user == p.Name
	}
	return false
}

// level is the level r gives a user, and which principal gave it.
func (r *Rules) level(user string, role store.Role, teams []string) (Level, string) {
	for _, p := range r.Write {
		if p.names(user, role, teams) {
			return Write, p.String()
		}
	}
	for _, p := range r.Read {
		if p.names(user, role, teams) {
			return Read, p.String()
		}
	}
	return None, ""
}

// Policy is the server's directory roots with their policies, resolved
// (symlinks followed, as package workspace resolves a session's source).
type Policy struct {
	roots []policyRoot
}

type policyRoot struct {
	resolved string
	rules    *Rules
}

// NewPolicy resolves roots (each an existing directory: package
// workspace checks the rest).
func NewPolicy(roots []Root) (*Policy, error) {
	p := &Policy{}
	for _, r := range roots {
		if !filepath.IsAbs(r.Path) {
			return nil, fmt.Errorf("repository root %q: give an absolute path", r.Path)
		}
		res, err := filepath.EvalSymlinks(r.Path)
		if err != nil {
			return nil, fmt.Errorf("repository root %s: %w (create it, or drop it from the roots)", r.Path, err)
		}
		p.roots = append(p.roots, policyRoot{resolved: res, rules: r.Rules})
	}
	// Innermost first: a directory takes the policy of the deepest root
	// it is under.
	slices.SortStableFunc(p.roots, func(a, b policyRoot) int { return len(b.resolved) - len(a.resolved) })
	return p, nil
}

// Shared says whether any root has a policy.
func (p *Policy) Shared() bool {
	return p != nil && slices.ContainsFunc(p.roots, func(r policyRoot) bool { return r.rules != nil })
}

// rulesFor is the policy of the root resolved path dir is in: nil when
// that root has none, or dir is under no root.
func (p *Policy) rulesFor(dir string) (*Rules, string) {
	if p == nil {
		return nil, ""
	}
	for _, r := range p.roots {
		if dir == r.resolved || strings.HasPrefix(dir, strings.TrimSuffix(r.resolved, "/")+"/") {
			return r.rules, r.resolved
		}
	}
	return nil, ""
}

// resolveDir is a directory as a policy is matched against it: with its
// symlinks followed, or (when it is gone) cleaned.
func resolveDir(dir string) string {
	res, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return filepath.Clean(dir)
	}
	return res
}
