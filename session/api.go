package session

import (
	"errors"
	"fmt"
	"strings"

	"github.com/harvest-dev/harvest/store"
)

// What callers (the HTTP server, tests) see of the session layer. The
// Manager's methods (manager.go) take and return these.

// Delivery modes of a message sent while the agent works.
const (
	ModeQueue     = "queue"     // delivered in order when the turn ends (default)
	ModeInterrupt = "interrupt" // cancels the running turn; starts the next one
)

// RepoSpec is a repository to put in a new session's box.
type RepoSpec struct {
	// Name is the workspace name (/workspace/{Name}); default: the last
	// element of Source.
	Name string `json:"name,omitempty"`
	// Source is a directory on the server (copied, never touched) or a git
	// URL (cloned), as the server's policy allows (Config.Sources).
	Source string `json:"source"`
	// GitHub names a repository on the server's GitHub ("owner/name")
	// instead of Source (Config.Forge).
	GitHub string `json:"github,omitempty"`
	// Ref is a branch or commit to check out after a clone.
	Ref string `json:"ref,omitempty"`
	// Branch, for a GitHub repository, is the branch to work on and push
	// instead of the session's own (harvest/{id}): a pull request's head
	// branch for a session started from it. Set by the GitHub side, never
	// from the wire.
	Branch string `json:"-"`
	// Base, for a GitHub repository, is the branch its pull request
	// targets ("" the default branch, or Ref when it is a branch): a
	// fork's pull request's base. Set by the GitHub side, never from the
	// wire.
	Base string `json:"-"`
}

// CreateRequest is everything a new session can be given.
type CreateRequest struct {
	Title string     `json:"title,omitempty"`
	Repos []RepoSpec `json:"repos"`
	// Prompt is the first message; empty starts an idle session.
	Prompt  string       `json:"prompt,omitempty"`
	Agent   string       `json:"agent,omitempty"`   // default: the builtin agent
	Model   string       `json:"model,omitempty"`   // default: the server's
	Backend string       `json:"backend,omitempty"` // default: the server's (local)
	Mode    string       `json:"mode,omitempty"`    // queue (default) | interrupt
	Limits  store.Limits `json:"limits,omitempty"`
	// Workflow puts the session in its owner's workflow of that name,
	// sharing the workflow's repositories with its other sessions (see
	// collab.go). Empty: the session has a workspace of its own.
	Workflow string `json:"workflow,omitempty"`
	// Collaboration is how, in a workflow: "sequential" (default: one
	// shared workspace, one run at a time) or "parallel" (a copy on a
	// branch of its own; runs concurrently).
	Collaboration string `json:"collaboration,omitempty"`
	// Terminal, with agent "terminal", runs this interactive CLI in the
	// PTY instead of Claude Code's TUI (see CheckTerminal for the rules).
	Terminal *store.TerminalCLI `json:"terminal,omitempty"`
	// Egress narrows the server's egress allowlist for this session's box:
	// hosts (or *.domain wildcards, "registries" for the common package
	// registries) the server allows; [] for none. Absent: the server's.
	Egress *[]string `json:"egress,omitempty"`
	// PR is whether a turn that pushed opens a pull request: "draft" (the
	// default), "ready" or "none". For GitHub repositories.
	PR string `json:"pr,omitempty"`
	// MCPServers are MCP servers for the session's agent, besides the
	// server's and the repositories' (see mcp.go for the precedence and
	// the rules: no credentials, a header is ${secret:NAME}).
	MCPServers []store.MCPServer `json:"mcp_servers,omitempty"`
	// GitHub is the thread that started the session (set by the GitHub
	// side, never from the wire).
	GitHub *store.GitHubLink `json:"-"`
	// PromptKey is the first message's idempotency key, as a later
	// message's Outgoing.Key is, under the session's owner (the GitHub
	// side names the webhook delivery that asked). Never from the wire.
	PromptKey string `json:"-"`
	// ID, when set, is the new session's id (the GitHub side derives it
	// from a webhook delivery, so a delivery processed twice makes one
	// session: the second create is ErrConflict). Never from the wire.
	ID string `json:"-"`
	// Admin is set by the edge (never from the wire) when the caller is
	// the admin: its sources may be any directory but the never-copyable
	// ones, and any git URL (see workspace.Policy).
	Admin bool `json:"-"`
	// User is the user who asks (store.Session.User), set by the edge:
	// the token's user, or the GitHub commenter's. Never from the wire.
	User string `json:"-"`
}

// View is a session as the API shows it: the stored session and the
// messages still waiting for the agent.
type View struct {
	*store.Session
	Queue []*store.Message `json:"queue"`
}

// Errors the API maps to statuses (wrapped with detail).
var (
	// ErrNotFound: no such session (or not visible to the caller): 404.
	ErrNotFound = store.ErrNotFound
	// ErrConflict: the session's state does not allow the call (a message
	// to a stopped session): 409.
	ErrConflict = errors.New("conflict")
	// ErrUnavailable: the server is shutting down: 503.
	ErrUnavailable = errors.New("unavailable")
)

// InputError is a request that cannot be accepted as it is: 400. It lists
// every problem, each saying what to change.
type InputError struct{ Problems []string }

func (e *InputError) Error() string {
	if len(e.Problems) == 1 {
		return e.Problems[0]
	}
	return fmt.Sprintf("%d problems: %s", len(e.Problems), strings.Join(e.Problems, "; "))
}

// IsInput reports whether err is an *InputError.
func IsInput(err error) bool {
	var ie *InputError
	return errors.As(err, &ie)
}
