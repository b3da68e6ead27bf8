package server

import (
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// The API's bodies and codes are package wire's; these names keep the
// server's own code (and its callers) short.
type (
	ErrorBody    = wire.ErrorBody
	ErrorInfo    = wire.ErrorInfo
	Health       = wire.Health
	Readiness    = wire.Readiness
	SessionList  = wire.SessionList
	EventPage    = wire.EventPage
	LockInfo     = wire.LockInfo
	SendRequest  = wire.SendRequest
	StopRequest  = wire.StopRequest
	TokenRequest = wire.TokenRequest
	TokenCreated = wire.TokenCreated
	TokenList    = wire.TokenList
)

// Error codes, the event stream's final event and its codes, and the
// limits of a request: see package wire.
const (
	CodeBadRequest          = wire.CodeBadRequest
	CodeInvalid             = wire.CodeInvalid
	CodeUnauthorized        = wire.CodeUnauthorized
	CodeForbidden           = wire.CodeForbidden
	CodeNotFound            = wire.CodeNotFound
	CodeMethodNotAllowed    = wire.CodeMethodNotAllowed
	CodeConflict            = wire.CodeConflict
	CodeTooLarge            = wire.CodeTooLarge
	CodeMediaType           = wire.CodeMediaType
	CodeUnavailable         = wire.CodeUnavailable
	CodeInsufficientStorage = wire.CodeInsufficientStorage
	CodeOverBudget          = wire.CodeOverBudget
	CodeInternal            = wire.CodeInternal

	StreamErrorEvent  = wire.StreamErrorEvent
	StreamTooSlow     = wire.StreamTooSlow
	StreamUnavailable = wire.StreamUnavailable
	StreamDeleted     = wire.StreamDeleted
	StreamInternal    = wire.StreamInternal

	IdempotencyKeyHeader = wire.IdempotencyKeyHeader
	MaxBody              = wire.MaxBody
)

// The domain's types, as a caller sees them on the wire.

// fromCreate is the session layer's request for a create body.
func fromCreate(r wire.CreateRequest, admin bool) session.CreateRequest {
	req := session.CreateRequest{
		Title: r.Title, Prompt: r.Prompt, Agent: r.Agent, Model: r.Model, Backend: r.Backend, Mode: r.Mode,
		Limits: r.Limits, Workflow: r.Workflow, Collaboration: r.Collaboration, Terminal: r.Terminal,
		Egress: r.Egress, PR: r.PR, MCPServers: r.MCPServers, Admin: admin,
	}
	for _, x := range r.Repos {
		req.Repos = append(req.Repos, session.RepoSpec{Name: x.Name, Source: x.Source, GitHub: x.GitHub, Ref: x.Ref})
	}
	return req
}

// view is what the caller may see of a session view.
func (c caller) view(v *session.View) *wire.View {
	w := &wire.View{Session: c.session(v.Session), Queue: []*wire.Message{}}
	for _, m := range v.Queue {
		w.Queue = append(w.Queue, toMessage(m))
	}
	return w
}

// session is what the caller may see of a session: the admin sees it all;
// a user sees its repositories as they were given, without the host paths
// of their copies or of their resolved sources, and no sandbox handle
// (which names host paths too).
func (c caller) session(s *store.Session) *wire.Session {
	if s == nil {
		return nil
	}
	w := &wire.Session{
		ID: s.ID, Owner: s.Owner, User: s.User, Title: s.Title, State: wire.State(s.State), Agent: s.Agent, Model: s.Model,
		Backend: s.Backend, Limits: s.Limits, LimitsEnforced: s.LimitsEnforced, Terminal: s.Terminal, Egress: s.Egress, MCPServers: s.MCPServers, Mode: s.Mode, PR: s.PR, GitHub: s.GitHub, Environment: s.Environment,
		Collab: wire.Collab{Workflow: s.Collab.Workflow, Mode: s.Collab.Mode, Branch: s.Collab.Branch},
		Turns:  s.Turns, Usage: s.Usage, CostUSD: s.CostUSD, Error: s.Error,
		CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, ActiveAt: s.ActiveAt,
		Repos: make([]wire.Repo, len(s.Repos)),
	}
	admin := c.admin()
	for i, r := range s.Repos {
		w.Repos[i] = wire.Repo{Name: r.Name, Source: r.Source, Ref: r.Ref, Start: r.Start, GitHub: r.GitHub, Branch: r.Branch, Base: r.Base,
			Head: r.Head, Pushed: r.Pushed, PRNumber: r.PRNumber, PRURL: r.PRURL}
		if admin {
			w.Repos[i].Origin, w.Repos[i].Path = r.Origin, r.Path
		}
	}
	if admin {
		w.Sandbox = s.Sandbox
	}
	return w
}

func toMessage(m *store.Message) *wire.Message {
	return &wire.Message{
		ID: m.ID, Session: m.Session, Seq: m.Seq, Text: m.Text, Mode: m.Mode, State: wire.MessageState(m.State),
		Turn: m.Turn, CreatedAt: m.CreatedAt, DeliveredAt: m.DeliveredAt,
	}
}

// TokenView is a token as the API shows it.
func TokenView(t *store.Token) *wire.Token {
	return &wire.Token{ID: t.ID, Name: t.Name, Admin: t.Admin, CreatedAt: t.CreatedAt, User: t.User}
}
