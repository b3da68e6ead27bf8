// Package store is where Harvest keeps what must survive a restart:
// sessions, their messages, their events, locks and API tokens.
//
// Store is the contract; store/sqlite implements it (the default: one file,
// nothing to run), and a PostgreSQL store will implement the same interface
// and pass the same suite (store/storetest). Everything above the store
// (journal, session, server) talks only to this interface.
//
// # Rules every implementation follows
//
//   - A write has happened when the call returns nil: it is committed and
//     survives a crash (SQLite: WAL, synchronous=FULL for everything; the
//     journal makes events cheap by committing them in batches).
//   - Calls are safe for concurrent use.
//   - Every blocking call takes a context; a cancelled context aborts the
//     call, and a call that returns an error has written nothing.
//   - Missing rows are ErrNotFound (wrapped, with what was missing).
//   - Event seqs are unique per session: appending a seq that exists is
//     ErrConflict, so two writers can never both believe they own a seq.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/harvest-dev/harvest/event"
)

// Errors callers branch on; implementations wrap them with detail.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
	// ErrLocked: a lock is held by someone else (see LockError).
	ErrLocked = errors.New("locked")
)

// State is a session's state (the state machine is drawn in package session).
type State string

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

// Live reports whether a session in state s has (or is getting) a runner:
// everything except suspended, stopped and failed.
func (s State) Live() bool {
	switch s {
	case StateSuspended, StateStopped, StateFailed:
		return false
	}
	return true
}

// Ended reports whether s is final.
func (s State) Ended() bool { return s == StateStopped || s == StateFailed }

// Repo is one repository of a session, at /workspace/{Name} in its box.
type Repo struct {
	Name string `json:"name"`
	// Source is a local path or a git URL the workspace was made from.
	Source string `json:"source"`
	// Ref is the branch or commit checked out ("" for the default).
	Ref string `json:"ref,omitempty"`
	// Path is the workspace directory on the host.
	Path string `json:"path,omitempty"`
}

// Limits bound a session. Zero values mean the defaults of package session.
type Limits struct {
	IdleTimeout  time.Duration `json:"idle_timeout,omitempty"`
	MaxLifetime  time.Duration `json:"max_lifetime,omitempty"`
	TurnWatchdog time.Duration `json:"turn_watchdog,omitempty"`
	MemoryBytes  int64         `json:"memory_bytes,omitempty"`
	// DiskBytes and DiskInodes size the session's disk: its workspaces, and
	// its box's /tmp and HOME (package sandbox/disk).
	DiskBytes  int64   `json:"disk_bytes,omitempty"`
	DiskInodes int64   `json:"disk_inodes,omitempty"`
	MaxSteps   int     `json:"max_steps,omitempty"`
	BudgetUSD  float64 `json:"budget_usd,omitempty"`
}

// Session is a conversation with an agent on one or more repos.
type Session struct {
	ID string `json:"id"`
	// Owner is the id of the API token that created it.
	Owner   string `json:"owner"`
	Title   string `json:"title,omitempty"`
	State   State  `json:"state"`
	Agent   string `json:"agent"`
	Model   string `json:"model,omitempty"`
	Backend string `json:"backend"`
	Repos   []Repo `json:"repos"`
	Limits  Limits `json:"limits"`
	// Collab is how the session shares a workflow's workspace; zero: it
	// has a workspace of its own.
	Collab Collab `json:"collab,omitzero"`
	// Terminal, for the terminal agent, is the interactive CLI it runs in
	// the PTY; nil runs Claude Code's TUI.
	Terminal *TerminalCLI `json:"terminal,omitempty"`
	// Egress, when not nil, narrows the server's egress allowlist for this
	// session's box: those hosts only, none when empty. Nil: the server's.
	Egress *[]string `json:"egress,omitempty"`
	// Mode is how a message sent while the agent works is delivered:
	// "queue" (after the turn) or "interrupt" (cancels the turn).
	Mode string `json:"mode"`
	// Sandbox is the persisted sandbox.Handle while a box exists, else nil.
	Sandbox []byte `json:"sandbox,omitempty"`
	// AgentState is the agent's saved conversation (agent.Agent.State).
	AgentState []byte `json:"-"`
	// Turns counts turns started; the current turn id is "t{Turns}".
	Turns   int         `json:"turns"`
	Usage   event.Usage `json:"usage"`
	CostUSD float64     `json:"cost_usd"`
	// Error says why a failed session failed.
	Error     string    `json:"error,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// ActiveAt is the last time a message arrived or a turn ended (idle
	// timeout counts from it).
	ActiveAt time.Time `json:"active_at"`
}

// Collaboration modes of sessions sharing a workflow's workspace (seed 004).
const (
	// Sequential: the sessions work in one workspace, on one branch, one
	// run at a time (the workflow lock).
	Sequential = "sequential"
	// Parallel: each session works on its own copy of the workflow's
	// repositories, on a branch of its own; they run concurrently.
	Parallel = "parallel"
)

// Collab places a session in a workflow.
type Collab struct {
	Workflow string `json:"workflow"`
	Mode     string `json:"mode"` // Sequential | Parallel
	// Branch is a parallel session's own branch, made from the working
	// branch when its workspace is copied.
	Branch string `json:"branch,omitempty"`
}

// TerminalCLI is a generic interactive CLI for the terminal agent, and how
// it says a turn is over.
type TerminalCLI struct {
	// Command and its arguments, looked up in the box's PATH.
	Command []string `json:"command"`
	// DonePattern is a regular expression (Go syntax) matching the end of
	// what the CLI printed since the input, once it is ready for more:
	// typically its prompt.
	DonePattern string `json:"done_pattern,omitempty"`
	// ReadyPattern matches its output once it is ready for the first input
	// (default DonePattern).
	ReadyPattern string `json:"ready_pattern,omitempty"`
	// IdleTimeout ends a turn whose output has been quiet this long (the
	// fallback; default 30 min).
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
}

// MessageState is where a user message is.
type MessageState string

const (
	MessageQueued    MessageState = "queued"
	MessageDelivered MessageState = "delivered"
	// MessageDropped: the session ended (deleted, failed) before delivery.
	MessageDropped MessageState = "dropped"
)

// Message is a user message to a session.
type Message struct {
	ID      string `json:"id"`
	Session string `json:"session"`
	// Seq orders a session's messages (1, 2, ...), assigned by AddMessage.
	Seq   int64        `json:"seq"`
	Text  string       `json:"text"`
	Mode  string       `json:"mode"`
	State MessageState `json:"state"`
	// Turn is the turn that took it, once delivered.
	Turn        string    `json:"turn,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	DeliveredAt time.Time `json:"delivered_at,omitzero"`
}

// SessionFilter selects sessions for ListSessions; zero fields match all.
type SessionFilter struct {
	Owner  string
	States []State
	// Workflow matches the sessions of a workflow (Collab.Workflow).
	Workflow string
	// UpdatedBefore matches sessions last updated before it.
	UpdatedBefore time.Time
	// Limit bounds the result (0: no bound); newest first.
	Limit int
}

// Lock is a named lease (a session's sequential-collaboration lock).
type Lock struct {
	Key     string    `json:"key"`
	Holder  string    `json:"holder"`
	Expires time.Time `json:"expires"`
}

// LockError is ErrLocked with the current holder.
type LockError struct{ Lock Lock }

func (e *LockError) Error() string {
	return "locked by " + e.Lock.Holder + " until " + e.Lock.Expires.UTC().Format(time.RFC3339)
}
func (e *LockError) Unwrap() error { return ErrLocked }

// Token is an API token. Only its SHA-256 is stored.
type Token struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Hash      []byte    `json:"-"`
	Admin     bool      `json:"admin"`
	CreatedAt time.Time `json:"created_at"`
}

// Store keeps sessions, messages, events, locks and tokens.
type Store interface {
	// CreateSession stores a new session (ID set by the caller) and, if
	// first is not nil, its first message, in one transaction.
	CreateSession(ctx context.Context, s *Session, first *Message) error
	GetSession(ctx context.Context, id string) (*Session, error)
	ListSessions(ctx context.Context, f SessionFilter) ([]*Session, error)
	// UpdateSession reads the session, calls fn on it and writes it back in
	// one transaction (UpdatedAt is set). An error from fn aborts.
	UpdateSession(ctx context.Context, id string, fn func(*Session) error) (*Session, error)
	// DeleteSession removes the session with its messages and events.
	DeleteSession(ctx context.Context, id string) error

	// AddMessage stores a message (ID set by the caller), assigning its Seq.
	AddMessage(ctx context.Context, m *Message) error
	// Messages lists a session's messages in Seq order, only those in the
	// given states (all when none given).
	Messages(ctx context.Context, session string, states ...MessageState) ([]*Message, error)
	// SetMessageState moves a message to state (with the turn that took it).
	SetMessageState(ctx context.Context, session, id string, state MessageState, turn string) error

	// AppendEvents stores events whose Seq the caller assigned (the journal
	// does), all in one transaction: all or none. A seq already stored is
	// ErrConflict.
	AppendEvents(ctx context.Context, evs []event.Event) error
	// Events returns a session's events with Seq > after, in order, at most
	// limit (0: all).
	Events(ctx context.Context, session string, after int64, limit int) ([]event.Event, error)
	// LastSeq is the highest stored seq of a session (0 when none).
	LastSeq(ctx context.Context, session string) (int64, error)

	// AcquireLock takes key for holder until now+ttl: it succeeds if the key
	// is free, expired, or already held by holder (which renews it);
	// otherwise it fails with a *LockError.
	AcquireLock(ctx context.Context, key, holder string, ttl time.Duration) (Lock, error)
	// ReleaseLock frees key if holder holds it (no error otherwise).
	ReleaseLock(ctx context.Context, key, holder string) error
	// ForceUnlock frees key whoever holds it.
	ForceUnlock(ctx context.Context, key string) error
	GetLock(ctx context.Context, key string) (Lock, error)

	CreateToken(ctx context.Context, t *Token) error
	// TokenByHash finds a token by the SHA-256 of its secret.
	TokenByHash(ctx context.Context, hash []byte) (*Token, error)
	ListTokens(ctx context.Context) ([]*Token, error)
	DeleteToken(ctx context.Context, id string) error

	Close() error
}
