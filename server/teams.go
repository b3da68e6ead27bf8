package server

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// # Teams
//
// An admin makes teams and puts users in them (store/teams.go): a root's
// policy names them (harvest serve --repo-root 'DIR?read=team:qa'), so
// who sees whose sessions there changes with a team, not the server's
// flags, and from the next request on (a user's teams are read with each
// request that needs them). Every change is audited in its transaction:
// team.create, team.delete, team.add_member, team.remove_member.
//
//	GET    /v1/teams                        → TeamList (with members)
//	POST   /v1/teams                        TeamRequest → 201 Team
//	DELETE /v1/teams/{team}                 → 204 (its memberships with it)
//	POST   /v1/teams/{team}/members         TeamMemberRequest → 204
//	DELETE /v1/teams/{team}/members/{user}  → 204

// teamName checks the {team} of a path: a 404 for a name no team can
// have.
func teamName(r *http.Request) (string, *apiError) {
	name := r.PathValue("team")
	if store.CheckTeamName(name) != nil {
		return "", errorf(http.StatusNotFound, CodeNotFound, fmt.Sprintf("%q is not a team's name: team names are lower-case letters, digits and dashes (see GET /v1/teams)", clip(name, 60)))
	}
	if a := auditOf(r); a != nil {
		a.e.Target = name
	}
	return name, nil
}

// teamError maps a store error about team name.
func teamError(err error, name string) *apiError {
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, CodeNotFound, fmt.Sprintf("%s: see GET /v1/teams and GET /v1/users", err.Error()))
	}
	return fromManager(err)
}

func (s *Server) listTeams(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	ts, err := s.cfg.Store.ListTeams(r.Context())
	if err != nil {
		return fromManager(err)
	}
	out := wire.TeamList{Teams: []*wire.Team{}}
	for _, t := range ts {
		m, err := s.cfg.Store.TeamMembers(r.Context(), t.Name)
		if errors.Is(err, store.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return fromManager(err)
		}
		out.Teams = append(out.Teams, &wire.Team{Name: t.Name, CreatedAt: t.CreatedAt, Members: append([]string{}, m...)})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) createTeam(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	b, e := readBody(w, r)
	if e != nil {
		return e
	}
	var req wire.TeamRequest
	if e := decodeBody(r.Header.Get("Content-Type"), b, &req, true); e != nil {
		return e
	}
	if err := store.CheckTeamName(req.Name); err != nil {
		return invalid([]string{`"name": ` + err.Error()})
	}
	if a := auditOf(r); a != nil {
		a.e.Target = req.Name
	}
	t := &store.Team{Name: req.Name, CreatedAt: time.Now().UTC()}
	if err := s.cfg.Store.CreateTeam(r.Context(), t); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return errorf(http.StatusConflict, CodeConflict, fmt.Sprintf("team %s exists: see GET /v1/teams", req.Name))
		}
		return fromManager(err)
	}
	w.Header().Set("Location", "/v1/teams/"+t.Name)
	writeJSON(w, http.StatusCreated, wire.Team{Name: t.Name, CreatedAt: t.CreatedAt, Members: []string{}})
	return nil
}

func (s *Server) deleteTeam(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noBody(w, r); e != nil {
		return e
	}
	name, e := teamName(r)
	if e != nil {
		return e
	}
	if err := s.cfg.Store.DeleteTeam(r.Context(), name); err != nil {
		return teamError(err, name)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) addTeamMember(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	name, e := teamName(r)
	if e != nil {
		return e
	}
	b, e := readBody(w, r)
	if e != nil {
		return e
	}
	var req wire.TeamMemberRequest
	if e := decodeBody(r.Header.Get("Content-Type"), b, &req, true); e != nil {
		return e
	}
	if !validUserID(req.User) {
		return invalid([]string{fmt.Sprintf(`"user" %q: give a user's id, like usr-0123456789ab (GET /v1/users)`, clip(req.User, 80))})
	}
	auditOf(r).addDetail(map[string]any{"user": req.User})
	if err := s.cfg.Store.AddTeamMember(r.Context(), name, req.User); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return errorf(http.StatusConflict, CodeConflict, err.Error())
		}
		return teamError(err, name)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) removeTeamMember(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noBody(w, r); e != nil {
		return e
	}
	name, e := teamName(r)
	if e != nil {
		return e
	}
	user := r.PathValue("user")
	if !validUserID(user) {
		return errorf(http.StatusNotFound, CodeNotFound, fmt.Sprintf("%q is not a user id: user ids look like usr-0123456789ab (see GET /v1/users)", clip(user, 80)))
	}
	auditOf(r).addDetail(map[string]any{"user": user})
	if err := s.cfg.Store.RemoveTeamMember(r.Context(), name, user); err != nil {
		return teamError(err, name)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
