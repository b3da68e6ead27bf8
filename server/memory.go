package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/memory"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// The memory routes: a repository's memory (package memory), read,
// searched, exported, edited and deleted by people. Repositories are named
// by query parameters (their names hold slashes): repo is owner/name (a
// GitHub repository), github:owner/name, or a source as sessions give it
// (a directory on the server, a git URL). owner is "" (the memory every
// session on the repository shares), "me", or, for an admin, a token id.
//
// Who may: an admin, any repository; another user, by their level on the
// repository (package authz, as for its sessions): read to read and search
// it, write to edit and delete entries (memory is what agents learned about
// a repository's code, so whoever may run sessions on it may correct it).
// The repository is one of their user's sessions' (which also says what a
// directory source resolved to), or a GitHub repository GitHub lets them
// read. An owner scope is only the token's own.

var githubName = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$`)

// memoryOn refuses the memory routes of a server configured without one.
func (s *Server) memoryOn() *apiError {
	if s.cfg.Memory == nil {
		return errorf(http.StatusNotFound, CodeNotFound, "this server keeps no repository memory (it was started without one)")
	}
	return nil
}

// memoryScope reads and checks repo and owner of a memory request's
// query, and the other parameters against allowed.
func (s *Server) memoryScope(r *http.Request, c caller, need authz.Level, allowed ...string) (memory.Scope, *apiError) {
	if e := memoryQuery(r, allowed...); e != nil {
		return memory.Scope{}, e
	}
	q := r.URL.Query()
	raw := q.Get("repo")
	if raw == "" {
		return memory.Scope{}, invalid([]string{"repo is required: owner/name for a GitHub repository, or the source sessions name it by (a directory on the server, a git URL)"})
	}
	repo, e := s.memoryRepo(r, c, raw, need)
	if e != nil {
		return memory.Scope{}, e
	}
	sc := memory.Scope{Repo: repo}
	switch o := q.Get("owner"); {
	case o == "":
	case o == "me" || o == c.token.ID:
		sc.Owner = c.token.ID
	case !c.admin():
		return sc, errorf(http.StatusForbidden, CodeForbidden, fmt.Sprintf("owner %s is another token's: token %s (%s) reads its own memory only, as owner=me", o, c.token.ID, c.token.Name))
	default:
		sc.Owner = o
	}
	return sc, nil
}

// memoryQuery refuses query parameters a memory route does not take
// (repo, owner and allowed), and repeated ones but name.
func memoryQuery(r *http.Request, allowed ...string) *apiError {
	q := r.URL.Query()
	for k := range q {
		if k != "repo" && k != "owner" && !strings.Contains(" "+strings.Join(allowed, " ")+" ", " "+k+" ") {
			return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("unknown query parameter %q: %s %s takes repo, owner%s", k, r.Method, r.URL.Path, listTail(allowed)))
		}
		if len(q[k]) > 1 && k != "name" {
			return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("query parameter %q given %d times: give it once", k, len(q[k])))
		}
	}
	return nil
}

func listTail(xs []string) string {
	if len(xs) == 0 {
		return ""
	}
	return ", " + strings.Join(xs, ", ")
}

// memoryRepo is the memory key of the repository raw names (the key
// session.RepoKey gives its sessions), if the caller may use it.
func (s *Server) memoryRepo(r *http.Request, c caller, raw string, need authz.Level) (string, *apiError) {
	if len(raw) > 4096 || strings.ContainsFunc(raw, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return "", invalid([]string{"repo is not a repository's name: owner/name, or a source of at most 4096 bytes without control characters"})
	}
	gh, isGitHub := strings.CutPrefix(raw, "github:")
	if !isGitHub && githubName.MatchString(raw) {
		gh, isGitHub = raw, true
	}
	if isGitHub && !githubName.MatchString(gh) {
		return "", invalid([]string{fmt.Sprintf("repo %s: a GitHub repository is owner/name", raw)})
	}
	key := raw
	if isGitHub {
		key = "github:" + strings.ToLower(gh)
	}
	// The caller's user's sessions say which repositories they use, and
	// what a source they gave resolved to (the admin's: every session).
	owner, f := c.owner(), store.SessionFilter{}
	if !c.admin() && c.token.User != "" {
		owner, f.User = "", c.token.User
	}
	ss, err := s.cfg.Manager.List(r.Context(), owner, f)
	if err != nil {
		return "", fromManager(err)
	}
	var found *store.Repo
	for _, x := range ss {
		for i, rp := range x.Repos {
			if k := session.RepoKey(rp); k == key || rp.Source == raw || (c.admin() && rp.Origin == raw) {
				found, key = &x.Repos[i], k
				break
			}
		}
		if found != nil {
			break
		}
	}
	if c.admin() {
		return key, nil
	}
	if found == nil && isGitHub {
		// A GitHub repository: whoever GitHub lets read it reads its
		// memory, sessions of their own there or not.
		found = &store.Repo{GitHub: gh}
	}
	if found == nil {
		return "", errorf(http.StatusForbidden, CodeForbidden, fmt.Sprintf("repo %s: user %s has run no session on it; a user reads the memory of the repositories of their sessions and of the GitHub repositories they may read (an admin, any)", raw, c.token.User))
	}
	g, err := s.access.For(c.subject()).Repo(r.Context(), authz.RefOf(*found))
	if err != nil {
		return "", accessFailed(err)
	}
	if g.Level < need {
		what := "read"
		if need >= authz.Write {
			what = "change"
		}
		why := fmt.Sprintf("repo %s: you may not %s its memory", raw, what)
		if g.Why != "" {
			why += " (" + g.Why + ")"
		}
		return "", errorf(http.StatusForbidden, CodeForbidden, why)
	}
	return key, nil
}

// memoryError maps an error of package memory to a response.
func memoryError(err error) *apiError {
	var ie *memory.InputError
	var re *memory.RefusedError
	switch {
	case errors.As(err, &ie):
		return invalid(ie.Problems)
	case errors.As(err, &re):
		return errorf(http.StatusForbidden, CodeForbidden, err.Error())
	case errors.Is(err, store.ErrMemoryFull):
		return errorf(http.StatusConflict, CodeConflict, err.Error())
	}
	return fromManager(err)
}

// apiWrite is the provenance of the API's writes.
var apiWrite = memory.Provenance{Session: "api"}

func (s *Server) listMemory(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := s.memoryOn(); e != nil {
		return e
	}
	sc, e := s.memoryScope(r, c, authz.Read, "q", "name")
	if e != nil {
		return e
	}
	q := store.MemoryQuery{Search: r.URL.Query().Get("q")}
	if names, ok := r.URL.Query()["name"]; ok {
		q.Names = names
	}
	g, err := s.cfg.Memory.Read(r.Context(), sc, q)
	if err != nil {
		return memoryError(err)
	}
	writeJSON(w, http.StatusOK, g)
	return nil
}

func (s *Server) exportMemory(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := s.memoryOn(); e != nil {
		return e
	}
	sc, e := s.memoryScope(r, c, authz.Read)
	if e != nil {
		return e
	}
	// Read whole before the status is sent, so a failure is an error
	// response and not a cut file.
	var b strings.Builder
	if err := s.cfg.Memory.Export(r.Context(), sc, &b); err != nil {
		return memoryError(err)
	}
	w.Header().Set("Content-Type", "application/jsonl")
	w.WriteHeader(http.StatusOK)
	w.Write([]byte(b.String()))
	return nil
}

func (s *Server) putMemoryEntity(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := s.memoryOn(); e != nil {
		return e
	}
	// Unknown parameters, then the body, as every route with one: its
	// size and form decide 413 and 415 before the rest is looked at.
	if e := memoryQuery(r, "name"); e != nil {
		return e
	}
	b, e := readBody(w, r)
	if e != nil {
		return e
	}
	var req wire.MemoryEntityRequest
	if e := decodeBody(r.Header.Get("Content-Type"), b, &req, true); e != nil {
		return e
	}
	sc, e := s.memoryScope(r, c, authz.Write, "name")
	if e != nil {
		return e
	}
	name, e := oneName(r)
	if e != nil {
		return e
	}
	auditMemory(r, sc, name)
	x, err := s.cfg.Memory.SetEntity(r.Context(), sc, apiWrite, memory.Entity{Name: name, EntityType: req.Type, Observations: req.Observations})
	if err != nil {
		return memoryError(err)
	}
	writeJSON(w, http.StatusOK, x)
	return nil
}

func (s *Server) deleteMemoryEntity(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := s.memoryOn(); e != nil {
		return e
	}
	if e := noBodyAllowingQuery(r); e != nil {
		return e
	}
	sc, e := s.memoryScope(r, c, authz.Write, "name")
	if e != nil {
		return e
	}
	name, e := oneName(r)
	if e != nil {
		return e
	}
	auditMemory(r, sc, name)
	n, err := s.cfg.Memory.DeleteEntities(r.Context(), sc, apiWrite, []string{name})
	if err != nil {
		return memoryError(err)
	}
	if n == 0 {
		return errorf(http.StatusNotFound, CodeNotFound, fmt.Sprintf("the memory of %s has no entity %q (GET /v1/memory?repo=... lists them)", sc.Repo, name))
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func oneName(r *http.Request) (string, *apiError) {
	ns := r.URL.Query()["name"]
	if len(ns) != 1 || ns[0] == "" {
		return "", invalid([]string{"name is required, once: the entity's name"})
	}
	return ns[0], nil
}

// noBodyAllowingQuery is noBody for a route whose query is checked apart:
// an empty body or {}, else a 400.
func noBodyAllowingQuery(r *http.Request) *apiError {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxNoBody+1))
	if err != nil {
		return errorf(http.StatusBadRequest, CodeBadRequest, "reading the request body: "+err.Error())
	}
	if t := strings.Join(strings.Fields(string(b)), ""); len(b) <= maxNoBody && (t == "" || t == "{}") {
		return nil
	}
	return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("%s %s takes no body: send none (or {})", r.Method, r.URL.Path))
}

// auditMemory names an API edit of memory in the audit log: the scope and
// the entity (an agent's edits carry their session, whose user is known).
func auditMemory(r *http.Request, sc store.MemoryScope, name string) {
	if a := auditOf(r); a != nil {
		a.e.Target = sc.Repo + "#" + name
		if sc.Owner != "" {
			a.addDetail(map[string]any{"owner": sc.Owner})
		}
	}
}
