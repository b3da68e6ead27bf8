package ghsim

import (
	"cmp"
	"net/http"
	"slices"
)

// The lists of an App's installations and of what an installation
// covers, as GitHub serves them.

// listInstallations is GET /app/installations: the installations of the
// App whose JWT asks, by id, paginated (suspended ones included, with
// suspended_at).
func (s *Server) listInstallations(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.appAuth(w, req)
	if a == nil {
		return
	}
	var ins []*installation
	for _, in := range s.insts {
		if in.app == a {
			ins = append(ins, in)
		}
	}
	slices.SortFunc(ins, func(x, y *installation) int { return cmp.Compare(x.id, y.id) })
	out := make([]listedInstallation, 0, len(ins))
	for _, in := range paginate(w, req, ins) {
		name := in.account.name
		if name == "" {
			name = in.account.login
		}
		out = append(out, listedInstallation{wireInstallation: s.wInstallation(in),
			Account: listedAccount{wireUser: s.wUser(in.account), Name: name, Slug: in.account.login,
				CreatedAt: ts(in.account.created), UpdatedAt: ts(in.account.created)}})
	}
	writeJSON(w, http.StatusOK, out)
}

// listedInstallation is an installation as GET /app/installations
// writes it. Its account, in GitHub's description of that list (unlike
// GET /repos/{o}/{r}/installation's), is all of a simple user and an
// enterprise (allOf, not anyOf): the account carries both's required
// fields, an enterprise's name, slug and times besides the user's.
type listedInstallation struct {
	wireInstallation
	Account listedAccount `json:"account"`
}

type listedAccount struct {
	*wireUser
	Name      string `json:"name"`
	Slug      string `json:"slug"`
	CreatedAt string `json:"created_at"`
	UpdatedAt string `json:"updated_at"`
}

type wireInstallationRepos struct {
	TotalCount          int         `json:"total_count"`
	RepositorySelection string      `json:"repository_selection"`
	Repositories        []*wireRepo `json:"repositories"`
}

// listInstallationRepos is GET /installation/repositories: the
// repositories an installation token may reach (those it was narrowed
// to, or every one its installation covers), by id, paginated.
func (s *Server) listInstallationRepos(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tok, ok := s.tokenAuth(w, req)
	if !ok {
		return
	}
	switch {
	case tok == nil:
		writeError(w, http.StatusUnauthorized, "Requires authentication")
		return
	case tok.kind != tokInstallation:
		writeError(w, http.StatusForbidden, "You must authenticate with an installation access token in order to list repositories for an installation.")
		return
	}
	var rs []*repo
	for _, r := range s.sortedRepos() {
		if s.sees(tok, r) {
			rs = append(rs, r)
		}
	}
	out := wireInstallationRepos{TotalCount: len(rs), RepositorySelection: "all", Repositories: []*wireRepo{}}
	if tok.inst.selected != nil || tok.repos != nil {
		out.RepositorySelection = "selected"
	}
	for _, r := range paginate(w, req, rs) {
		out.Repositories = append(out.Repositories, s.wRepo(r))
	}
	writeJSON(w, http.StatusOK, out)
}
