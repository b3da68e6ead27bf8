package server

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// # People
//
// A token is a user's (store/people.go): GET /v1/me says whose, an admin
// manages users with /v1/users (create, rename, change the role,
// disable) and gives them tokens (POST /v1/tokens with "user"). A token
// made without a user is a new user's of its own, as every token became
// when users came, so automation that makes tokens goes on as before.
//
// What a token may do is the lesser of the token and its user: an admin
// token acts as an admin only while its user is an admin (caller.admin),
// and a disabled user's tokens and sign-ins are refused from the next
// request on (the user's role and disabled are read with the token, on
// every request). Users are never deleted: they are disabled, so what
// they did keeps naming them.

// userIDPattern is the shape of a user id: NewUserID's, a migrated
// token's (store.UserIDForToken) or a GitHub requester's (usr-gh<id>).
var userIDPattern = regexp.MustCompile(`^usr-[A-Za-z0-9_.-]{1,80}$`)

func validUserID(s string) bool { return userIDPattern.MatchString(s) }

// UserView is a user as the API shows it.
func UserView(u *store.User, ids []*store.Identity) *wire.User {
	out := &wire.User{ID: u.ID, Name: u.Name, Role: string(u.Role), Disabled: u.Disabled, CreatedAt: u.CreatedAt}
	for _, i := range ids {
		out.Identities = append(out.Identities, &wire.Identity{Kind: i.Kind, Issuer: i.Issuer, Subject: i.Subject, Login: i.Login, Email: i.Email, CreatedAt: i.CreatedAt})
	}
	return out
}

// me says who the caller is: its token, its user with the user's
// identities, and whether it acts as an admin.
func (s *Server) me(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	out := wire.Me{Token: TokenView(c.token), Admin: c.admin()}
	if c.userSignIn() {
		out.Token, out.SignedInVia = nil, c.via // no token: the user signed in with GitHub or OIDC
	}
	if c.token.User != "" {
		u, err := s.cfg.Store.GetUser(r.Context(), c.token.User)
		if err != nil {
			return fromManager(err)
		}
		ids, err := s.cfg.Store.Identities(r.Context(), u.ID)
		if err != nil {
			return fromManager(err)
		}
		out.User = UserView(u, ids)
		if err := s.myBudgets(r.Context(), u.ID, &out); err != nil {
			return fromManager(err)
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) listUsers(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	us, err := s.cfg.Store.ListUsers(r.Context())
	if err != nil {
		return fromManager(err)
	}
	out := wire.UserList{Users: []*wire.User{}}
	for _, u := range us {
		out.Users = append(out.Users, UserView(u, nil))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getUser(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	u, e := s.user(r, r.PathValue("id"))
	if e != nil {
		return e
	}
	ids, err := s.cfg.Store.Identities(r.Context(), u.ID)
	if err != nil {
		return fromManager(err)
	}
	writeJSON(w, http.StatusOK, UserView(u, ids))
	return nil
}

// user reads a user; a missing one is a 404 that says where to look.
func (s *Server) user(r *http.Request, id string) (*store.User, *apiError) {
	u, err := s.cfg.Store.GetUser(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errorf(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no user %s: see GET /v1/users", clip(id, 80)))
	}
	if err != nil {
		return nil, fromManager(err)
	}
	return u, nil
}

// checkUserName lists what is wrong with a user's name.
func checkUserName(name string) []string {
	var p []string
	if strings.TrimSpace(name) == "" {
		p = append(p, `"name" is empty: give the person's name, like "Alice Martin"`)
	}
	if n := utf8.RuneCountInString(name); n > maxName {
		p = append(p, fmt.Sprintf(`"name" is %d characters: at most %d`, n, maxName))
	}
	if strings.ContainsFunc(name, isControl) {
		p = append(p, `"name" has control characters: use printable ones`)
	}
	return p
}

func checkRole(role string) []string {
	if !store.Role(role).Valid() {
		return []string{fmt.Sprintf(`"role" %q: give admin, member or viewer`, clip(role, 40))}
	}
	return nil
}

func (s *Server) createUser(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	b, e := readBody(w, r)
	if e != nil {
		return e
	}
	var req wire.UserRequest
	if e := decodeBody(r.Header.Get("Content-Type"), b, &req, true); e != nil {
		return e
	}
	if req.Role == "" {
		req.Role = wire.RoleMember
	}
	if p := append(checkUserName(req.Name), checkRole(req.Role)...); len(p) > 0 {
		return invalid(p)
	}
	u := &store.User{ID: store.NewUserID(), Name: req.Name, Role: store.Role(req.Role), CreatedAt: time.Now().UTC()}
	if a := auditOf(r); a != nil {
		a.e.Target = u.ID
		a.addDetail(map[string]any{"name": u.Name, "role": u.Role})
	}
	if err := s.cfg.Store.CreateUser(r.Context(), u); err != nil {
		return fromManager(fmt.Errorf("storing the user: %w", err))
	}
	w.Header().Set("Location", "/v1/users/"+u.ID)
	writeJSON(w, http.StatusCreated, UserView(u, nil))
	return nil
}

// patchUser renames a user, changes their role, or disables (or enables)
// them. An admin cannot demote or disable themselves: another admin
// must, so a server is never left with no one to manage it by mistake.
func (s *Server) patchUser(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	b, e := readBody(w, r)
	if e != nil {
		return e
	}
	var req wire.UserPatch
	if e := decodeBody(r.Header.Get("Content-Type"), b, &req, true); e != nil {
		return e
	}
	var p []string
	if req.Name != nil {
		p = append(p, checkUserName(*req.Name)...)
	}
	if req.Role != nil {
		p = append(p, checkRole(*req.Role)...)
	}
	if req.Name == nil && req.Role == nil && req.Disabled == nil {
		p = append(p, `nothing to change: give "name", "role" or "disabled"`)
	}
	if len(p) > 0 {
		return invalid(p)
	}
	id := r.PathValue("id")
	if id == c.token.User && ((req.Role != nil && *req.Role != wire.RoleAdmin) || (req.Disabled != nil && *req.Disabled)) {
		return errorf(http.StatusConflict, CodeConflict, fmt.Sprintf("user %s is you: an admin does not demote or disable themselves (another admin may)", id))
	}
	detail := map[string]any{}
	if req.Name != nil {
		detail["name"] = *req.Name
	}
	if req.Role != nil {
		detail["role"] = *req.Role
	}
	if req.Disabled != nil {
		detail["disabled"] = *req.Disabled
	}
	auditOf(r).addDetail(detail)
	u, err := s.cfg.Store.UpdateUser(r.Context(), id, func(u *store.User) error {
		if req.Name != nil {
			u.Name = *req.Name
		}
		if req.Role != nil {
			u.Role = store.Role(*req.Role)
		}
		if req.Disabled != nil {
			u.Disabled = *req.Disabled
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return errorf(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no user %s: see GET /v1/users", id))
	}
	if err != nil {
		return fromManager(err)
	}
	writeJSON(w, http.StatusOK, UserView(u, nil))
	return nil
}
