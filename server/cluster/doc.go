// Package cluster is the HTTP side of running several harvest serve nodes
// on one store: forwarding a request to the node that owns its session,
// handing an event stream over when the owner changes, and the tokens
// nodes use to call each other.
//
// The session side — who owns a session (its lease), taking over a dead
// node's sessions, placing new ones by capacity, carrying workspaces
// between disks — is package session's (session/nodes.go draws its state
// machine). This package asks it two questions, Manager.Owner and
// Manager.PlaceNew, and acts on the answers over HTTP.
//
// Why a package of its own, and not package server: server is the API of
// one node, a thin edge over session that keeps no state but its open
// streams; everything it does is the same with one node or ten. What
// several nodes add sits around it: a handler in front of it (Forward),
// a client of the other nodes (Sessions, which links package client,
// which server does not), a token this node holds in memory and a sweep
// of dead nodes' tokens (Token, SweepTokens). It needs server (the
// node-token format, NewNodeToken, NodeOf), session, store and client,
// and nothing needs it but the command that wires harvest serve. A lone
// server never builds any of it.
//
// # Forwarding
//
// With several nodes (--advertise), a session runs on the node that holds
// its lease, and only that node writes its events (its journal numbers
// them). Any node answers the API: reads come from the shared store, and
// the requests that act on a running session — send a message, cancel,
// delete, unlock, the live event stream, and those that use its box (diff,
// shell) — are forwarded to its owner by a reverse proxy that passes the
// caller's credentials on (the owner checks them against the same store).
//
//	client ─► node B: Forward ─ forwardable? ─ no ─────────────────► B's API
//	                      │ yes: the session's lease and the live nodes
//	                      ├─ B, or nobody (suspended) ───────────────► B's API
//	                      ├─ a dead node's lease not yet run out ────► wait for
//	                      │                                            the takeover
//	                      └─ live node A ─► A's API, Harvest-Forwarded-By: B
//	                                        (A never forwards it again)
//
// A request another node forwarded is never forwarded again: if ownership
// moved meanwhile the Manager answers 503 and the client retries. A
// session nobody owns is handled here: a send takes the lease and resumes
// the session on this node. With --max-sessions, a create received by a
// full node is forwarded to a live node with room (Manager.PlaceNew); when
// every node is full it is created here and queued until a node has room
// (session/nodes_place.go).
//
// # Following the owner (owner.go, forward.go)
//
// The owner is looked up afresh (its lease, then the live nodes) for
// every attempt of a request, never remembered, and watched while the
// request is in flight:
//
//	resolve ─► here/nobody ──────────────────────────────► this node's API
//	   │    ─► a node that is not live holds the lease ──► wait (every poll)
//	   │       (dead; its lease has not run out)             until it moves,
//	   │                                                     at most patience,
//	   │                                                     then this node's API
//	   └─► live node A ─► forward; every poll, read the lease (cached: one
//	                      read per session and poll, whatever the requests)
//	        A answers ─────────────────────────────────────► its answer
//	        A refuses the connection, or the lease moves
//	        before A answers: cancel, resolve again ────────► the new owner
//	        A answers nothing and keeps the lease past
//	        patience ──────────────────────────────────────► 503, Retry-After
//
// poll is TTL/20 (between 100 ms and 500 ms: 150 ms at --lease-ttl 3s,
// 500 ms at the default 10 s), so a request sent to an owner that is
// paused or cut off goes to the new owner within about a poll of the
// lease moving; patience is TTL+TTL/3+2 s, the longest a takeover takes.
// A request is sent again only before any answer started, with its body
// (kept: at most wire.MaxBody); a message sent without an Idempotency-Key
// gets one here (forwarded-<random>), the same for every attempt, so that
// the owners store it once whichever attempts reached them (a paused
// owner that wakes up finds the key, or its write is fenced). The
// look-ups share the request's store budget (Config.StoreTimeout): a
// store that does not answer is a 503 with Retry-After within it, as in
// package server ("Deadlines"). forwardTransport still bounds the wait
// for an answer to a minute (a live owner that never answers).
//
// What each forwarded route does when its owner is gone:
//
//	send, cancel, unlock, delete, diff   to the new owner once the lease moves
//	                                     (or here, once a dead node's lease is
//	                                     released); 503 only after patience, or
//	                                     for a body too large to send again
//	shell                                as above until the upgrade; an open shell
//	                                     ends with its owner's box
//	events                               never 503 for want of an owner: see Streams
//	create (placed on a node with room)  503 with Retry-After if that node does
//	                                     not answer within a minute
//
// # Streams (stream.go)
//
// An event stream served here comes from this node's journal, which has
// only the events this node writes: it is complete only while no other
// node writes the session's events. So the forwarder serves a stream as
// one response made of legs, each starting after the last event the
// client got (Last-Event-ID, which the forwarder keeps as it relays):
//
//	leg from the owner A ── ends when the lease moves off A (watched
//	  │                     every poll), when A sends no headers within
//	  │                     the store budget and a second (paused, cut
//	  │                     off), or when its connection breaks
//	  ▼
//	resolve again ─► another live owner: a leg from it
//	               ─► this node, nobody, a dead owner, or an owner that
//	                  did not answer: a leg served here (the store's
//	                  replay, then this node's journal live), which ends
//	                  once another node takes the lease (watchStream)
//
// The client sees one stream: the first leg's status and headers and
// retry line, every event once and in order (whole events only: a leg
// cut mid-event is resent by the next from the last whole one), no
// reconnect and no 503 while a dead or paused owner's session changes
// hands. Only a stream.error (too slow, deleted, shutting down) or the
// client leaving ends it. A stream another node forwarded here is served
// here and ends when another node takes the lease (the forwarding node
// goes on with the next leg). With --nats-follow (Config.Streams false)
// streams are not forwarded: NATS carries every node's events.
//
// # Webhooks
//
// GitHub delivers to whichever node its webhook URL reaches, and that node
// processes the delivery (package ghbot). When the delivery is a message
// for a session another node owns (a follow-up comment, a review comment,
// a failed check suite), the node sends it to the owner as a client's
// request would be forwarded (Sessions):
//
//	node B: delivery ─► ghbot ─► Sessions.SendMessage
//	          session.Manager.Owner: node A ─► POST A/v1/sessions/{id}/messages
//	              Authorization: Bearer <B's node token>
//	              Idempotency-Key: github-<delivery>   Harvest-Sender: github
//	              Harvest-Forwarded-By: B
//	node A: the token is B's and B is live ─► Manager.SendMessage as ghbot
//	        would on A: owner "" (admin), Key github-<delivery>, Sender github
//
// The message is keyed as the GitHub app's (ghbot.Owner) wherever it is
// stored, so a delivery processed twice (a retry after a lost answer, a
// redelivery, two nodes at once) stores it once: the owner finds the key.
// A cancel ("@bot stop") and a stop (a merged or closed pull request) go
// the same way.
//
// # Node tokens
//
// B's token (Token, made with server.NewNodeToken) is made when B starts,
// kept in B's memory only, valid only while B's heartbeat is (NodeLive is
// server.Config.NodeLive), and only for the routes a node sends (see
// "Node tokens" in package server, which checks them). B deletes it when
// it stops (Token.Remove); any node deletes those of nodes that died
// (SweepTokens); a node whose token another node refuses as unknown makes
// a new one (Token.renewIfGone).
//
// Every request B forwards carries B's token too, in its own header
// (server.NodeAuthHeader), beside the client's address
// (server.ForwardedForHeader): the owner's audit log records the client's
// address when the token is a live node's (server/forwarded.go), and its
// own peer's otherwise. The client's own Authorization is what the owner
// authorizes the request by, as before.
//
// # Concurrency
//
// Forward's handler runs on net/http's goroutines. Each attempt of a
// forward, each leg of a stream from another node, and each stream served
// here starts one goroutine that reads the session's lease every poll
// (through the forwarder's lease cache, under its mutex); the handler
// stops it and waits for it before it goes on. A relay is its handler's
// alone. SweepTokens
// runs on its caller's goroutine until its context ends (harvest serve
// owns it and waits for it). Token's secret is under Token.mu: Sessions
// reads it from webhook workers while a refusal may renew it.
package cluster
