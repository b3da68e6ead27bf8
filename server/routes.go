package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// table is the API: every route, once. openapi.json documents exactly
// these (TestOpenAPIMatchesRoutes).
func (s *Server) table() []route {
	return []route{
		{http.MethodGet, "/healthz", public, s.health},
		{http.MethodGet, "/readyz", public, s.ready},
		{http.MethodGet, "/metrics", admin, s.metrics},
		{http.MethodGet, "/openapi.json", public, s.openAPI},

		// A browser's sign-in: websession.go.
		{http.MethodPost, "/v1/auth/session", public, s.signIn},
		{http.MethodGet, "/v1/auth/session", user, s.whoAmI},
		{http.MethodDelete, "/v1/auth/session", user, s.signOut},
		// Signing in with GitHub or an OIDC provider: signin*.go.
		{http.MethodGet, "/v1/auth/providers", public, s.providers},
		{http.MethodGet, "/v1/auth/github", public, s.githubStart},
		{http.MethodGet, "/v1/auth/github/callback", public, s.githubCallback},
		{http.MethodGet, "/v1/auth/oidc", public, s.oidcStart},
		{http.MethodGet, "/v1/auth/oidc/callback", public, s.oidcCallback},

		{http.MethodPost, "/v1/sessions", user, s.createSession},
		{http.MethodGet, "/v1/sessions", user, s.listSessions},
		{http.MethodGet, "/v1/sessions/{id}", user, s.getSession},
		{http.MethodDelete, "/v1/sessions/{id}", user, s.deleteSession},
		{http.MethodPost, "/v1/sessions/{id}/messages", user, s.sendMessage},
		{http.MethodPost, "/v1/sessions/{id}/cancel", user, s.cancelTurn},
		{http.MethodPost, "/v1/sessions/{id}/stop", user, s.stopSession},
		{http.MethodGet, "/v1/sessions/{id}/events", user, s.streamEvents},
		{http.MethodGet, "/v1/sessions/{id}/log", user, s.eventLog},
		{http.MethodGet, "/v1/sessions/{id}/lock", user, s.getLock},
		// Read in, and opened into, the session's box: box.go, shell.go.
		{http.MethodGet, "/v1/sessions/{id}/diff", user, s.changes},
		{http.MethodGet, "/v1/sessions/{id}/shell", user, s.shell},
		{http.MethodPost, "/v1/sessions/{id}/unlock", admin, s.unlock},

		// People and the audit log: people.go, audit.go.
		{http.MethodGet, "/v1/me", user, s.me},
		{http.MethodGet, "/v1/users", admin, s.listUsers},
		{http.MethodPost, "/v1/users", admin, s.createUser},
		{http.MethodGet, "/v1/users/{id}", admin, s.getUser},
		{http.MethodPatch, "/v1/users/{id}", admin, s.patchUser},
		// Linking a Slack account by hand, and unlinking: slacklinks.go.
		{http.MethodDelete, "/v1/users/{id}/identities/{kind}/{subject}", user, s.unlinkIdentity},
		{http.MethodGet, "/v1/slack/links/{code}", user, s.getSlackLink},
		{http.MethodPost, "/v1/slack/links/{code}", user, s.redeemSlackLink},
		{http.MethodGet, "/v1/audit", admin, s.listAudit},

		// Teams a root's policy names: teams.go.
		{http.MethodGet, "/v1/teams", admin, s.listTeams},
		{http.MethodPost, "/v1/teams", admin, s.createTeam},
		{http.MethodDelete, "/v1/teams/{team}", admin, s.deleteTeam},
		{http.MethodPost, "/v1/teams/{team}/members", admin, s.addTeamMember},
		{http.MethodDelete, "/v1/teams/{team}/members/{user}", admin, s.removeTeamMember},
		// Budgets of users and teams: budgets.go.
		{http.MethodGet, "/v1/users/{id}/budget", admin, s.getBudget},
		{http.MethodPut, "/v1/users/{id}/budget", admin, s.putBudget},
		{http.MethodDelete, "/v1/users/{id}/budget", admin, s.deleteBudget},
		{http.MethodGet, "/v1/teams/{team}/budget", admin, s.getBudget},
		{http.MethodPut, "/v1/teams/{team}/budget", admin, s.putBudget},
		{http.MethodDelete, "/v1/teams/{team}/budget", admin, s.deleteBudget},

		{http.MethodPost, "/v1/tokens", admin, s.createToken},
		{http.MethodGet, "/v1/tokens", admin, s.listTokens},
		{http.MethodDelete, "/v1/tokens/{id}", admin, s.deleteToken},

		// Who may use which scope: secrets.go.
		{http.MethodPut, "/v1/secrets/{scope}/{name}", user, s.putSecret},
		{http.MethodGet, "/v1/secrets", user, s.listSecrets},
		{http.MethodDelete, "/v1/secrets/{scope}/{name}", user, s.deleteSecret},

		{http.MethodGet, "/v1/sources", user, s.listSources},

		{http.MethodPost, "/v1/environments", user, s.prepareEnvironment},
		{http.MethodGet, "/v1/environments", user, s.listEnvironments},
		{http.MethodGet, "/v1/environments/{id}", user, s.getEnvironment},
		{http.MethodGet, "/v1/environments/{id}/log", user, s.environmentLog},

		{http.MethodPost, "/v1/github/webhook", public, s.githubWebhook},
		// The deliveries it stored, for the operator: github.go.
		{http.MethodGet, "/v1/github/deliveries", admin, s.listDeliveries},
		{http.MethodPost, "/v1/github/deliveries/{id}/replay", admin, s.replayDelivery},

		{http.MethodPost, "/v1/slack/events", public, s.slackEvents},

		// Who may read and edit which repository's memory: memory.go.
		{http.MethodGet, "/v1/memory", user, s.listMemory},
		{http.MethodGet, "/v1/memory/export", user, s.exportMemory},
		{http.MethodPut, "/v1/memory/entity", user, s.putMemoryEntity},
		{http.MethodDelete, "/v1/memory/entity", user, s.deleteMemoryEntity},
	}
}

// githubWebhook hands GitHub's deliveries to the GitHub side (package
// ghbot), which checks their signature itself.
func (s *Server) githubWebhook(w http.ResponseWriter, r *http.Request, _ caller) *apiError {
	if s.cfg.GitHubWebhook == nil {
		return errorf(http.StatusNotFound, CodeNotFound, "this server has no GitHub configured: start harvest serve with --github-app-id, --github-app-key and --github-webhook-secret-file")
	}
	sw := &statusWriter{ResponseWriter: w}
	s.cfg.GitHubWebhook.ServeHTTP(sw, r)
	if a := auditOf(r); a != nil {
		// Deliveries taken are recorded by the GitHub side as what they
		// cause (a session GitHub starts: session.create, channel github);
		// here, the refused ones (a bad signature, a body too large).
		a.e.Channel = store.ChannelGitHub
		if sw.status < 400 {
			a.done = true
		} else {
			a.result = webhookRefusal(sw.status)
			a.addDetail(map[string]any{"status": sw.status, "event": clip(r.Header.Get("X-GitHub-Event"), 60), "delivery": clip(r.Header.Get("X-GitHub-Delivery"), 60)})
		}
	}
	return nil
}

// slackEvents hands Slack's deliveries to the Slack app (package
// slackbot), which checks their signature itself.
func (s *Server) slackEvents(w http.ResponseWriter, r *http.Request, _ caller) *apiError {
	if s.cfg.SlackEvents == nil {
		return errorf(http.StatusNotFound, CodeNotFound, "this server takes no Slack events over HTTP: start harvest serve with --slack-bot-token-file and --slack-signing-secret-file")
	}
	sw := &statusWriter{ResponseWriter: w}
	s.cfg.SlackEvents.ServeHTTP(sw, r)
	if a := auditOf(r); a != nil {
		// What the deliveries cause the Slack side records (channel
		// slack); here, the refused ones (a bad signature, an old
		// timestamp).
		a.e.Channel = store.ChannelSlack
		if sw.status < 400 {
			a.done = true
		} else {
			a.result = webhookRefusal(sw.status)
			a.addDetail(map[string]any{"status": sw.status, "retry": clip(r.Header.Get("X-Slack-Retry-Num"), 10)})
		}
	}
	return nil
}

// statusWriter remembers the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// webhookRefusal is the audit result of a refused delivery.
func webhookRefusal(status int) string {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden:
		return CodeUnauthorized
	case http.StatusRequestEntityTooLarge:
		return CodeTooLarge
	case http.StatusBadRequest:
		return CodeBadRequest
	}
	return "status_" + strconv.Itoa(status)
}

// noQuery refuses query parameters on routes that take none, so a typo
// (?sinse=5) is an error rather than silently ignored.
func noQuery(r *http.Request) *apiError {
	for k := range r.URL.Query() {
		return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("unknown query parameter %q: %s %s takes none", k, r.Method, r.URL.Path))
	}
	return nil
}

// maxNoBody bounds what is read of the body of a route that takes none:
// room for {} and some whitespace. A longer body is refused unread.
const maxNoBody = 64

// noBody checks the body of a route that takes none: empty or {} (with any
// Content-Type, or none). Anything else is a 400 whatever its size or
// type, so these routes never answer 413 or 415 (openapi.json lists
// neither for them).
func noBody(w http.ResponseWriter, r *http.Request) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxNoBody+1))
	if err != nil {
		return errorf(http.StatusBadRequest, CodeBadRequest, "reading the request body: "+err.Error())
	}
	if len(b) <= maxNoBody {
		if t := strings.Join(strings.Fields(string(b)), ""); t == "" || t == "{}" {
			return nil
		}
	}
	return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("%s %s takes no body: send none (or {})", r.Method, r.URL.Path))
}

// health says the process is alive: 200 while it serves, draining or
// not (a liveness probe must not restart a server finishing its turns);
// /readyz says whether it takes new work.
func (s *Server) health(w http.ResponseWriter, r *http.Request, _ caller) *apiError {
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, Health{Status: "shutting_down", Version: s.cfg.Version})
		return nil
	}
	if s.cfg.Manager.Draining() {
		writeJSON(w, http.StatusOK, Health{Status: "draining", Version: s.cfg.Version})
		return nil
	}
	writeJSON(w, http.StatusOK, Health{Status: "ok", Version: s.cfg.Version})
	return nil
}

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request, _ caller) *apiError {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPIDoc)
	return nil
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	b, e := readBody(w, r)
	if e != nil {
		return e
	}
	req, e := decodeCreate(r.Header.Get("Content-Type"), b)
	if e != nil {
		return e
	}
	creq := fromCreate(req, c.admin())
	creq.User = c.token.User
	if e := s.startRefusal(r, c, creq.Repos); e != nil {
		return e
	}
	v, err := s.cfg.Manager.Create(r.Context(), c.token.ID, creq)
	if err != nil {
		return fromManagerFor(c, err)
	}
	if a := auditOf(r); a != nil {
		a.e.Target = v.ID
	}
	w.Header().Set("Location", "/v1/sessions/"+v.ID)
	out := c.view(v)
	out.Access = authz.Write.String() // one who may start it writes their own
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	q, e := parseList(r.URL.Query())
	if e != nil {
		return e
	}
	if !c.admin() && q.owner && q.filter.Owner != c.token.ID {
		return errorf(http.StatusForbidden, CodeForbidden, "owner: only an admin token lists other tokens' sessions; leave owner out for your own")
	}
	// One more than the page: whether there is a next page, without
	// answering an empty last page to a caller who follows next_cursor.
	q.filter.Limit++
	list, next, err := s.listFor(r.Context(), c, q.scope, q.filter)
	if err != nil {
		return accessFailed(err)
	}
	out := SessionList{Sessions: []*wire.Session{}}
	if next != nil {
		out.NextCursor = makeCursor(*next)
	}
	for _, x := range list {
		out.Sessions = append(out.Sessions, c.session(x))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	v, l, e := s.sessionLevel(r, c, r.PathValue("id"), authz.Read)
	if e != nil {
		return e
	}
	out := c.view(v)
	out.Access = l.String()
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noBody(w, r); e != nil {
		return e
	}
	if _, e := s.sessionFor(r, c, r.PathValue("id"), authz.Write); e != nil {
		return e
	}
	if err := s.cfg.Manager.Delete(r.Context(), "", r.PathValue("id")); err != nil {
		return fromManager(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) sendMessage(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	b, e := readBody(w, r)
	if e != nil {
		return e
	}
	req, e := decodeSend(r.Header.Get("Content-Type"), b)
	if e != nil {
		return e
	}
	out := session.Outgoing{Text: req.Text, Mode: req.Mode}
	if keys := r.Header.Values(IdempotencyKeyHeader); len(keys) > 0 {
		if len(keys) > 1 || keys[0] == "" {
			return errorf(http.StatusBadRequest, CodeBadRequest, "give one non-empty "+IdempotencyKeyHeader+" header (a new unique value per message, the same one when retrying it), or none")
		}
		out.Key, out.Sender = keys[0], c.token.ID
	}
	if senders := r.Header.Values(NodeSenderHeader); len(senders) > 0 {
		switch {
		case c.node == "":
			return errorf(http.StatusForbidden, CodeForbidden, "only a node of several may send "+NodeSenderHeader+" (it forwards a message sent on the server's behalf): leave the header out")
		case out.Key == "":
			return errorf(http.StatusBadRequest, CodeBadRequest, NodeSenderHeader+" names whose "+IdempotencyKeyHeader+" this is: give the key too")
		case len(senders) > 1 || !validSender.MatchString(senders[0]) || strings.HasPrefix(senders[0], "tok-"):
			return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("%s %q: give one name of lower-case letters, digits and dashes (like github), not a token's id", NodeSenderHeader, clip(strings.Join(senders, ","), 80)))
		}
		out.Sender = senders[0]
	}
	if _, e := s.sessionFor(r, c, r.PathValue("id"), authz.Write); e != nil {
		return e
	}
	m, err := s.cfg.Manager.SendMessage(r.Context(), "", r.PathValue("id"), out)
	if err != nil {
		return fromManagerFor(c, err)
	}
	writeJSON(w, http.StatusAccepted, toMessage(m))
	return nil
}

func (s *Server) cancelTurn(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noBody(w, r); e != nil {
		return e
	}
	if _, e := s.sessionFor(r, c, r.PathValue("id"), authz.Write); e != nil {
		return e
	}
	if err := s.cfg.Manager.Cancel(r.Context(), "", r.PathValue("id")); err != nil {
		return fromManager(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// stopSession ends a session for good (session.Manager.Stop).
func (s *Server) stopSession(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	// An unknown session is a 404 whatever the body says.
	if _, e := s.sessionFor(r, c, r.PathValue("id"), authz.Write); e != nil {
		return e
	}
	b, e := readBody(w, r)
	if e != nil {
		return e
	}
	var req StopRequest
	if e := decodeBody(r.Header.Get("Content-Type"), b, &req, true); e != nil {
		return e
	}
	sr := session.StopRequest{Reason: req.Reason}
	if p := req.PullRequest; p != nil {
		if p.Repo == "" || p.Number <= 0 {
			return invalid([]string{`"pull_request" needs its "repo" and "number"`})
		}
		if p.Merged {
			sr.Event = event.PRMerged{Repo: p.Repo, Number: p.Number, URL: p.URL, Branch: p.Branch, By: p.By, SHA: p.SHA}
		} else {
			sr.Event = event.PRClosed{Repo: p.Repo, Number: p.Number, URL: p.URL, Branch: p.Branch, By: p.By}
		}
	}
	if err := s.cfg.Manager.Stop(r.Context(), "", r.PathValue("id"), sr); err != nil {
		return fromManager(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// eventLog pages through a session's stored events: what `harvest session
// logs` (without -f) prints, and a way to read history without a stream.
func (s *Server) eventLog(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	id := r.PathValue("id")
	var after int64
	limit := 1000
	for k, vs := range r.URL.Query() {
		v := vs[len(vs)-1]
		switch k {
		case "after":
			var e *apiError
			if after, e = parseSeq("after", v); e != nil {
				return e
			}
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 10000 {
				return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("limit %q: give a whole number from 1 to 10000", v))
			}
			limit = n
		default:
			return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("unknown query parameter %q: GET %s takes after and limit", k, r.URL.Path))
		}
	}
	if _, e := s.sessionFor(r, c, id, authz.Read); e != nil {
		return e
	}
	last, err := s.cfg.Store.LastSeq(r.Context(), id)
	if err != nil {
		return fromManager(err)
	}
	evs, err := s.cfg.Store.Events(r.Context(), id, after, limit)
	if err != nil {
		return fromManager(err)
	}
	if evs == nil {
		evs = []event.Event{}
	}
	writeJSON(w, http.StatusOK, EventPage{Events: evs, LastSeq: last})
	return nil
}

func (s *Server) getLock(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	id := r.PathValue("id")
	v, e := s.sessionFor(r, c, id, authz.Read)
	if e != nil {
		return e
	}
	key := session.LockKeyOf(v.Session)
	l, err := s.cfg.Store.GetLock(r.Context(), key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeJSON(w, http.StatusOK, LockInfo{Key: key})
	case err != nil:
		return fromManager(err)
	default:
		writeJSON(w, http.StatusOK, LockInfo{Held: !l.Expires.Before(time.Now()), Key: l.Key, Holder: l.Holder, Expires: l.Expires})
	}
	return nil
}

func (s *Server) unlock(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noBody(w, r); e != nil {
		return e
	}
	if err := s.cfg.Manager.Unlock(r.Context(), r.PathValue("id")); err != nil {
		return fromManager(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noQuery(r); e != nil {
		return e
	}
	b, e := readBody(w, r)
	if e != nil {
		return e
	}
	req, e := decodeToken(r.Header.Get("Content-Type"), b)
	if e != nil {
		return e
	}
	if req.User != "" {
		u, e := s.user(r, req.User)
		if e != nil {
			return invalid([]string{fmt.Sprintf(`"user": no user %s (see GET /v1/users)`, clip(req.User, 80))})
		}
		switch {
		case u.Disabled:
			return invalid([]string{fmt.Sprintf(`"user": user %s is disabled: enable them first (PATCH /v1/users/%s)`, u.ID, u.ID)})
		case req.Admin && u.Role != store.RoleAdmin:
			return invalid([]string{fmt.Sprintf(`"admin": user %s is a %s: only an admin's token may be an admin token`, u.ID, u.Role)})
		}
	}
	secret, t := NewToken(req.Name, req.Admin, time.Now())
	t.User = req.User
	if a := auditOf(r); a != nil {
		a.e.Target = t.ID
		a.addDetail(map[string]any{"name": t.Name, "admin": t.Admin, "user": t.User})
	}
	if err := s.cfg.Store.CreateToken(r.Context(), t); err != nil {
		return fromManager(fmt.Errorf("storing the token: %w", err))
	}
	writeJSON(w, http.StatusCreated, TokenCreated{Token: TokenView(t), Secret: secret})
	return nil
}

// listTokens lists every token, or a user's (?user=ID).
func (s *Server) listTokens(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	var who string
	for k, vs := range r.URL.Query() {
		if k != "user" {
			return errorf(http.StatusBadRequest, CodeBadRequest, fmt.Sprintf("unknown query parameter %q: GET /v1/tokens takes user", clip(k, 40)))
		}
		who = vs[len(vs)-1]
	}
	var (
		ts  []*store.Token
		err error
	)
	if who != "" {
		if _, e := s.user(r, who); e != nil {
			return e
		}
		ts, err = s.cfg.Store.UserTokens(r.Context(), who)
	} else {
		ts, err = s.cfg.Store.ListTokens(r.Context())
	}
	if err != nil {
		return fromManager(err)
	}
	out := TokenList{Tokens: []*wire.Token{}}
	for _, t := range ts {
		out.Tokens = append(out.Tokens, TokenView(t))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteToken(w http.ResponseWriter, r *http.Request, c caller) *apiError {
	if e := noBody(w, r); e != nil {
		return e
	}
	if err := s.cfg.Store.DeleteToken(r.Context(), r.PathValue("id")); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errorf(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no token %s: see GET /v1/tokens", r.PathValue("id")))
		}
		return fromManager(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
