package ghsim

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

// Forks, as GitHub has them: a fork is a repository of its own (its
// owner's, its own bare repository, cloned from the parent's branches and
// tags when it is made), whose branches can be the head of a pull request
// in the parent. Such a pull request says so on the wire: head.repo is
// the fork (fork true), head.label and head.user its owner. Its commits
// reach the parent only as refs/pull/N/head, which GitHub keeps in the
// base repository for every pull request (a fork's or not) and nobody can
// push to (receive.hideRefs refuses it with git's "deny updating a hidden
// ref", GitHub's own words). An installation covers its account's
// repositories only: a token of the parent's installation can read
// refs/pull/N/head from the parent and neither read a private fork nor
// push to any fork.

// ForkSpec forks a repository into a user's account.
type ForkSpec struct {
	Login string `json:"login"` // who forks: the fork is theirs
	Repo  string `json:"repo"`  // owner/name of the repository to fork
	Name  string `json:"name,omitempty"`
}

// Fork forks a repository as a user (POST /repos/{o}/{r}/forks) and
// returns the fork.
func (s *Server) Fork(ctx context.Context, spec ForkSpec) (Repo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, parent, err := s.actor(spec.Login, spec.Repo)
	if err != nil {
		return Repo{}, err
	}
	if u.typ != "User" {
		return Repo{}, fmt.Errorf("%s is not a user: only a person forks here", spec.Login)
	}
	f, err := s.fork(ctx, parent, u, spec.Name)
	if err != nil {
		return Repo{}, err
	}
	return Repo{ID: f.id, FullName: f.fullName(), CloneURL: s.base + "/" + f.fullName() + ".git", DefaultBranch: f.defaultBranch}, nil
}

// fork makes owner's fork of parent named name (default the parent's),
// or returns the one owner has. Called with s.mu held; it runs git.
func (s *Server) fork(ctx context.Context, parent *repo, owner *user, name string) (*repo, error) {
	name = cmpOr(name, parent.name)
	if !repoRE.MatchString(name) || strings.HasSuffix(name, ".git") {
		return nil, fmt.Errorf("fork name %q: not a valid repository name", name)
	}
	if ex := s.repoByName(owner.login, name); ex != nil {
		if ex.parent == parent {
			return ex, nil // GitHub answers with the fork one has
		}
		return nil, fmt.Errorf("repository %s/%s: already exists", owner.login, name)
	}
	now := s.now()
	f := &repo{id: s.newID(), owner: owner, name: name, private: parent.private, defaultBranch: parent.defaultBranch,
		description: parent.description, created: now, pushed: now, protected: map[string]bool{}, perms: map[string]Permission{},
		issues: map[int]*issue{}, branches: map[string]string{}, labels: map[string]*label{}, parent: parent}
	if err := s.importRepo(ctx, f, s.repoDir(parent)); err != nil {
		os.RemoveAll(s.repoDir(f))
		return nil, fmt.Errorf("forking %s: %w", parent.fullName(), err)
	}
	br, err := s.readBranches(ctx, f)
	if err != nil {
		os.RemoveAll(s.repoDir(f))
		return nil, err
	}
	f.branches = br
	s.repos[f.id] = f
	return f, nil
}

// forkCount is how many forks r has.
func (s *Server) forkCount(r *repo) int {
	n := 0
	for _, x := range s.repos {
		if x.parent == r {
			n++
		}
	}
	return n
}

// root is the repository at the top of r's fork network (GitHub's
// "source").
func root(r *repo) *repo {
	for r.parent != nil {
		r = r.parent
	}
	return r
}

// sameNetwork reports whether a and b share a fork network (a pull
// request's head may be in any repository of its base's network).
func sameNetwork(a, b *repo) bool { return root(a) == root(b) }

// wireFullRepo is GitHub's full-repository: a repository as GET
// /repos/{o}/{r} and POST .../forks give it, with a fork's parent and
// source.
type wireFullRepo struct {
	*wireRepo
	Parent *wireRepo `json:"parent,omitempty"`
	Source *wireRepo `json:"source,omitempty"`
}

func (s *Server) wFullRepo(r *repo) wireFullRepo {
	w := wireFullRepo{wireRepo: s.wRepo(r)}
	if r.parent != nil {
		w.Parent, w.Source = s.wRepo(r.parent), s.wRepo(root(r))
	}
	return w
}

type forkRequest struct {
	Organization      *string `json:"organization"`
	Name              *string `json:"name"`
	DefaultBranchOnly *bool   `json:"default_branch_only"`
}

// createFork is POST /repos/{owner}/{repo}/forks: a person forks into
// their own account (202, the fork). An App's installation token cannot
// (403, as GitHub answers an integration without the permission), and
// forking into an organization is not something the stand-in does (422,
// saying so).
func (s *Server) createFork(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, tok, ok := s.repoFor(w, req, "contents", "read")
	if !ok {
		return
	}
	switch {
	case tok == nil:
		writeError(w, http.StatusUnauthorized, "Requires authentication")
		return
	case tok.kind != tokPAT:
		writeError(w, http.StatusForbidden, "Resource not accessible by integration")
		return
	}
	var body forkRequest
	if req.ContentLength != 0 && !decodeBody(w, req, &body) {
		return
	}
	if body.Organization != nil {
		invalid(w, "Fork", "organization", "invalid", "the GitHub stand-in forks into the user's own account only")
		return
	}
	name := ""
	if body.Name != nil {
		name = *body.Name
	}
	ctx, cancel := context.WithTimeout(req.Context(), time.Minute)
	defer cancel()
	f, err := s.fork(ctx, r, tok.user, name)
	if err != nil {
		invalid(w, "Fork", "name", "invalid", err.Error())
		return
	}
	if body.DefaultBranchOnly != nil && *body.DefaultBranchOnly {
		for b := range f.branches {
			if b != f.defaultBranch {
				if _, err := s.git(ctx, s.repoDir(f), "update-ref", "-d", "refs/heads/"+b); err != nil {
					writeError(w, http.StatusInternalServerError, err.Error())
					return
				}
				delete(f.branches, b)
			}
		}
	}
	writeJSON(w, http.StatusAccepted, s.wFullRepo(f))
}

// pullHead resolves a pull request's head as GitHub's API takes it:
// "branch" (of r) or "owner:branch" (of r, or of owner's repository in
// r's fork network). ok is false when there is no such repository.
func (s *Server) pullHead(r *repo, head string) (hr *repo, branch string, ok bool) {
	o, b, cut := strings.Cut(head, ":")
	if !cut {
		return r, head, true
	}
	if strings.EqualFold(o, r.owner.login) {
		return r, b, true
	}
	for _, x := range s.sortedRepos() {
		if strings.EqualFold(x.owner.login, o) && x != r && sameNetwork(x, r) {
			return x, b, true
		}
	}
	return nil, b, false
}

// writePullRef points the base repository's refs/pull/N/head at the pull
// request's head, as GitHub does for every pull request; a fork's commits
// are fetched into the base repository for it. Called with s.mu held.
func (s *Server) writePullRef(ctx context.Context, is *issue) error {
	pr := is.pr
	dir, ref := s.repoDir(is.repo), fmt.Sprintf("refs/pull/%d/head", is.number)
	if pr.headRepo != is.repo {
		if _, err := s.git(ctx, dir, "fetch", "--quiet", "--no-write-fetch-head", "--no-tags", s.repoDir(pr.headRepo),
			"+refs/heads/"+pr.head+":"+ref); err != nil {
			return err
		}
		if _, err := s.git(ctx, dir, "cat-file", "-e", pr.headSHA+"^{commit}"); err != nil {
			return nil // the branch moved on since: the ref holds where it is now
		}
	}
	_, err := s.git(ctx, dir, "update-ref", ref, pr.headSHA)
	return err
}
