package server

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

var envIDPattern = regexp.MustCompile(`^env-[0-9a-f]{16}$`)

// prepareEnvironment begins building a repository's environment: 202 with
// it (building), or 200 with the ready one of the same fingerprint.
func (s *Server) prepareEnvironment(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	b, e := readBody(w, r)
	if e != nil {
		return e
	}
	var req wire.PrepareRequest
	if e := decodeBody(r.Header.Get("Content-Type"), b, &req, true); e != nil {
		return e
	}
	if req.Repo.Source == "" && req.Repo.GitHub == "" {
		return invalid([]string{`"repo" needs "source" (a directory on the server or a git URL) or "github" (owner/name)`})
	}
	env, err := s.cfg.Manager.Prepare(r.Context(), session.PrepareRequest{
		Repo:    session.RepoSpec{Name: req.Repo.Name, Source: req.Repo.Source, GitHub: req.Repo.GitHub, Ref: req.Repo.Ref},
		Backend: req.Backend, Force: req.Force, Admin: c.admin(), User: c.token.User,
	})
	if err != nil {
		return fromManagerFor(c, err)
	}
	if a := auditOf(r); a != nil {
		a.e.Target = env.ID
	}
	w.Header().Set("Location", "/v1/environments/"+env.ID)
	writeJSON(w, http.StatusAccepted, c.environment(env))
	return nil
}

// environment is what a caller may see of an environment: a user token
// sees no host path (a directory repository is "dir:NAME").
func (c caller) environment(e *store.Environment) *store.Environment {
	if c.admin() || !strings.HasPrefix(e.Repo, "/") {
		return e
	}
	x := *e
	x.Repo = "dir:" + e.Name
	x.Error = strings.ReplaceAll(x.Error, e.Repo, x.Repo)
	return &x
}

func (s *Server) listEnvironments(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	q := r.URL.Query()
	for k := range q {
		if k != "repo" && k != "backend" && k != "state" {
			return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("unknown query parameter %q: GET /v1/environments takes repo, backend and state", k))
		}
	}
	f := store.EnvironmentFilter{Repo: q.Get("repo"), Backend: q.Get("backend")}
	if st := q.Get("state"); st != "" {
		switch st {
		case store.EnvBuilding, store.EnvReady, store.EnvFailed, store.EnvRemoved:
			f.States = []string{st}
		default:
			return errorf(http.StatusBadRequest, CodeBadRequest, "state "+st+": use building, ready, failed or removed")
		}
	}
	es, err := s.cfg.Manager.ListEnvironments(r.Context(), f)
	if err != nil {
		return fromManager(err)
	}
	out := []*store.Environment{}
	for _, e := range es {
		out = append(out, c.environment(e))
	}
	writeJSON(w, http.StatusOK, wire.EnvironmentList{Environments: out})
	return nil
}

func (s *Server) getEnvironment(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noBody(w, r); e != nil {
		return e
	}
	e, err := s.cfg.Manager.GetEnvironment(r.Context(), r.PathValue("id"))
	if err != nil {
		return fromManager(err)
	}
	writeJSON(w, http.StatusOK, c.environment(e))
	return nil
}

// environmentLog is the build's log as text; ?follow=true goes on until
// the build ends.
func (s *Server) environmentLog(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	id := r.PathValue("id")
	follow := false
	for k, v := range r.URL.Query() {
		switch {
		case k == "follow" && len(v) == 1 && (v[0] == "true" || v[0] == "1"):
			follow = true
		case k == "follow" && len(v) == 1 && (v[0] == "false" || v[0] == "0"):
		case k == "follow":
			return errorf(http.StatusBadRequest, CodeBadRequest, "follow: true or false")
		default:
			return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("unknown query parameter %q: GET /v1/environments/{id}/log takes follow", k))
		}
	}
	e, err := s.cfg.Manager.GetEnvironment(r.Context(), id)
	if err != nil {
		return fromManager(err)
	}
	var out io.Writer = w
	if seen := c.environment(e); seen.Repo != e.Repo {
		out = &replaceWriter{w: w, old: e.Repo, new: seen.Repo}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	fw := &flushWriter{w: out, f: w}
	if err := s.cfg.Manager.EnvironmentLog(r.Context(), id, follow, fw); err != nil && r.Context().Err() == nil {
		s.log.Warn("streaming an environment's log", "environment", id, "err", err)
	}
	return nil
}

type flushWriter struct {
	w io.Writer
	f http.ResponseWriter
}

func (f *flushWriter) Write(p []byte) (int, error) { return f.w.Write(p) }
func (f *flushWriter) Flush() {
	if fl, ok := f.f.(http.Flusher); ok {
		fl.Flush()
	}
}

// replaceWriter writes with old replaced by new (the log's lines are
// written whole, so a path is not split between writes).
type replaceWriter struct {
	w        io.Writer
	old, new string
}

func (r *replaceWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.w, strings.ReplaceAll(string(p), r.old, r.new)); err != nil {
		return 0, err
	}
	return len(p), nil
}
