package server

import (
	"net/http"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/wire"
	"github.com/harvest-dev/harvest/workspace"
)

// A session's changes are read in its box (session.Manager.Changes): git
// never runs on the host in a workspace the agent writes. A session whose
// box is not running (suspended when idle, starting, ended) answers 409
// saying so, rather than starting a box only to show a diff: a suspended
// session's next message starts it, and its changes are then readable.
// Whoever may read the session reads them (server/access.go; a session
// the caller may not read is a 404, as everywhere).

// changes serves GET /v1/sessions/{id}/diff.
func (s *Server) changes(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	if _, e := s.sessionFor(r, c, r.PathValue("id"), authz.Read); e != nil {
		return e
	}
	list, err := s.cfg.Manager.Changes(r.Context(), "", r.PathValue("id"), workspace.DefaultDiffLimits)
	if err != nil {
		return fromManager(err)
	}
	out := wire.Changes{Repos: []wire.RepoChanges{}}
	for _, rc := range list {
		rc2 := wire.RepoChanges{Repo: rc.Repo, BaseKnown: rc.BaseKnown, Files: []wire.FileChange{}}
		if rc.Err != nil {
			rc2.Error = rc.Err.Error()
		}
		if ch := rc.Changes; ch != nil {
			rc2.Base, rc2.Truncated = ch.Base, ch.Truncated
			for _, f := range ch.Files {
				rc2.Files = append(rc2.Files, wire.FileChange{Path: f.Path, OldPath: f.OldPath, Status: f.Status,
					Additions: f.Additions, Deletions: f.Deletions, Binary: f.Binary, Patch: f.Patch, Truncated: f.Truncated})
				rc2.Additions += f.Additions
				rc2.Deletions += f.Deletions
			}
		}
		out.Repos = append(out.Repos, rc2)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
