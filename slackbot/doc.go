// Package slackbot is Harvest's Slack app: a mention in a channel, or a
// direct message, starts a session; its thread is the session: replies
// there are follow-ups, the thread shows the turn's progress and ends
// each turn with a final message; a Stop button and a /harvest command
// steer it.
//
// # A request's way
//
//	Socket Mode (socket.go) ─┐                 accept: event_id recorded once,
//	POST /v1/slack/events ───┴─► ack ◄────────  with the message, pending until
//	                               │            handled (inbox.go; a retry is seen,
//	                               │            a crash's leftovers handled at start)
//	(http.go: signature v0,        │
//	 5-minute window)              ▼ a goroutine per event, one per thread at a time
//	onMessage (start.go) ─► who asks (people.go: a slack identity, else the
//	                        profile's email; unknown: an ephemeral how-to-link)
//	                     ─► 👀 ─► the repository (repo.go: in the message, else the
//	                        channel's default, else a picker of those they may
//	                        use: picker.go; the choice, a click, goes on below)
//	                     ─► may they (authz, as every channel) ─► Create
//	                        (id derived from the thread) ─► the thread recorded
//	                     ─► the watcher (watch.go): progress, final message, ✅/❌
//
// A reply in a session's thread is a message to it (queued while a turn
// runs, as the API's); an edit adding a mention to a message that
// started nothing is a request, other edits and deletions send nothing
// to the agent and stop nothing (edits.go says what each is told); a
// click on Stop, or /harvest stop, cancels the running turn
// (commands.go). An unknown person's replies in a thread
// get the how-to-link note once per thread (and reach nothing); a known
// one without write access to the session is refused, ephemerally. The sessions are owned by Owner ("slack")
// and caused by the asker's user (store.Session.User).
//
// # Slack's limits
//
// Every call goes through one limiter (rate.go): nothing is asked inside
// a 429's Retry-After, chat.update at most once per UpdateEvery per
// channel, the progress message's edits coalesced.
//
// # Several nodes (nodes.go)
//
// With several harvest serve nodes on one store (Config.Node), each runs
// the Slack app, on its own Socket Mode connections (or behind the same
// Request URL):
//
//   - An event is processed once cluster-wide: its id is recorded in the
//     shared store before it is acknowledged (events.go), so the node
//     that records it first processes it and any other acknowledges it
//     and drops it.
//   - The node that processes a mention creates the session (which takes
//     the session's lease there). A reply, a Stop click or /harvest stop
//     received by a node that does not own the session is sent to the
//     owner by the session layer given as Config.Sessions
//     (server/cluster.Sessions, as the API forwards them): the message is
//     stored once, under the key naming the Slack message.
//   - A thread's watcher (progress edits, final messages, ✅/❌) runs on
//     exactly one node: the one holding the session's lease, whose
//     journal writes the events it paints. Every NodeEvery each node
//     starts the watchers of the Slack sessions whose lease names it and
//     stops those whose lease names another node (a session nobody holds
//     keeps the watcher it has, which paints what was written before the
//     lease was let go). A node that takes a session over (its owner
//     died or was cut off) starts the watcher from what the thread shows
//     (store.SlackThread.Shown) and edits the turn's progress message
//     recorded in the thread (SetSlackThreadTurn) rather than posting a
//     second; the interrupted turn's end, which the new owner writes,
//     gets one final message, from it, and ✅/❌ on the message that asked
//     (its key). A watcher checks the lease once more before each
//     message it posts and stands down if another node holds it: a node
//     that was paused does not post what the new owner posts. (The check
//     and the post are two calls: a node paused between them, past the
//     takeover, may still post that one message.)
//
// # Concurrency
//
// A Bot is safe for concurrent use. Its maps (thread locks, watchers,
// the user cache) are guarded by mu, never held across a call to Slack
// or the store. Goroutines, each started by goFn and waited for by
// Close: the Socket Mode loops (one a connection), the pruner (one), the
// scanner of pending events (one), with several nodes the watchers'
// placer (one), one per event (with its claim's renewer), click or stop
// being handled, and two per watched session (the follower and its
// painter). Close cancels the Bot's context: handlers
// give up their calls, watchers end.
package slackbot
