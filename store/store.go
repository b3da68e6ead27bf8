// Package store is where Harvest keeps what must survive a restart:
// sessions, their messages, their events, locks, users (people.go: who
// caused what, their identities elsewhere and their API tokens), the
// audit log, webhook deliveries, (sealed) secrets and the repositories'
// memory.
//
// Store is the contract; store/sqlite implements it (the default: one file,
// nothing to run) and store/postgres (a database server several nodes
// share), both with the one implementation of store/sqlstore over their
// dialects, and both pass the same suite (store/storetest). Everything
// above the store (journal, session, server) talks only to this interface.
//
// # Rules every implementation follows
//
//   - A write has happened when the call returns nil: it is committed and
//     survives a crash (SQLite: WAL, synchronous=FULL for everything; the
//     journal makes events cheap by committing them in batches).
//   - Calls are safe for concurrent use.
//   - Every blocking call takes a context; a cancelled context aborts the
//     call, and a call that returns an error has written nothing.
//   - A context's deadline cuts the call even when the database hangs
//     (a frozen server, a dropped link, a file another process holds
//     locked): pgx closes the connection at the deadline and the pool
//     makes a new one; SQLite's driver interrupts its busy wait. An API
//     request's calls carry a budget (budget.go: WithBudget, Bounded):
//     a call the database does not answer within it is a *TimeoutError,
//     which is ErrUnavailable (TestBudgetFrozenServer,
//     TestBudgetSQLiteLocked).
//   - Missing rows are ErrNotFound (wrapped, with what was missing).
//   - Event seqs are unique per session: appending a seq that exists is
//     ErrConflict, so two writers can never both believe they own a seq.
//   - When several nodes share the store, a session's owner holds its
//     lease (leases.go), and its writes that two owners would corrupt —
//     its events, its row, taking its messages — are fenced by the lease's
//     epoch: a node that lost the lease gets ErrLeaseLost and writes
//     nothing, whatever the clocks say (leases.go lists the fenced writes
//     and says why).
package store

import (
	"context"
	"errors"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/wire"
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
	// Source is the local path or git URL the workspace was made from, as
	// the caller gave it.
	Source string `json:"source"`
	// Origin is what Source resolved to on the server (a path with its
	// symlinks followed, or the URL): what is copied. A host path: only
	// the admin sees it. Empty in rows older than it: Source is.
	Origin string `json:"origin,omitempty"`
	// Ref is the branch or commit checked out ("" for the default).
	Ref string `json:"ref,omitempty"`
	// Path is the workspace directory on the host (only the admin sees it).
	Path string `json:"path,omitempty"`
	// Start is the commit the workspace was at when the session began
	// (read in its first box, after the checkout): the base of the
	// session's changes (GET /v1/sessions/{id}/diff). Empty in rows older
	// than it, and for a repository that had no commit.
	Start string `json:"start,omitempty"`

	// GitHub is "owner/name" for a repository from GitHub: its workspace
	// is a clone of Harvest's mirror, and its git goes through Harvest's
	// git endpoint. The fields below are for such a repository.
	GitHub string `json:"github,omitempty"`
	// Branch is the branch the session works and pushes on.
	Branch string `json:"branch,omitempty"`
	// Base is the branch a pull request targets.
	Base string `json:"base,omitempty"`
	// Head is the last commit of Branch Harvest has seen in the box (its
	// start commit until the agent commits); Pushed the last one pushed.
	Head   string `json:"head,omitempty"`
	Pushed string `json:"pushed,omitempty"`
	// PRNumber and PRURL are the session's pull request, once opened.
	PRNumber int    `json:"pr_number,omitempty"`
	PRURL    string `json:"pr_url,omitempty"`
	// From, when set, is the commit Branch started from that its base
	// lacks and that is not the session's work: a fork's pull request's
	// head (refs/pull/N/head). Its commits are the contributor's; only
	// those after it count as the session's (pushed, listed, a pull
	// request opened for them).
	From string `json:"from,omitempty"`
}

// Pull request modes (Session.PR).
const (
	PRDraft = "draft" // the default
	PRReady = "ready"
	PRNone  = "none"
)

// Limits bound a session (zero values: the defaults of package session);
// TerminalCLI is a terminal agent's CLI. They are value types the API
// carries as they are, so they are the wire's (package wire, which also
// writes their durations as strings like "10m").
type (
	Limits      = wire.Limits
	Enforcement = wire.Enforcement
	TerminalCLI = wire.TerminalCLI
	MCPServer   = wire.MCPServer
	GitHubLink  = wire.GitHubLink
	Environment = wire.Environment
)

// Session is a conversation with an agent on one or more repos.
type Session struct {
	ID string `json:"id"`
	// Owner is the id of the API token that created it (ghbot.Owner,
	// "github", for a session a webhook started). Its workflow's
	// directories and locks, its user secrets and its memory are the
	// token's.
	Owner string `json:"owner"`
	// User is the user who caused it (people.go): the owner token's, or
	// the GitHub commenter's; "" when none is known (a session of a
	// token deleted before users existed).
	User    string `json:"user,omitempty"`
	Title   string `json:"title,omitempty"`
	State   State  `json:"state"`
	Agent   string `json:"agent"`
	Model   string `json:"model,omitempty"`
	Backend string `json:"backend"`
	Repos   []Repo `json:"repos"`
	Limits  Limits `json:"limits"`
	// LimitsEnforced is which of Limits the session's box is (or its last
	// box was) held to, set when a box starts; nil before the first.
	LimitsEnforced *Enforcement `json:"limits_enforced,omitempty"`
	// Collab is how the session shares a workflow's workspace; zero: it
	// has a workspace of its own.
	Collab Collab `json:"collab,omitzero"`
	// Terminal, for the terminal agent, is the interactive CLI it runs in
	// the PTY; nil runs Claude Code's TUI.
	Terminal *TerminalCLI `json:"terminal,omitempty"`
	// Egress, when not nil, narrows the server's egress allowlist for this
	// session's box: those hosts only, none when empty. Nil: the server's.
	Egress *[]string `json:"egress,omitempty"`
	// MCPServers are the MCP servers the session's creator gave its agent
	// (their headers name secrets, ${secret:NAME}, resolved when the
	// agent starts).
	MCPServers []MCPServer `json:"mcp_servers,omitempty"`
	// Mode is how a message sent while the agent works is delivered:
	// "queue" (after the turn) or "interrupt" (cancels the turn).
	Mode string `json:"mode"`
	// PR is whether a turn that pushed opens a pull request: PRDraft,
	// PRReady or PRNone ("" for a session on no GitHub repository).
	PR string `json:"pr,omitempty"`
	// GitHub, when not nil, is the GitHub thread the session answers.
	GitHub *GitHubLink `json:"github,omitempty"`
	// Environment is the prepared environment the session started from
	// ("" for none): its HOME is the session's HOME's lower layer, so it
	// is kept while the session lives.
	Environment string `json:"environment,omitempty"`
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
	// Key is the idempotency key its sender gave ("" for none), and
	// KeyOwner who that sender is (an API token id): a session has at most
	// one message per (KeyOwner, Key), so a send retried with the same key
	// finds the first one instead of storing a second (MessageByKey).
	Key      string `json:"-"`
	KeyOwner string `json:"-"`
	// RequestHash identifies what was sent with Key (the text and the mode
	// as given), so a different request reusing a key can be told apart
	// from a retry.
	RequestHash []byte `json:"-"`
}

// StateCount is how many sessions are in a state (CountSessions), and
// the disk they were promised (the sum of their limits.disk_bytes).
type StateCount struct {
	State     State
	Sessions  int
	DiskBytes int64
}

// SessionFilter selects sessions for ListSessions; zero fields match all.
type SessionFilter struct {
	Owner string
	// User matches the sessions its user caused (Session.User).
	User   string
	States []State
	// Workflow matches the sessions of a workflow (Collab.Workflow).
	Workflow string
	// GitHubRepo and GitHubNumber match the sessions started from that
	// issue or pull request (GitHubLink.Repo, compared without regard to
	// case, and Number).
	GitHubRepo   string
	GitHubNumber int
	// UpdatedBefore matches sessions last updated before it.
	UpdatedBefore time.Time
	// Limit bounds the result (0: no bound); newest first.
	Limit int
	// After continues a list where a page ended: only sessions after this
	// one in the list's order (older, or as old with a smaller id). Keyset
	// pagination on (created_at, id), which both stores index: a page costs
	// the same wherever it starts, and sessions created meanwhile neither
	// shift nor repeat the pages after it.
	After *SessionKey
}

// SessionKey is a session's place in a list, newest first: its CreatedAt as
// the store holds it, then its ID.
type SessionKey struct {
	CreatedAt time.Time
	ID        string
}

// KeyOf is s's place in a list (SessionFilter.After).
func KeyOf(s *Session) SessionKey { return SessionKey{CreatedAt: s.CreatedAt, ID: s.ID} }

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

// Secret is a value kept for sessions' environments (package secrets
// seals and opens it; the store sees only its ciphertext).
type Secret struct {
	// Scope is whose it is: "repo:owner/name" (lower case) or
	// "user:<token id>".
	Scope string `json:"scope"`
	// Name is the environment variable it becomes.
	Name string `json:"name"`
	// Ciphertext is the sealed value; KeyID names the key that sealed it.
	Ciphertext []byte `json:"-"`
	KeyID      string `json:"key_id"`
	// Session: also given to the sessions' environments (not only to
	// setup scripts).
	Session bool `json:"session"`
	// SetBy is the id of the API token that last set it, SetByUser its
	// user ("" when set before users existed).
	SetBy     string    `json:"set_by"`
	SetByUser string    `json:"set_by_user,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Secrets is the part of a Store package secrets uses.
type Secrets interface {
	// PutSecret stores s (Scope, Name, Ciphertext and KeyID not empty),
	// replacing the secret of the same scope and name, whose CreatedAt it
	// keeps; a zero UpdatedAt is now. s is updated to what was stored. It
	// records the context's audit entry in its transaction (WithAudit).
	PutSecret(ctx context.Context, s *Secret) error
	// GetSecret reads one secret, or ErrNotFound.
	GetSecret(ctx context.Context, scope, name string) (*Secret, error)
	// ListSecrets lists the secrets of the given scopes (every secret when
	// none is given), by scope then name.
	ListSecrets(ctx context.Context, scopes ...string) ([]*Secret, error)
	// DeleteSecret removes one secret, or fails with ErrNotFound. It
	// records the context's audit entry in its transaction (WithAudit).
	DeleteSecret(ctx context.Context, scope, name string) error
}

// Delivery states.
const (
	DeliveryPending = "pending" // stored, not yet processed
	DeliveryDone    = "done"    // processed (Result says what it did)
	DeliveryFailed  = "failed"  // processing failed for good (Result says why)
)

// Delivery is a webhook delivery (GitHub's), stored before it is
// acknowledged and processed afterwards, exactly once.
type Delivery struct {
	// ID is the sender's delivery id (X-GitHub-Delivery): a redelivery
	// has the same one, and is not stored twice.
	ID         string    `json:"id"`
	Event      string    `json:"event"`
	Payload    []byte    `json:"-"`
	ReceivedAt time.Time `json:"received_at"`
	State      string    `json:"state"`
	// Attempts counts processing attempts begun (since the last replay).
	Attempts int       `json:"attempts"`
	Result   string    `json:"result,omitempty"`
	DoneAt   time.Time `json:"done_at,omitzero"`
	// NotBefore is when a pending delivery is due (zero: now): after a
	// failed attempt, or a window of GitHub's limits.
	NotBefore time.Time `json:"not_before,omitzero"`
	// Replays counts the times a failed delivery was replayed.
	Replays int `json:"replays,omitempty"`
}

// DeliveryFilter selects deliveries to list, newest first; zero fields
// match all.
type DeliveryFilter struct {
	State string // DeliveryPending, DeliveryDone or DeliveryFailed
	Limit int    // 0: 100
}

// GitHubMark is a window of GitHub's limits (or a fact of an
// installation) shared by the nodes: nothing is sent for Scope before
// Until (package gh's Mark).
type GitHubMark struct {
	Scope string    `json:"scope"`
	Kind  string    `json:"kind"`
	Until time.Time `json:"until"`
	Note  string    `json:"note,omitempty"`
}

// GitHubMarks is the part of a Store where the nodes share what they
// learn of GitHub's limits.
type GitHubMarks interface {
	// GitHubMarks lists scope's marks not yet ended.
	GitHubMarks(ctx context.Context, scope string) ([]GitHubMark, error)
	// PutGitHubMark records m, keeping a later Until already recorded for
	// its scope and kind (and drops the scope's marks that have ended).
	PutGitHubMark(ctx context.Context, m GitHubMark) error
	// DeleteGitHubMark removes a mark (no error if there is none).
	DeleteGitHubMark(ctx context.Context, scope, kind string) error
}

// Deliveries is the part of a Store the webhook receiver uses: a durable
// queue of deliveries.
type Deliveries interface {
	// AddDelivery stores d as pending (a zero ReceivedAt is now), or as
	// done with its Result when d.State is DeliveryDone (a delivery
	// known at its receipt to need nothing: one write, never queued). An
	// id already stored is ErrConflict: a redelivery.
	AddDelivery(ctx context.Context, d *Delivery) error
	// PendingDeliveries lists pending deliveries, oldest first, at most
	// limit (0: all).
	PendingDeliveries(ctx context.Context, limit int) ([]*Delivery, error)
	// BeginDelivery counts an attempt at a pending delivery and returns
	// it; one no longer pending is ErrConflict.
	BeginDelivery(ctx context.Context, id string) (*Delivery, error)
	// FinishDelivery records a pending delivery's end (DeliveryDone or
	// DeliveryFailed) with what it did.
	FinishDelivery(ctx context.Context, id, state, result string) error
	// RetryDelivery makes a pending delivery due at notBefore, with why
	// its last attempt failed as its result.
	RetryDelivery(ctx context.Context, id string, notBefore time.Time, why string) error
	// DeferDelivery makes a pending delivery due at notBefore and gives
	// back the attempt BeginDelivery counted: it was held back (one of
	// GitHub's windows), not failed.
	DeferDelivery(ctx context.Context, id string, notBefore time.Time, why string) error
	// ReplayDelivery makes a failed delivery pending again, due now, with
	// no attempts, and counts the replay; one that is not failed is
	// ErrConflict (so of two replays at once, one wins).
	ReplayDelivery(ctx context.Context, id string) (*Delivery, error)
	// ListDeliveries lists deliveries, newest first, payloads included.
	ListDeliveries(ctx context.Context, f DeliveryFilter) ([]*Delivery, error)
	GetDelivery(ctx context.Context, id string) (*Delivery, error)
	// PruneDeliveries deletes finished deliveries received before t and
	// returns how many.
	PruneDeliveries(ctx context.Context, before time.Time) (int, error)
}

// Environment states (wire's).
const (
	EnvBuilding = wire.EnvBuilding
	EnvReady    = wire.EnvReady
	EnvFailed   = wire.EnvFailed
	EnvRemoved  = wire.EnvRemoved
)

// EnvironmentFilter selects environments; zero fields match all.
type EnvironmentFilter struct {
	Repo, Backend string
	States        []string
}

// Environments is the part of a Store the environment builder uses.
type Environments interface {
	// CreateEnvironment stores a new environment (ID set by the caller);
	// an ID that exists is ErrConflict.
	CreateEnvironment(ctx context.Context, e *Environment) error
	GetEnvironment(ctx context.Context, id string) (*Environment, error)
	// ListEnvironments lists, newest first.
	ListEnvironments(ctx context.Context, f EnvironmentFilter) ([]*Environment, error)
	// UpdateEnvironment reads, changes (fn) and writes one in a transaction.
	UpdateEnvironment(ctx context.Context, id string, fn func(*Environment) error) (*Environment, error)
}

// EventStore is the part of a Store the journal uses: a session's events,
// appended (with the messages they announce) and read back, and whether
// the session exists.
type EventStore interface {
	GetSession(ctx context.Context, id string) (*Session, error)
	AppendEvents(ctx context.Context, evs []event.Event) error
	AppendEventsWith(ctx context.Context, evs []event.Event, msgs []*Message) error
	Events(ctx context.Context, session string, after int64, limit int) ([]event.Event, error)
	LastSeq(ctx context.Context, session string) (int64, error)
}

// Locker is the part of a Store the session locks use.
type Locker interface {
	AcquireLock(ctx context.Context, key, holder string, ttl time.Duration) (Lock, error)
	ReleaseLock(ctx context.Context, key, holder string) error
	ForceUnlock(ctx context.Context, key string) error
	GetLock(ctx context.Context, key string) (Lock, error)
}

var (
	_ EventStore     = Store(nil)
	_ Locker         = Store(nil)
	_ Deliveries     = Store(nil)
	_ GitHubMarks    = Store(nil)
	_ Environments   = Store(nil)
	_ Secrets        = Store(nil)
	_ Memory         = Store(nil)
	_ Leases         = Store(nil)
	_ Carry          = Store(nil)
	_ Branches       = Store(nil)
	_ People         = Store(nil)
	_ Audit          = Store(nil)
	_ EventRetention = Store(nil)
	_ Teams          = Store(nil)
	_ Slack          = Store(nil)
)

// Store keeps sessions, messages, events, locks and tokens. Its consumers
// that need a part take the part: EventStore (the journal), Locker (the
// session locks), server.Records (the API's tokens and logs).
type Store interface {
	// CreateSession stores a new session (ID set by the caller) and, if
	// first is not nil, its first message, in one transaction, and claims
	// its branches (branches.go): a branch another live session holds is
	// a *BranchHeldError and nothing is stored.
	CreateSession(ctx context.Context, s *Session, first *Message) error
	GetSession(ctx context.Context, id string) (*Session, error)
	ListSessions(ctx context.Context, f SessionFilter) ([]*Session, error)
	// UpdateSession reads the session, calls fn on it and writes it back in
	// one transaction (UpdatedAt is set). An error from fn aborts. A session
	// that ends (stopped, failed) releases its branches in it.
	UpdateSession(ctx context.Context, id string, fn func(*Session) error) (*Session, error)
	// DeleteSession removes the session with its messages and events.
	DeleteSession(ctx context.Context, id string) error
	// CountSessions counts the sessions in each state (states with none
	// are left out), with the sum of their limits.disk_bytes: what an
	// operator's metrics show, in one query however many there are.
	CountSessions(ctx context.Context) ([]StateCount, error)

	// AddMessage stores a message (ID set by the caller), assigning its Seq.
	AddMessage(ctx context.Context, m *Message) error
	// Messages lists a session's messages in Seq order, only those in the
	// given states (all when none given).
	Messages(ctx context.Context, session string, states ...MessageState) ([]*Message, error)
	// MessageByKey finds the session's message sent by owner with the
	// idempotency key (Message.Key, Message.KeyOwner); ErrNotFound when
	// there is none.
	MessageByKey(ctx context.Context, session, owner, key string) (*Message, error)
	// SetMessageState moves a message to state (with the turn that took it).
	SetMessageState(ctx context.Context, session, id string, state MessageState, turn string) error

	// AppendEvents stores events whose Seq the caller assigned (the journal
	// does), all in one transaction: all or none. A seq already stored is
	// ErrConflict.
	AppendEvents(ctx context.Context, evs []event.Event) error
	// AppendEventsWith stores msgs as AddMessage does (assigning their Seq,
	// in order) and evs as AppendEvents does, all in one transaction: all
	// or none. The journal stores a message with its message.queued event
	// this way, so a crash never keeps one without the other. A message id,
	// or a (KeyOwner, Key), that its session already has is ErrConflict.
	AppendEventsWith(ctx context.Context, evs []event.Event, msgs []*Message) error
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

	// CreateToken stores t. A token with no User that is not a node's
	// becomes a user of its own in the same transaction (UserIDForToken,
	// named as the token, an admin for an admin token, else a member);
	// a User that does not exist is ErrNotFound. It records the
	// context's audit entry in its transaction (WithAudit).
	CreateToken(ctx context.Context, t *Token) error
	// TokenByHash finds a token by the SHA-256 of its secret, with its
	// user's role and whether the user is disabled.
	TokenByHash(ctx context.Context, hash []byte) (*Token, error)
	ListTokens(ctx context.Context) ([]*Token, error)
	// DeleteToken removes the token, the secrets of its user scope
	// ("user:" + id) and its own memory (MemoryScope.Owner id), in one
	// transaction; its user stays. It records the context's audit entry
	// in its transaction (WithAudit).
	DeleteToken(ctx context.Context, id string) error

	Deliveries
	GitHubMarks
	Environments
	Secrets
	Memory
	WebSessions
	Leases
	Carry
	Branches
	People
	Audit
	Teams
	Quotas
	SignIns
	EventRetention
	Slack

	Close() error
}

// ErrMemoryFull: a memory write would bring its scope over
// MemoryWrite.MaxBytes; nothing was written. The caller says so and what
// to delete.
var ErrMemoryFull = errors.New("memory full")

// MemoryScope is whose a memory graph is: a repository (the key sessions
// and environments name it by, session.RepoKey) and an owner (an API
// token id; "" is the repository's memory shared by every session).
type MemoryScope struct {
	Repo  string `json:"repo"`
	Owner string `json:"owner,omitempty"`
}

// The memory graph's rows are the wire's (GET /v1/memory answers them as
// they are).
type (
	MemoryEntity      = wire.MemoryEntity
	MemoryObservation = wire.MemoryObservation
	MemoryRelation    = wire.MemoryRelation
	MemoryGraph       = wire.MemoryGraph
)

// MemoryWrite is who writes (recorded on every row the write adds) and
// the scope's size bound.
type MemoryWrite struct {
	Session string
	Turn    int
	// MaxBytes, when > 0, bounds the scope's size (MemorySize) after the
	// write: over it, the write is ErrMemoryFull and writes nothing.
	MaxBytes int64
}

// MemoryQuery selects part of a scope's graph for ReadMemory; zero
// fields select it all.
type MemoryQuery struct {
	// Search keeps the entities whose name, type or an observation
	// contains it, without regard to (ASCII) case.
	Search string
	// Names keeps the entities of these names (missing ones are skipped).
	Names []string
}

// Memory is the part of a Store package memory uses: per-scope knowledge
// graphs. Names are compared exactly. Every write is one transaction.
type Memory interface {
	// CreateMemoryEntities adds the entities whose name the scope does not
	// have yet (with their observations, duplicates dropped) and returns
	// those it added.
	CreateMemoryEntities(ctx context.Context, sc MemoryScope, es []*MemoryEntity, w MemoryWrite) ([]*MemoryEntity, error)
	// AddMemoryObservations adds to the entity the texts it does not have
	// yet and returns them; a missing entity is ErrNotFound.
	AddMemoryObservations(ctx context.Context, sc MemoryScope, entity string, texts []string, w MemoryWrite) ([]string, error)
	// SetMemoryEntity makes the entity have exactly these type and
	// observations (kept ones keep their provenance), creating it if
	// missing; it returns the entity as stored.
	SetMemoryEntity(ctx context.Context, sc MemoryScope, name, typ string, texts []string, w MemoryWrite) (*MemoryEntity, error)
	// CreateMemoryRelations adds the relations the scope does not have yet
	// and returns them; one whose end is missing is ErrNotFound (nothing
	// is written).
	CreateMemoryRelations(ctx context.Context, sc MemoryScope, rs []*MemoryRelation, w MemoryWrite) ([]*MemoryRelation, error)
	// DeleteMemoryEntities removes the entities (with their observations
	// and relations) and returns how many there were.
	DeleteMemoryEntities(ctx context.Context, sc MemoryScope, names []string) (int, error)
	// DeleteMemoryObservations removes the texts from the entity and
	// returns how many it had.
	DeleteMemoryObservations(ctx context.Context, sc MemoryScope, entity string, texts []string) (int, error)
	// DeleteMemoryRelations removes the relations and returns how many
	// there were.
	DeleteMemoryRelations(ctx context.Context, sc MemoryScope, rs []*MemoryRelation) (int, error)
	// ReadMemory returns the selected entities and the relations between
	// two of them.
	ReadMemory(ctx context.Context, sc MemoryScope, q MemoryQuery) (*MemoryGraph, error)
	// MemorySize is the bytes of a scope's names, types, observations
	// and relation types.
	MemorySize(ctx context.Context, sc MemoryScope) (int64, error)
	// SeedMemory adds es to a scope that has never been seeded and has
	// no entity, and marks it seeded, in one transaction; it reports
	// whether it did.
	SeedMemory(ctx context.Context, sc MemoryScope, es []*MemoryEntity, w MemoryWrite) (bool, error)
}

// ErrUnavailable: the store cannot be reached now (its server is down or
// restarting, the connection was lost). Nothing was done, or, for a write
// whose commit was cut off, it is not known whether it was: retry later
// (idempotently).
var ErrUnavailable = errors.New("store unavailable")
