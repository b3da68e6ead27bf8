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
//	                      │ yes: Manager.Owner(id)
//	                      ├─ B, or nobody (suspended, or a dead node's lease
//	                      │  not yet run out) ───────────────────────► B's API
//	                      └─ live node A ─► A's API, Harvest-Forwarded-By: B
//	                                        (A never forwards it again)
//
// A request another node forwarded is never forwarded again: if ownership
// moved meanwhile the Manager answers 503 and the client retries. A
// session nobody owns is handled here: a send takes the lease and resumes
// the session on this node. With --max-sessions, a create received by a
// full node is forwarded to a live node with room (Manager.PlaceNew); when
// every node is full it is created here and queued until a node has room
// (session/nodes_place.go). A forward whose owner does not answer within
// a minute (forwardTransport: a paused or cut-off node keeps its leases
// until they run out) is a 503 with Retry-After: the client retries, and
// once the lease ran out the session is taken over.
//
// # Streams
//
// An event stream served here comes from this node's journal, which has
// only the events this node writes: it is complete only while no other
// node writes the session's events. So a stream served here (its owner is
// this node, nobody, or a node that died and whose lease has not run out
// yet) ends as soon as another node takes the session's lease, and the
// client, reconnecting with Last-Event-ID, is forwarded to that node
// (watchStream). Without that, a client following a dead node's session
// through a survivor, or a session that resumes on another node, or that
// a node paused and resumed lost, would wait forever for events it is
// never sent. With --nats-follow (Config.Streams false) streams are not
// forwarded: NATS carries every node's events.
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
// # Concurrency
//
// Forward's handler runs on net/http's goroutines. A stream it serves
// itself starts one goroutine that reads the session's lease every TTL/3;
// the handler cancels it and waits for it before it returns. SweepTokens
// runs on its caller's goroutine until its context ends (harvest serve
// owns it and waits for it). Token's secret is under Token.mu: Sessions
// reads it from webhook workers while a refusal may renew it.
package cluster
