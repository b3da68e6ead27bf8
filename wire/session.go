package wire

import (
	"time"

	"github.com/harvest-dev/harvest/event"
)

// State is a session's state (drawn in package session's doc).
type State string

// The states.
const (
	StatePending      State = "pending"
	StateProvisioning State = "provisioning"
	StateIdle         State = "idle"
	StateWorking      State = "working"
	StateWaiting      State = "waiting"
	StateCancelling   State = "cancelling"
	StateSuspended    State = "suspended"
	StateStopped      State = "stopped"
	StateFailed       State = "failed"
)

// Ended reports whether s is final.
func (s State) Ended() bool { return s == StateStopped || s == StateFailed }

// RepoSpec is a repository to put in a new session's box.
type RepoSpec struct {
	// Name is the workspace name (/workspace/{Name}); default: the last
	// element of Source.
	Name string `json:"name,omitempty"`
	// Source is a directory on the server (copied, never touched) or a git
	// URL (cloned), as the server's policy allows.
	Source string `json:"source"`
	// GitHub names a repository on the server's GitHub ("owner/name")
	// instead of Source: it is cloned from Harvest's mirror onto a branch
	// of the session's, and the box's git push goes through Harvest.
	GitHub string `json:"github,omitempty"`
	// Ref is a branch or commit to check out after a clone.
	Ref string `json:"ref,omitempty"`
}

// CreateRequest is the body of POST /v1/sessions.
type CreateRequest struct {
	Title string     `json:"title,omitempty"`
	Repos []RepoSpec `json:"repos"`
	// Prompt is the first message; empty starts an idle session.
	Prompt  string `json:"prompt,omitempty"`
	Agent   string `json:"agent,omitempty"`   // default: the builtin agent
	Model   string `json:"model,omitempty"`   // default: the server's
	Backend string `json:"backend,omitempty"` // default: the server's (local)
	Mode    string `json:"mode,omitempty"`    // queue (default) | interrupt
	Limits  Limits `json:"limits,omitempty"`
	// Workflow puts the session in its owner's workflow of that name;
	// Collaboration is how: "sequential" (default) or "parallel".
	Workflow      string `json:"workflow,omitempty"`
	Collaboration string `json:"collaboration,omitempty"`
	// Terminal, with agent "terminal", runs this interactive CLI in the
	// PTY instead of Claude Code's TUI.
	Terminal *TerminalCLI `json:"terminal,omitempty"`
	// Egress narrows the server's egress allowlist for this session's box;
	// [] for none. Absent: the server's.
	Egress *[]string `json:"egress,omitempty"`
	// PR is whether a turn that pushed commits opens a pull request:
	// "draft" (the default), "ready" or "none". For GitHub repositories.
	PR string `json:"pr,omitempty"`
	// MCPServers are MCP servers for this session's agent, added to the
	// server's (whose names they may not reuse) and winning over a
	// repository's .mcp.json of the same name.
	MCPServers []MCPServer `json:"mcp_servers,omitempty"`
}

// Repo is one repository of a session, at /workspace/{Name} in its box.
type Repo struct {
	Name string `json:"name"`
	// Source is as the session's creator gave it.
	Source string `json:"source"`
	// Origin is what Source resolved to on the server (admin token only).
	Origin string `json:"origin,omitempty"`
	Ref    string `json:"ref,omitempty"`
	// Path is the workspace directory on the server (admin token only).
	Path string `json:"path,omitempty"`
	// Start is the commit the workspace began at: the base of the
	// session's changes.
	Start string `json:"start,omitempty"`
	// GitHub is "owner/name" for a repository from GitHub; Branch the
	// session's branch on it, Base the branch its pull request targets,
	// Head the last commit seen on Branch, Pushed the last one pushed,
	// PRNumber and PRURL its pull request once opened.
	GitHub   string `json:"github,omitempty"`
	Branch   string `json:"branch,omitempty"`
	Base     string `json:"base,omitempty"`
	Head     string `json:"head,omitempty"`
	Pushed   string `json:"pushed,omitempty"`
	PRNumber int    `json:"pr_number,omitempty"`
	PRURL    string `json:"pr_url,omitempty"`
}

// GitHubLink is where on GitHub a session was started from, and the
// conversation it keeps there.
type GitHubLink struct {
	// Repo ("owner/name") and Number are the issue or pull request whose
	// comment (or label, or assignment) started the session; IsPR: a pull
	// request (the session works on its head branch).
	Repo   string `json:"repo"`
	Number int    `json:"number"`
	IsPR   bool   `json:"is_pr,omitempty"`
	// Requester is who asked (the author of the session's commits).
	Requester     string `json:"requester"`
	RequesterID   int64  `json:"requester_id,omitempty"`
	RequesterName string `json:"requester_name,omitempty"`
	// Progress is the id of the comment Harvest edits as the session goes.
	Progress int64 `json:"progress,omitempty"`
	// FixAttempts counts failed check suites sent to the session.
	FixAttempts int `json:"fix_attempts,omitempty"`
	// Fork ("owner/name") and ForkBranch, for a pull request whose branch
	// is in a fork: where its branch is. Harvest cannot push there: the
	// session works on a branch of Repo started from the pull request's
	// head and opens a pull request of its own that builds on it.
	Fork       string `json:"fork,omitempty"`
	ForkBranch string `json:"fork_branch,omitempty"`
}

// Collaboration modes of a workflow's sessions (Collab.Mode).
const (
	Sequential = "sequential" // one workspace, one run at a time
	Parallel   = "parallel"   // a copy and a branch each, runs at once
)

// Collab places a session in a workflow.
type Collab struct {
	Workflow string `json:"workflow"`
	Mode     string `json:"mode"` // sequential | parallel
	// Branch is a parallel session's own branch.
	Branch string `json:"branch,omitempty"`
}

// Session is a conversation with an agent on one or more repositories.
type Session struct {
	ID string `json:"id"`
	// Owner is the id of the API token that created it ("github" for a
	// session a GitHub webhook started).
	Owner string `json:"owner"`
	// User is the id of the user who caused it (GET /v1/users/{id}):
	// the owner token's user, or the GitHub commenter's.
	User    string `json:"user,omitempty"`
	Title   string `json:"title,omitempty"`
	State   State  `json:"state"`
	Agent   string `json:"agent"`
	Model   string `json:"model,omitempty"`
	Backend string `json:"backend"`
	Repos   []Repo `json:"repos"`
	Limits  Limits `json:"limits"`
	// LimitsEnforced says which of Limits its box is held to; nil until
	// the session's first box started.
	LimitsEnforced *Enforcement `json:"limits_enforced,omitempty"`
	Collab         Collab       `json:"collab,omitzero"`
	Terminal       *TerminalCLI `json:"terminal,omitempty"`
	Egress         *[]string    `json:"egress,omitempty"`
	// MCPServers: see CreateRequest.MCPServers.
	MCPServers []MCPServer `json:"mcp_servers,omitempty"`
	Mode       string      `json:"mode"`
	// PR: see CreateRequest.PR ("" for no GitHub repository).
	PR string `json:"pr,omitempty"`
	// GitHub, when not nil, is the GitHub thread the session answers.
	GitHub *GitHubLink `json:"github,omitempty"`
	// Environment is the prepared environment the session started from.
	Environment string `json:"environment,omitempty"`
	// Sandbox is the persisted sandbox handle while a box exists (admin
	// token only).
	Sandbox []byte `json:"sandbox,omitempty"`
	// Turns counts turns started; the current turn id is "t{Turns}".
	Turns   int         `json:"turns"`
	Usage   event.Usage `json:"usage"`
	CostUSD float64     `json:"cost_usd"`
	// Error says why a failed session failed.
	Error     string    `json:"error,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// ActiveAt is the last time a message arrived or a turn ended.
	ActiveAt time.Time `json:"active_at"`
}

// View is a session with the messages still waiting for its agent: the
// body of POST /v1/sessions and GET /v1/sessions/{id}.
type View struct {
	*Session
	Queue []*Message `json:"queue"`
	// Access is what the caller may do with it: "read", or "write"
	// (send, cancel, stop, delete, open its shell). A page shows only the
	// controls it may use; the server refuses the others anyway.
	Access string `json:"access,omitempty"`
}

// MessageState is where a user message is: queued, delivered, dropped.
type MessageState string

// Message is a user message to a session.
type Message struct {
	ID      string `json:"id"`
	Session string `json:"session"`
	// Seq orders a session's messages (1, 2, ...).
	Seq   int64        `json:"seq"`
	Text  string       `json:"text"`
	Mode  string       `json:"mode"`
	State MessageState `json:"state"`
	// Turn is the turn that took it, once delivered.
	Turn        string    `json:"turn,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	DeliveredAt time.Time `json:"delivered_at,omitzero"`
}

// Environment states.
const (
	EnvBuilding = "building"
	EnvReady    = "ready"
	EnvFailed   = "failed"
	EnvRemoved  = "removed" // collected: its files are gone
)

// Environment is a repository's prepared environment: its checkout at a
// commit after its setup ran, with HOME and its caches, captured for one
// sandbox backend (package environment).
type Environment struct {
	ID string `json:"id"`
	// Repo names the repository ("github:owner/name", or the resolved
	// source of another); Name is its workspace name.
	Repo string `json:"repo"`
	Name string `json:"name"`
	// Ref is the branch it follows; Commit the one it was built at.
	Ref    string `json:"ref,omitempty"`
	Commit string `json:"commit,omitempty"`
	// Fingerprint is what decides a rebuild (repository, commit, scripts,
	// base image, backend, Harvest version).
	Fingerprint string `json:"fingerprint"`
	Backend     string `json:"backend"`
	State       string `json:"state"`
	// Detected says what setup ran when the repository has no
	// .harvest/setup.sh.
	Detected []string `json:"detected,omitempty"`
	// Error says why a failed build failed.
	Error     string    `json:"error,omitempty"`
	SizeBytes int64     `json:"size_bytes,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// BuiltAt is when it became ready (or failed).
	BuiltAt time.Time `json:"built_at,omitzero"`
	// User is the id of the user who asked for it ("" for one prepared
	// before users existed).
	User string `json:"user,omitempty"`
}

// PrepareRequest is the body of POST /v1/environments.
type PrepareRequest struct {
	// Repo is the repository, as in a session's repos[]: a source or
	// GitHub's owner/name, with an optional ref and name.
	Repo RepoSpec `json:"repo"`
	// Backend it is for (default: the server's).
	Backend string `json:"backend,omitempty"`
	// Force builds even when the ready one has the same fingerprint.
	Force bool `json:"force,omitempty"`
}

// EnvironmentList is the body of GET /v1/environments.
type EnvironmentList struct {
	Environments []*Environment `json:"environments"`
}
