package session

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Several nodes on one store: the session side. This file is its one
// doc; the code is the nodes_*.go files:
//
//	nodes.go           this doc, NodeConfig, the errors callers branch on
//	nodes_lease.go     leases: claim, acquire, lose, give up; the keeper
//	                   (takeover)
//	nodes_fence.go     self-fencing: the node's heartbeat and deadline, the
//	                   renewer (the heartbeat), the new
//	                   owner's wait, the boxes' fences; the fenced store
//	nodes_place.go     placement by capacity: room, queueing, PlaceNew
//	nodes_takeover.go  the takeover scan: how many of the sessions nobody
//	                   owns this node takes, which, and how fast
//	nodes_carry.go     carrying a workspace to the store and restoring it
//	nodes_objects.go   its packs and manifests in the checkpoint store
//	nodes_gc.go        the janitor: stale copies and disks, dead nodes
//	nodes_retention.go the janitor's event retention: compacting the events
//	                   of sessions not live for long, one node at a time
//
// The HTTP side (forwarding a request to the session's owner, a stream's
// hand-over, the tokens nodes call each other with) is package
// server/cluster's; the lease itself (its epoch, the fenced writes, the
// store's clock) is store/leases.go's.
//
// Why files of package session and not a package of their own: leases,
// takeover and placement are the Manager's own decisions about its
// runners — they take Manager.mu, the per-session gates and claims, start
// and stop runners (wake, leaseLost) and fence the runner's store and
// journal — and the Manager calls them at every create, send, runner exit
// and recovery. A subpackage would have to import session for the
// Manager and be imported by it for the keeper: a cycle, or an interface
// that exports the Manager's internals to one caller. Only the carrier
// could stand apart (it needs the store, workspace/carry and two hooks);
// it stays here so that the four parts read as one unit, and its
// mechanics (snapshot, restore, the packs) are package workspace/carry.
//
// # Ownership
//
// With Config.Node (harvest serve --node-id/--advertise on a PostgreSQL
// store) several servers share the store and each live session is run by
// one of them: the node holding the session's lease, whose epoch rises at
// every change of hands. A lone server (Node nil) takes no lease, fences
// nothing, places nothing and carries nothing: everything in the package
// doc holds unchanged. A session's ownership, for nodes A and B:
//
//	                 Create, Send, or a takeover (a node with room):
//	                 AcquireLease under the session's claim (epoch E)
//	  ┌─► unowned ───────────────────────────────────────────► leased by A
//	  │   (never leased,                                     (epoch E: A's runner
//	  │    released, or                                       runs; A's heartbeat,
//	  │    queued for a place)                                every TTL/3, keeps it;
//	  │        ▲                                              A carries the
//	  │        │ A's runner exits (suspended, ended,          workspace at every
//	  │        │ A shutting down): Flush, ReleaseLease        turn's end)
//	  │        └──────────────────────────────────────────────┤
//	  │                                                       │ A dies, pauses or
//	  │                                                       │ is cut off: no
//	  │                                                       │ heartbeat succeeds
//	  │                                                       ▼
//	  │                                 A's deadline (sent+TTL-TTL/6, A's clock):
//	  │                                 A's runner stops (if A runs at all) and
//	  │                                 the box's agent kills every process in
//	  │                                 it (if A is paused or dead too)
//	  │                                                       │ TTL/6 later at
//	  │                                                       ▼ least: expiry
//	  │   leased by B ◄───── B's keeper takes it over ────── lease expired
//	  │   (epoch E+1; B's runner waits   (Orphans, every     (still names A;
//	  │    until expiry+TTL/6, restores   TTL/3: B's share,   requests for it are
//	  │    the carried workspace if its   at B's rate, while  handled by whichever
//	  │    copy is not current, then      B has room: see     node gets them: a
//	  │    recovers the box or marks      Takeover)           send takes it there)
//	  │    the turn interrupted)
//	  │        │
//	  └────────┘ B's runner exits
//
//	A, if it comes back (it was paused): it stopped acting at its
//	deadline already, and its next heartbeat names no generation (which
//	ends the old one's leases in the store, taken or not); a fenced write
//	is refused (store.ErrLeaseLost) if it got that far; the journal
//	refuses A's later events of the session.
//
// # Leases (nodes_lease.go)
//
// Only the owner writes a session: its journal numbers the session's
// events, so two writers would reuse seqs. Its runner's store writes
// (fencedStore: session updates, message deliveries) and events
// (fencedLog: the journal's AppendFenced) carry the runner's epoch, and
// the store refuses them once another node took the session
// (store.ErrLeaseLost). A refusal, a heartbeat answered in another
// generation, a session deleted under the node, or the node's deadline
// passing (below) is a lost lease (leaseLost, loseHeld): the runner
// is cancelled with errLeaseLost and stops at once (a turn it ran is
// cancelled, its tools killed, and it ends as turn.failed "interrupted",
// as when a node dies; the box is destroyed unless the nodes share the
// data directory), its fenced writes fail on this node without reaching
// the store, and the journal refuses every later event of the session
// from this node until it takes a new lease. The new owner's runner
// starts exactly as Recover starts one: it destroys the box of an
// interrupted turn and marks it interrupted (turn.failed "interrupted",
// unless its end was stored), or reattaches an idle box (replacing it if
// the backend cannot), then delivers the queue. So a turn a node's loss
// interrupted is turn.failed "interrupted" whatever the loss was (the
// node died, paused, or lost the store for longer than its deadline),
// written once, by whichever node could. A message sent to a session
// nobody owns (suspended) is stored by the node that received it, which
// takes the lease first and then runs it.
//
// The node's heartbeat is the lease of every session it holds (store's
// leases.go: a lease is an assignment — node, epoch, the node's
// generation — live while the node's heartbeat is, in that generation).
// So keeping them costs one row a round, whatever their number (issue
// 26: renewing every lease wrote ~3,000 row versions a second at 10,000
// live sessions on 10 nodes; now 3, BenchmarkLeaseUpkeep). A generation
// lasts while the node's heartbeats follow each other within the TTL:
// one that comes late, or names none (the node's deadline passed here:
// it stopped acting and starts afresh), starts the next, which ends every
// lease of the earlier ones at once, taken or not — they are orphans,
// which this node or another takes again with the next epoch. A takeover
// of an expired node's session ends that node's generation in the same
// transaction, so a heartbeat of the node racing with it cannot revive
// the lease just taken. The node learns that a session left it from its
// heartbeat's answer: a new generation (all its leases are over), or a
// change of Node.Moved (a session was deleted under it: it reads its
// leases, NodeLeases — a read, only then).
//
// # Self-fencing (nodes_fence.go)
//
// Fencing in the store stops a stale owner's writes, not its box: a node
// that is paused, or cut off from the store, keeps running its tools (a
// push, an API call) while another node runs the same turn again. So a
// node acts for its sessions only until its heartbeat's deadline on its
// own monotonic clock, the way Kubernetes' leader election does:
//
//	deadline = sent + TTL − margin      margin = TTL/6 (1.67 s at TTL 10 s)
//
// where sent is when the heartbeat or acquire that last succeeded in the
// node's generation was sent (the store's expiry, from the statement's
// start, is no earlier). It is the node's, one for all its sessions: one
// timer fires at it and loses every lease, whether a heartbeat has
// returned or not; one that returns later does not bring them back, and
// the node's generation is over here (its next heartbeat starts a new
// one). The renewer (its own goroutine, on a ticker of TTL/3, so that a
// long takeover scan never delays it) beats the heartbeat and moves the
// deadline on.
//
// The same deadline is armed in the session's box (sandbox.Fence, a
// dead-man's switch in its agent, PID 1), as soon as a box is started or
// reattached, before any command runs in it, and moved on after every
// heartbeat (one call to each armed box's agent, nothing per box in the
// store): if none comes — the node is paused, killed, cut off — the
// agent kills every process of the box at the deadline and exits. An
// idle box is fenced too: the new owner replaces it. Box processes can
// neither move nor disarm it (package sandbox/agentd's "Fence"). A box
// left for the next owner in good order (a shutdown, nodes sharing the
// data directory) is disarmed; a lone server arms nothing.
//
// A new owner acts only once the old owner's deadline has surely passed:
// its runner waits until the previous lease's expiry (the store's clock)
// plus a skew bound, TTL/6 (1.67 s at TTL 10 s), before it reads or
// recovers the session (takeoverWait: the store's time at the acquire is
// the new lease's expiry minus the TTL). A released lease needs no wait.
// Between the old owner's last act and the new owner's first there are
// thus margin+skew = TTL/3 of real time, as long as the store's clock and
// the nodes' do not disagree by more than the skew over a TTL (a
// PostgreSQL clock stepped forward by more would let a lease expire that
// much early), and the old box dies within the margin of its deadline
// (measured: milliseconds on local, docker and gVisor).
//
// A node's renewer goroutine (startKeeper, owned by Manager.builds) beats
// its heartbeat every TTL/3; its keeper takes over the sessions nobody
// owns (takeover: live ones, and suspended ones with queued messages),
// every TTL/3 too; a dead node's sessions are
// thus taken within TTL+TTL/3 — as many as the survivors' rate allows in
// a scan, the rest in the scans after (see Takeover) — and recovered
// TTL/6 after that. Requests that act on a running session (send, cancel,
// delete, the event stream) are forwarded to the owner's advertised URL
// by package server/cluster, which asks Owner; reads come from the store.
// A call that reaches a node which does not own the session gets an
// *ElsewhereError (ErrElsewhere, ErrUnavailable: 503, retry).
//
// The Manager's own writes for a runner (a workspace's commits, at
// provisioning) are not fenced: a stale owner may still write those, never
// the session's state, box, conversation, messages or events.
//
// Per session, claims (nodeState.claims) serialise taking the lease and
// writing under it (Create, Send, takeover) against giving it up (a
// runner's exit, which flushes the session's events first): a send never
// writes under a lease being released. Lock order: a session's gate, a
// keyed send's key lock, nodeState.place (placement, below), the
// session's claim, Manager.mu.
//
// # Placement (nodes_place.go)
//
// With NodeConfig.Capacity > 0, or on a node below its floor of free
// space (which has no room at all), a node runs at most Capacity
// sessions: the leases it holds (a suspended session's lease is given up,
// so it takes no place). A new session is placed thus:
//
//   - server/cluster forwards a create received by a full node to a live
//     node with room (PlaceNew: the store's node list, with each node's
//     capacity and lease count as of its last heartbeat);
//   - Create on a node with room takes the lease and runs the session, as
//     without a bound;
//   - Create on a full node (every node was full, or the list was stale)
//     stores the session and queues it: it takes the lease only to journal
//     the session's first events (its state, pending, with a reason saying
//     it waits for a place, and its prompt queued), then releases it. The
//     session is then one nobody owns, and the first node with room takes
//     it over (takeover, oldest first within its share) and starts it.
//
// A message sent to a session nobody owns (a queued one, a suspended one)
// on a full node is stored the same way, and the session left to a node
// with room. The takeover respects the bound too, for every session nobody
// owns (a dead node's included), and a node scans at once when a place
// comes free here (a runner gives its lease up, a session is deleted:
// kickKeeper). A session is never run by two nodes: whoever runs it holds
// its lease. Checking the room and taking a lease are one step per node
// (nodeState.place), so a node never takes more than Capacity; nodes do
// not reserve places on each other, so a forwarded create that finds its
// target full queues. A node below its floor of free space advertises
// itself full (store.NodeFull) and takes no placements (admission.go).
//
// # Takeover (nodes_takeover.go)
//
// A session nobody owns (never leased, released, or its owner's lease
// ran out) that needs a node — a live one, or a suspended one with a
// queued message — is an orphan (store's Orphans: one query listing the
// oldest ones, urgent first, and counting them all). Every live node's
// keeper scans for them every TTL/3 (and at once when a place comes free
// here). Left to itself, the first node to scan took every orphan: a
// node joining a store with 608 orphaned live sessions took them all in
// about a minute, with ~70 GB of disk images. So a scan takes only this
// node's part, at a bounded rate:
//
//	its share   water-filling over the live nodes (the store's list, with
//	            each node's bound and lease count): the orphans raise the
//	            level of the least loaded nodes until all are placed, a
//	            node holding min(its bound, the level) or more if it holds
//	            more already. Nodes end with equal counts; a node with a
//	            lower --max-sessions fills up and the rest spreads over the
//	            others; a node below its floor of free space (NodeFull)
//	            takes none. It takes share − held: 600 orphans and three
//	            empty nodes, 200 each; bounds 150, 300 and none: 150, 225,
//	            225. Equal counts, not counts in proportion to the bounds:
//	            a bound is a ceiling the operator set, not a measure of the
//	            machine, and an unbounded node has no proportion.
//	its rate    at most NodeConfig.TakeoverRate sessions a second
//	            (--takeover-rate, DefaultTakeoverRate 5), a token bucket
//	            holding a scan's worth (TTL/3 × the rate, 16 at the
//	            default TTL), so that a kick between scans cannot exceed
//	            it either. A takeover of a turn to recover, or of a
//	            session with a queued message, from another machine
//	            restores its workspace and starts a box; the rate keeps
//	            the node that inherits hundreds serving meanwhile. An idle
//	            one costs only its lease (below).
//	            A scan also stops claiming after TTL/6, however slow the
//	            store is, and leaves the rest to the scans after.
//	its bound   Capacity and the floor of free space, checked at each
//	            claim with the lease taken (claimIfRoom), as for a create.
//	which       urgent ones first (not idle — a turn to recover, a session
//	            to provision — or with a queued message), then the oldest.
//	            The nodes that want some this round take about the first
//	            Σ min(want, a scan's worth) of them; of that window a node
//	            claims the ones it ranks highest among those nodes
//	            (rendezvous hashing of node and session, computed alike by
//	            every node from the same list), then the ones after the
//	            window. Nodes scanning at once thus go for different
//	            sessions without talking to each other (0–4 lost claims
//	            over 600 sessions and three nodes in the test), where a
//	            random or oldest-first order had them fight over the same
//	            rows. A claim is still one AcquireLease, and a lost one
//	            costs that statement (PostgreSQL's ON CONFLICT waits for
//	            the winner's short transaction, then reads its row): a
//	            batch claim with FOR UPDATE SKIP LOCKED would save little
//	            more, and could not take the never-leased sessions, which
//	            have no row to lock.
//	when        not before a heartbeat round (TTL/3) after this node's
//	            first scan: a node that comes up sees every node already
//	            up before it computes its share, so it never takes more.
//
// The share is recomputed at every scan from the list and the counts, so
// nodes that joined late, or whose view was a round stale, even out in
// the scans after. A session in a window whose preferred node does not
// scan (it is in its first round, or stopped: its heartbeat runs out
// within a TTL, and the list with it) waits that long. Not done: nodes
// over their share give nothing up (no rebalancing of held sessions), so
// a node that joins a busy cluster gets only new orphans and creates.
//
// A suspended session without a queued message is not an orphan: its
// lease was given up when it suspended, it has no box, and it needs no
// node until someone sends to it. The node that receives that message
// takes the lease and runs it (or, full, stores the message, which makes
// the session an orphan for a node with room).
//
// A live session that is idle (no turn to recover, no queued message),
// taken over from another machine (its workspace's copy here is not the
// checkpoint's), is taken as a lease only (nodes_dormant.go): the old
// box is forgotten, and the restore and a new box wait for the first
// message, or a request that needs the box (a shell, the changes: those
// answer ErrNoBox, "being started", and start it). An idle timeout meanwhile
// suspends it. So a takeover of many idle sessions costs leases, not
// boxes and disks: 32 idle sessions took 2.2 s, 3.8 MB and 32 boxes on
// the new node before, 0.46 s (0.3 s of it the first scan's wait), no
// byte and no box after (TestNodesTakeoverIdleLazy; tiny workspaces).
//
// # Carrying workspaces (nodes_carry.go)
//
// Nodes need not share a disk. A session's workspace directory (its
// checkouts, and on its disk its box's HOME and /tmp) is on its owner's
// disk only, so the owner carries it in the checkpoint store
// (Config.Checkpoints, package store/objstore: a directory, by default
// below the data directory, or an S3 bucket every node reaches), with a
// reference to each object in the store (store.Carry; nodes_objects.go):
//
//	provisioned, or a turn ended ──► snapshot of the directory (package
//	    workspace/carry: only files changed since the last one are read;
//	    each new pack uploaded whole, then recorded) ──► the manifest
//	    uploaded ──► PutCheckpoint under the runner's lease ──► the
//	    replaced checkpoint's manifest deleted
//
// A checkpoint whose upload dies is never seen: its row is written last.
// Deleting a session deletes its manifest. The keeper's sweep removes the packs no checkpoint names, then the
// objects nothing names (older than an hour: an upload not yet recorded
// is spared). Checkpoints stored in the database before the checkpoint
// store are still restored.
//
// Each copy of a workspace directory has an instance id, in a file at its
// root that no box sees (instanceFile); a checkpoint names the instance it
// was taken from. A node that starts a runner for the session compares:
//
//	no checkpoint, or its instance is the one here ──► use the directory here
//	    (one node, nodes sharing the data directory, or this node took it last)
//	otherwise ──► the copy here is missing or stale: empty the directory,
//	    restore the checkpoint into it, give it a new instance id, and
//	    store the same checkpoint under that id (no data is copied), so
//	    that the node the copy came from restores too if it gets the
//	    session back
//
// A box is reattached only when the directory here is the current one:
// another node's box is on another machine (its handle is destroyed if
// this machine can, and forgotten). So a dead node's session restarts
// from the end of its last finished turn; what the interrupted turn
// changed in the workspace is lost, and the state's reason says so.
// Config.CarryMax bounds what is carried (DefaultCarryMax); -1 turns
// carrying off for nodes that share the data directory (--shared-data).
// Sessions of a workflow (several sessions on one shared directory) are
// not carried: their nodes must share the data directory.
//
// # Goroutines
//
// The keeper and the renewer (startKeeper) are the only goroutines of
// their own: owned by Manager.builds. The keeper stops at Close, and its
// last act (leave) gives up the leases no runner holds; the renewer goes
// on during Close, its heartbeats saying the node is leaving (no address,
// no room), until the keeper has returned and no runner holds a lease
// (runners that take long to stop keep their leases, and with them the
// events that say how they stopped), and then takes the node off the
// list (RemoveNode). The node's deadline timer (time.AfterFunc) only
// calls fenceDue, which takes Manager.mu and does nothing if the
// deadline moved on meanwhile. One heartbeat runs at a time
// (nodeState.beating: the renewer's, or an acquire's when the node has no
// live generation).
// fenceBoxes calls the boxes' agents concurrently, one goroutine each,
// and waits for them all. A runner
// snapshots and restores its own session's directory on its goroutine
// (through runnerDeps.carry); carrier.prev is under carrier.mu, and the
// keeper removes, about every ten minutes, the stored packs no
// checkpoint uses any more (carrier.sweep). The janitor (nodes_gc.go,
// on every server, also owned by Manager.builds) removes at start and
// every Config.CleanEvery the workspace copies and disks of sessions this
// node no longer has, and the nodes dead for Config.NodeGone.
//
// Not done yet: reaping orphaned boxes with several nodes (a crash
// between starting a box and storing its handle leaks that box until its
// deadline).

// DefaultLeaseTTL is how long a node's heartbeat (the lease of its
// sessions) lasts without another. A dead node's sessions are taken
// over between ⅔ and 1⅓ of it after its death (it beat at most TTL/3
// before; the survivors scan every TTL/3), and their runners
// act TTL/6 after the expiry (the skew bound): 8.3–15 s.
const DefaultLeaseTTL = 10 * time.Second

// NodeConfig turns on several-node mode (Config.Node): this server is one
// of the nodes sharing the store, and runs only the sessions it holds a
// lease on.
type NodeConfig struct {
	// ID names the node; new at every start (host name and a random
	// suffix), so that a restarted process is a new owner.
	ID string
	// Addr is the URL the other nodes forward a session's requests to
	// (http://host:port).
	Addr string
	// TTL is the heartbeat's TTL, which is its leases' (default
	// DefaultLeaseTTL). The node beats, and looks for expired leases,
	// every TTL/3.
	TTL time.Duration
	// Capacity is how many sessions the node runs at most (0: no bound):
	// registered with its heartbeat; see "Placement" above.
	Capacity int
	// TakeoverRate is how many sessions nobody owns this node takes over a
	// second at most (0: DefaultTakeoverRate); see "Takeover" above.
	TakeoverRate float64
}

// NewNodeID is NodeConfig.ID for a node named name: the name and a
// random suffix. Every start is a new owner (store/leases.go), so a
// restarted node never renews the leases of the process it replaces (nor
// of a twin started by mistake with the same name).
func NewNodeID(name string) string {
	var b [3]byte
	rand.Read(b[:])
	return name + "-" + hex.EncodeToString(b[:])
}

// ErrElsewhere: another live node owns the session; its requests go
// there (an *ElsewhereError says where). It unwraps to ErrUnavailable
// too: a caller that cannot forward answers 503 and the client retries.
var ErrElsewhere = errors.New("the session runs on another node")

// ElsewhereError names the node that owns a session.
type ElsewhereError struct {
	Session string
	Node    string
	Addr    string // "" when the node is not live (its lease runs out soon)
}

func (e *ElsewhereError) Error() string {
	where := "node " + e.Node
	if e.Addr != "" {
		where += " (" + e.Addr + ")"
	}
	return fmt.Sprintf("session %s runs on %s; try again (a request there, or here once its lease runs out)", e.Session, where)
}

func (e *ElsewhereError) Is(target error) bool {
	return target == ErrElsewhere || target == ErrUnavailable
}

// errLeaseLost stops a runner whose node lost the session's lease (or
// whose deadline passed): its turn is interrupted, and its box destroyed
// or, with a shared data directory, left to its fence and the new owner.
var errLeaseLost = errors.New("this node lost the session's lease to another node")
