// Package session runs Harvest sessions: durable conversations with an agent
// on one or more repositories, each in its own sandbox, that outlive
// browsers, idle hours and restarts of the server.
//
// A Manager owns every session of one Harvest server. It stores sessions and
// messages in a store.Store, writes their events through a journal.Journal
// (which numbers, stores and fans them out), and gives each live session one
// runner goroutine that owns its box and its agent.
//
// # States
//
//	                 Create
//	                   │
//	                   ▼
//	               pending ──► provisioning ◄──────────────────┐ a message
//	                               │ workspaces, box, agent    │ (or Recover
//	                               ▼                           │  with a queue)
//	       ┌─────────────────────► idle ──── idle timeout ───► suspended
//	       │ turn ended            │  ▲                        box destroyed,
//	       │ (finished, failed,    │  │ lock held by another   workspace and
//	       │  cancelled)           │  │ run: stay idle, retry   agent state kept
//	       │                       ▼  │
//	       ├──────────────────── working ── Cancel / interrupt ─► cancelling
//	       │                                                         │
//	       └─────────────────────────────────────────────────────────┘
//
//	any state ──► stopped   max lifetime, or Stop (stop.go: a merged or closed
//	                        pull request; queued messages dropped)
//	any state ──► failed    the box or the agent cannot be set up (Error says why)
//
// A step that fails for a reason that may pass (the store, a box that died
// while it was being set up: its fence ended it, the kernel killed it) is
// retried by the runner after a second of real time — not the Manager's
// Clock, which a test moves by hand and which would otherwise hold the
// retry for ever. Three boxes in a row dying while being set up fail the
// session (provision.go, boxLost).
//
// waiting (the agent asks the user something) is reserved for agents that
// can ask; the builtin agent never does. Every transition is first written
// to the store (store.UpdateSession) and then journaled as a session.state
// event, so what the API shows and what the event stream says agree, and a
// crash between the two loses an event, never a state.
//
// # Messages
//
// Send stores the message (state queued) and its message.queued event in
// one store transaction (journal.AppendMessage) before it returns: an
// acknowledged message survives a crash, and a crash never keeps a message
// without its event or the other way round. A send may carry an
// idempotency key (per session and sender, kept with the message): a send
// retried with the same key returns the message stored the first time
// instead of storing a second; the same key with another text or mode is
// ErrConflict. Keyed sends of one key run one at a time (Manager.keys), so
// racing retries cannot both store. The runner delivers queued messages
// one per turn, in the order they were stored
// (message.delivered, then the agent's turn.started ... turn.finished). A
// message sent with mode "interrupt" while a turn runs cancels that turn
// (turn.cancelled) and the queue goes on, in order, with whatever is
// queued. Cancel ends the running turn, not the session: the session goes
// back to idle and the queue is kept but paused until the next message
// arrives (a restart also resumes it), so "stop" means stop.
//
// # Turns
//
// Before a turn the runner takes the session lock (seed 004's sequential
// collaboration: store lock "session/{id}", or "workflow/{owner}/{wf}" for
// a sequential session of a workflow (collab.go), held by run
// "{id}/t{N}") unless it holds it already: it keeps it, renewed, while
// queued messages follow one another and releases it when the queue is
// empty or paused (lock.go), waking the workflow's other runners. A run of
// someone else holding it leaves the message queued, says "locked by run
// X" in a session.state event and retries. The agent's payloads are wrapped in envelopes (session, turn
// "t{N}", agent) and journaled; the event that ends a turn is written
// synchronously. After every step of the builtin agent the session row gets
// the conversation so far (turnSink.checkpoint), so a crash mid-turn does
// not lose what the agent did and saw. After every turn, however it ended,
// the row gets the turn's usage and cost (the sum of its step.finished
// events) and the agent's state (an external agent's CLI transcript, read
// out of the box only then), in one write. A turn a crash interrupted is
// charged, at recovery, the usage of the step.finished events it journaled.
//
// A turn that emits nothing for Limits.TurnWatchdog is cancelled and ends
// as turn.failed kind "watchdog". Limits.MemoryBytes is the box's memory
// limit. Timeouts (idle, lifetime, watchdog, lock retries) are measured on
// Config.Clock, so tests move time instead of sleeping.
//
// # Concurrency
//
// A runner holds its dependencies (runnerDeps: the store, the journal, the
// clock, the configuration), not the Manager: what it asks of the Manager
// (shared providers, model clients and proxies, workspaces and disks,
// whether new turns are taken, its own bookkeeping) is the runnerHost
// interface, declared where the runner is.
//
// The runner goroutine is the only writer of a session's state, its box
// and its agent; the one other write, a step's checkpoint, comes from the
// turn's goroutine and touches only the agent's state (read-modify-write
// in one store transaction, like every update). The agent's turn runs on a goroutine of its own that the
// runner starts and waits for; while it runs the runner watches for the
// watchdog, the lock's renewal, cancels and shutdown. Manager methods never
// change a box (two borrow it to read and to open a shell: box.go,
// shell.go): they store, then wake the runner (a buffered channel of one:
// wakes coalesce, the runner re-reads the store). A runner exits (idle
// suspension, stop, failure) under Manager.mu only when no wake is pending,
// and Send starts a runner under the same mutex when none exists, so a
// message can never fall between an exiting runner and a new one. Delete
// holds the session's write lock (Send holds it for reading) so that no
// message or event is written for a session being removed.
//
// Lock order: a session's gate (Send, Delete), then a keyed Send's key
// lock (Manager.keys, held across the store and journal calls of that one
// send), then Manager.mu, then runner.mu; Manager.pmu (backends and model
// clients) stands alone.
// Manager.mu and runner.mu are never held across a store, journal or
// sandbox call.
//
// # Shutdown and recovery
//
// Drain is the first step of a planned restart: Create and Send are
// refused with ErrUnavailable, no runner starts a turn (queued messages
// stay queued for the next server), and running turns go on; the channel
// Drain returns is closed when the last one has ended (Manager.turns
// counts them under Manager.mu; runTurn takes a count only while not
// draining). harvest serve waits for it for its --shutdown-grace, then
// calls Close.
//
// Close stops every runner without losing anything: a running turn is
// cancelled and ends as turn.failed kind "interrupted", the agent's state
// and the usage are saved, and the session is left idle with its box
// RUNNING and its handle persisted (background processes the agent started
// are stopped), so that the next server reattaches it. Queued messages stay
// queued. With Config.StopBoxesOnExit (a server stopped for good) Close
// destroys the boxes instead, and suspends the idle sessions, as their idle
// timeout would have.
//
// Recover, called once when a server starts, resumes every session that was
// live: an idle session's box is reattached from its persisted handle (a box
// that is gone is replaced by a new one on the kept workspace); a session
// that was in a turn first has its box destroyed, with every process of
// the dead turn in it (they may still run: a tool's "sleep 30; echo >>
// file" outlives the server), and only once that succeeded gets
// turn.failed kind "interrupted" (unless the turn's end was already
// journaled); then it gets a new box on the kept workspace and goes back
// to idle. A box that cannot be destroyed is retried, and the turn is not
// reported over meanwhile. Events a crash can lose because they are
// journaled after the write they report (the prompt's message.queued, an
// interrupted turn's message.delivered) are journaled late by the
// recovering runner (repair.go). Then the queued messages are delivered.
// Suspended sessions with queued messages are resumed. Finally every box of a backend in use that no
// session owns (a crash between starting a box and storing its handle,
// between destroying it and storing that) is destroyed.
//
// # Several nodes
//
// With Config.Node (harvest serve --node-id/--advertise on a PostgreSQL
// store) several servers share the store and each live session is run by
// the node holding its lease (store/leases.go); the others take over a
// dead node's sessions, place new ones where there is room, and carry
// workspaces between disks. nodes.go draws that state machine and
// explains it; the nodes_*.go files hold the code. A lone server (Node
// nil) takes no lease and fences nothing: everything above holds
// unchanged.
//
// # Watched
//
// Config.Observer hears of every turn's end and every model call (the
// builtin agent's, through the Manager's clients; a box's, through its
// model proxies), and Stats says what runs now and counts the leases:
// package telemetry makes metrics of them (observe.go). Config.Tracer
// traces a turn from the request that sent its message (tracing.go).
// Every turn logs its start and end with the session, the turn and its
// trace.
//
// # Workspaces
//
// A session's repositories are copied (or cloned) once, under
// DataDir/workspaces/session/{id}/{repo}, and survive suspension, restarts
// and new boxes; Delete removes them. WorkspaceDir resolves the other
// scopes of seed 004 (workflow/{id}, run/{id}) for callers that are not
// sessions.
//
// With Config.Disks (harvest serve, unless --no-disk-limits), that
// directory is the mount point of the session's disk (a workflow's,
// shared by its sessions): a loop-mounted ext4 image of limits.disk_bytes
// and disk_inodes that also holds the box's /tmp and HOME, so a box that
// fills it gets ENOSPC and the host is unharmed. After a reboot Recover
// mounts the disks of the live and suspended sessions again before any
// runner starts; a session that ends unmounts its disk (keeping the image
// until Delete, or removing it when nothing ran on it); Delete removes
// it. See disk.go. Whether a session's limits hold is stored with it when
// its box starts (Session.LimitsEnforced, provision.go).
//
// # Admission
//
// Disks are sparse, so what sessions were promised may exceed the host's
// disk. A node keeps a floor of free space on its data directory's
// filesystem (Config.MinFree: by default the smaller of 10% and 5 GiB, at
// least 1 GiB): below it a create, a message that resumes a suspended
// session and an environment's build are refused with a StorageError
// (507 on the API) before anything is stored, and a node of several
// advertises itself full (store.NodeFull) and takes no placements.
// DiskUsage reports free space, floor, and what the sessions' disks hold
// and were promised. See admission.go.
//
// # Budgets
//
// A user is held to their own budget and to their teams' (store.Quota):
// model spend per day (UTC) and sessions live at once. Create refuses a
// session over a live-session cap (*BudgetError, ErrOverBudget: the API's
// 429); every model call of a session's agent is admitted and paid for by
// the session's payer (agents.Payer: the model proxy for a CLI in the
// box, the host client for the builtin), which refuses it once the day's
// cap is reached, and the turn ends failed, kind budget, with why; a turn
// does not start while the cap is reached. See quota.go.
package session
