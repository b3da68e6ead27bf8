package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/harvest-dev/harvest/event"
)

// Several harvest nodes may share one store (PostgreSQL). Each live
// session is then owned by one node at a time, through a lease in the
// store; this file is the store's part of that: nodes, session leases,
// and the fenced writes an owner makes.
//
// # Nodes and their generations
//
// A node announces itself with HeartbeatNode (its id, the address others
// reach it at, how many sessions it takes and holds) and calls it again
// every few seconds; ListNodes lists the nodes whose last heartbeat's TTL
// has not run out. A node's id should be new at every start (host name and
// a random suffix): a restarted process is a new owner, not the old one
// coming back.
//
// A node's heartbeats form generations: a generation (Node.Gen, 1, 2, ...)
// lasts while the node's heartbeats follow each other without a break —
// each one made before the last one's TTL ran out, by a caller that names
// the generation it is in. A heartbeat that comes after the TTL ran out,
// or that names no generation (Gen 0: the process starts, or it stopped
// acting for its sessions and starts afresh) or another one, starts the
// next generation; the previous one ended then (Node.Ended).
//
// # Leases: the node's heartbeat is the lease of every session it holds
//
// A session's lease is an assignment — node, epoch, and the node's
// generation it was made in — that changes only when the session changes
// hands. It has no expiry of its own: it is live while its node's
// heartbeat is and the node is still in that generation. So keeping a
// node's sessions costs one row per heartbeat, however many sessions it
// holds (issue 26: renewing every lease every TTL/3 wrote ~3,000 row
// versions a second at 10,000 live sessions on 10 nodes); and a node whose
// heartbeats stopped for longer than the TTL loses all its sessions at
// once, as it stops acting for all of them at once (package session's
// self-fencing). A new generation ends the previous one's leases even if
// nobody took them: its node stopped acting for them (it lost the store
// for longer than the TTL, or said so by asking for a new generation), so
// they are orphans, which it or another node takes again, with the next
// epoch.
//
// AcquireLease gives a session to a node, with an epoch: a number that
// grows by one every time the session changes hands, and never goes back
// (a released lease keeps its epoch, so the next owner's is higher). It is
// also a heartbeat of the node (a node acquiring is alive): its expiry
// becomes now+ttl, in its live generation, or a new one if it had none.
// The epoch stays the same only while the same node holds the lease
// without a break: AcquireLease by its holder while the lease is live. So
// an epoch names one uninterrupted ownership.
//
//	no lease ──Acquire by A──► held (A, epoch 1, A's generation g)
//	                             │ A's heartbeats go on: nothing written per session
//	                             │ A's heartbeat runs out, or A starts generation g+1
//	                             ▼
//	                           expired (A, 1, g) ──Acquire by B (or by A: a new ownership)
//	                             │
//	                             ▼
//	                           held (B, 2)      A's fenced writes: ErrLeaseLost;
//	                             │              A's Node.Moved goes up by one
//	                             │ Release by B
//	                             ▼
//	                           released (epoch 2 kept) ──Acquire──► held (C, 3)
//
// A node learns that a session left it without a takeover of its own
// making (another node took it once the node's generation was over, or
// the session was deleted) from its heartbeat's answer: Node.Moved counts
// those departures, and a node that sees it change reads its assignments
// (NodeLeases) — a read, and only then.
//
// # Fencing
//
// A node that lost its lease (it paused for longer than the TTL, its
// network went away, another node took the session over) may not know it
// yet, and may still be writing. Its writes are refused by the store: the
// owner's writes are made with a Fence (the session and the epoch the
// writer holds), and each fenced write checks, in its own transaction,
// before it writes anything, that the session's lease still has that epoch
// and has not been released; otherwise it writes nothing and fails with
// ErrLeaseLost (a *LeaseLostError saying who holds the session now). The
// writes that are fenced are those only the owner of a session makes and
// that two owners would corrupt:
//
//   - AppendEventsFenced: the session's events (and messages stored with
//     them). The owner's journal numbers the events in memory; two owners
//     would both number from the same last seq, and their events would
//     interleave or collide.
//   - UpdateSessionFenced: the session's row — its state, its box's handle,
//     the agent's saved conversation, usage. A stale owner writing its box's
//     handle over the new owner's would orphan a box and lose a
//     conversation.
//   - SetMessageStateFenced: taking a queued message for a turn (delivered)
//     or dropping it. Two owners would both deliver it: one message, two
//     turns.
//
// Not fenced: CreateSession (no owner yet), AddMessage and the unfenced
// AppendEventsWith (a message sent to the session is stored by whichever
// node received it), DeleteSession (an admin's decision, which also removes
// the lease), and the lease calls themselves. Fencing guards the store
// only: what a stale owner does outside it (a box, a git push) is for the
// session layer to stop, by giving up work once its lease may have run out
// (below).
//
// # Clocks
//
// Fencing is by epoch alone, never by time or generation: an expired lease
// that nobody took over still accepts its holder's fenced writes, because
// no one else has written under a newer epoch. Safety (one writer per
// session) therefore holds whatever the nodes' clocks say. Only liveness
// depends on time: when a lease counts as expired, so that another node
// may take it. That time is the store's: PostgreSQL's clock
// (statement_timestamp()), which every node sharing the database reads, so
// nodes with skewed clocks still agree on expiry; SQLite's is the process's
// clock (a SQLite store has one process writing it). A node should treat
// its leases as gone at its own clock's sendTime+ttl minus a margin,
// measured from when it sent the heartbeat or acquire that last succeeded
// (the store's expiry is at or after that), and stop acting outside the
// store by then; and start a new generation (Gen 0) when it did.
//
// A ttl <= 0 gives a heartbeat (and so leases) that is over at once:
// anyone may take the node's sessions. The conformance suite (storetest)
// uses that to test expiry without sleeping or moving a database server's
// clock.

// ErrLeaseLost: the caller's lease on a session is not current any more
// (another node took the session over, the lease was released, or it never
// existed): the fenced write or renewal wrote nothing. The caller stops
// acting as the session's owner. A *LeaseLostError says who owns it now.
var ErrLeaseLost = errors.New("lease lost")

// Lease is a node's ownership of a session.
type Lease struct {
	Session string `json:"session"`
	// Node holds it; "" once released.
	Node string `json:"node"`
	// Epoch numbers the session's ownerships: 1 for the first, one more at
	// every change of hands (see the package's lease doc). 0: never leased.
	Epoch int64 `json:"epoch"`
	// Gen is the generation of Node the lease was taken in: it is live
	// while Node's heartbeat is and Node is still in that generation.
	Gen int64 `json:"gen"`
	// Expires is when another node may take it over (the store's clock):
	// its node's heartbeat's expiry while the generation is Node's live
	// one; when that generation ended, once a later one began; the zero
	// time when released, or when its node is not in the store any more.
	Expires time.Time `json:"expires"`
}

// Fence returns the fence of writes made under l.
func (l Lease) Fence() Fence { return Fence{Session: l.Session, Epoch: l.Epoch} }

// Fence is what an owner's write carries: the session and the epoch of the
// lease it holds. The write is refused with ErrLeaseLost unless the
// session's lease still has that epoch and is not released.
type Fence struct {
	Session string
	Epoch   int64
}

// LeaseHeldError: AcquireLease refused, another node holds Lease and it
// has not expired. It unwraps to ErrLocked.
type LeaseHeldError struct{ Lease Lease }

func (e *LeaseHeldError) Error() string {
	return "session " + e.Lease.Session + " is leased to node " + e.Lease.Node +
		" (epoch " + strconv.FormatInt(e.Lease.Epoch, 10) + ") until " + e.Lease.Expires.UTC().Format(time.RFC3339Nano)
}
func (e *LeaseHeldError) Unwrap() error { return ErrLocked }

// LeaseLostError: a write or renewal under Epoch of Session was refused;
// Current is the session's lease now (zero Node: released or never
// leased). It unwraps to ErrLeaseLost.
type LeaseLostError struct {
	Session string
	Epoch   int64
	Current Lease
}

func (e *LeaseLostError) Error() string {
	msg := fmt.Sprintf("lease of session %s at epoch %d lost: ", e.Session, e.Epoch)
	switch {
	case e.Current.Epoch == 0:
		msg += "the session has no lease"
	case e.Current.Node == "":
		msg += fmt.Sprintf("the lease was released at epoch %d", e.Current.Epoch)
	default:
		msg += fmt.Sprintf("node %s holds it at epoch %d", e.Current.Node, e.Current.Epoch)
	}
	return msg
}
func (e *LeaseLostError) Unwrap() error { return ErrLeaseLost }

// Node is a harvest server sharing the store.
type Node struct {
	ID string `json:"id"`
	// Addr is where the other nodes reach it (host:port).
	Addr string `json:"addr"`
	// Capacity is how many sessions it takes at most (0: no bound;
	// NodeFull: none at the moment).
	Capacity int `json:"capacity"`
	// Heartbeat is its last heartbeat and Expires when that one runs out
	// (the store's clock; set by the store).
	Heartbeat time.Time `json:"heartbeat"`
	Expires   time.Time `json:"expires"`
	// Leases is how many sessions it holds, as it said in its last
	// heartbeat (the store counts nothing per round).
	Leases int `json:"leases"`
	// Gen is its generation (see the package's doc): in HeartbeatNode's
	// argument, the one the caller is in (0: none, start one); in its
	// answer and ListNodes, the node's now. Its leases of an earlier
	// generation are over.
	Gen int64 `json:"gen"`
	// Ended is when its previous generation ended (the zero time if it
	// had none): its leases of that generation expired then.
	Ended time.Time `json:"ended,omitzero"`
	// Moved counts the sessions that left it without its doing: taken
	// over by another node after its generation ended, or deleted. A node
	// that sees it change reads its assignments (NodeLeases).
	Moved int64 `json:"moved"`
}

// NodeFull is the Capacity of a node that takes no new sessions at the
// moment, whatever its bound (its data directory is below its floor of
// free space: package session's admission): other nodes place none there
// and it takes none over.
const NodeFull = -1

// Orphan is a session that needs a node and has none (Leases.Orphans).
type Orphan struct {
	// Lease is its lease as stored: Epoch 0 never leased, Node "" released,
	// otherwise expired.
	Lease     Lease
	State     State
	CreatedAt time.Time
	// Queued counts its queued messages.
	Queued int
}

// Urgent reports whether o has something to do now — a turn to recover,
// a session to provision, a message to deliver — rather than only an
// idle box to keep: a takeover starts those first.
func (o Orphan) Urgent() bool { return o.State != StateIdle || o.Queued > 0 }

// Leases is the part of a Store the owners of sessions use (see the doc at
// the top of this file). All times in it are the store's.
type Leases interface {
	// HeartbeatNode registers n (ID not empty) or refreshes it: its Addr,
	// Capacity and Leases are replaced, its heartbeat is now and it is
	// live until now+ttl. It goes on in n.Gen if that is the node's
	// generation and its heartbeat had not run out; otherwise it starts
	// the next generation (n.Gen 0 always does), which ends the leases of
	// the earlier ones. It returns the node as stored (Gen, Ended, Moved).
	HeartbeatNode(ctx context.Context, n Node, ttl time.Duration) (Node, error)
	// ListNodes lists the live nodes (heartbeat not expired), by id.
	ListNodes(ctx context.Context) ([]Node, error)
	// RemoveNode forgets a node (leaving for good): it leaves the list and
	// its leases are released, so that other nodes take its sessions at
	// once. The node calls it once it acts for none of them. A node that
	// is not there is no error.
	RemoveNode(ctx context.Context, id string) error
	// RemoveDeadNodes forgets the nodes whose heartbeat ran out more than
	// gone ago (the store's clock), releasing their leases, and returns
	// their ids, by id. gone < 0 is an error.
	RemoveDeadNodes(ctx context.Context, gone time.Duration) ([]string, error)

	// AcquireLease gives session to node. It succeeds when the session
	// has no lease, a released or an expired one (the epoch goes up by
	// one: a new ownership), or a live one of node's (the epoch stays).
	// Otherwise it fails with a *LeaseHeldError (ErrLocked) naming the
	// holder. It is a heartbeat of node too, live until now+ttl, in its
	// live generation or a new one (registered with no address if it was
	// not; HeartbeatNode gives it one): the lease's Gen says which. A
	// missing session is ErrNotFound.
	AcquireLease(ctx context.Context, session, node string, ttl time.Duration) (Lease, error)
	// ReleaseLease gives the session up if its lease is still l's (node
	// and epoch): it may be taken at once, with the next epoch. A lease no
	// longer l's is left alone (no error).
	ReleaseLease(ctx context.Context, l Lease) error
	// GetLease is the session's lease as stored, expired or released ones
	// included; ErrNotFound when the session has never been leased.
	GetLease(ctx context.Context, session string) (Lease, error)
	// NodeLeases lists the leases that name node, live or not, by
	// session: what a node reads when its Moved changed, to learn which
	// of its sessions left it.
	NodeLeases(ctx context.Context, node string) ([]Lease, error)
	// Orphans lists, in one query, the sessions a takeover scan may
	// take: no node owns them — never leased (Epoch 0), released (Node "")
	// or expired — and they need a node: in a live state (State.Live), or
	// suspended with a queued message (a suspended session without one
	// needs no node until someone sends to it). Urgent ones first
	// (Orphan.Urgent), then the oldest (created_at, then id); at most
	// limit of them (0: all). total counts them all, whatever the limit.
	Orphans(ctx context.Context, limit int) (orphans []Orphan, total int, err error)

	// AppendEventsFenced is AppendEventsWith under fences: every session
	// of evs and msgs must have one. If a fence is not current, nothing is
	// written and the error is a *LeaseLostError (ErrLeaseLost).
	AppendEventsFenced(ctx context.Context, fences []Fence, evs []event.Event, msgs []*Message) error
	// UpdateSessionFenced is UpdateSession under f (f.Session is the
	// session): fn is not called when f is not current.
	UpdateSessionFenced(ctx context.Context, f Fence, fn func(*Session) error) (*Session, error)
	// SetMessageStateFenced is SetMessageState under f.
	SetMessageStateFenced(ctx context.Context, f Fence, id string, state MessageState, turn string) error
}

// CheckFences validates the fences of a batch (AppendEventsFenced):
// every session of evs and msgs has a fence, no session has two, every
// epoch is > 0. Implementations call it before their transaction; its
// errors are the caller's mistakes, not ErrLeaseLost.
func CheckFences(fences []Fence, evs []event.Event, msgs []*Message) error {
	by := make(map[string]int64, len(fences))
	for _, f := range fences {
		if f.Session == "" || f.Epoch <= 0 {
			return fmt.Errorf("fence %+v: want a session and an epoch > 0", f)
		}
		if _, ok := by[f.Session]; ok {
			return fmt.Errorf("session %s has two fences", f.Session)
		}
		by[f.Session] = f.Epoch
	}
	for _, m := range msgs {
		if _, ok := by[m.Session]; !ok {
			return fmt.Errorf("a message of session %s is written without a fence", m.Session)
		}
	}
	for _, ev := range evs {
		if _, ok := by[ev.Session]; !ok {
			return fmt.Errorf("an event of session %s is written without a fence", ev.Session)
		}
	}
	return nil
}
