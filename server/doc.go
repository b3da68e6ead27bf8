// Package server is Harvest's HTTP API: what `harvest serve` listens with,
// what the CLI's `harvest session ...` commands and package client speak.
//
// It is a thin edge over package session: it authenticates, decodes and
// checks requests, calls the session.Manager, and turns its answers and
// errors into JSON with the right status. It keeps no state of its own but
// the open event streams.
//
// # Routes
//
// routes.go has the table, the single list of the API; /openapi.json
// (openapi.json, hand-written) documents it, and TestOpenAPIMatchesRoutes
// fails when they drift (a route, a method, a status, a body field).
//
//	GET    /healthz                      no token
//	GET    /openapi.json                 no token
//	POST   /v1/sessions                  CreateRequest → 201 View
//	GET    /v1/sessions                  ?state=a,b&limit=N&cursor=C&updated_before=T&scope=mine|visible&owner=TOK → SessionList
//	                                     (a page, newest first: limit 1-1000, default 1000; next_cursor
//	                                     continues it, absent on the last page; cursor.go)
//	GET    /v1/sessions/{id}             → View (state, queue, usage, cost)
//	DELETE /v1/sessions/{id}             → 204
//	POST   /v1/sessions/{id}/messages    SendRequest → 202 Message (stored with its event before the reply;
//	                                     Idempotency-Key: a retry gets the same message back, another body 409)
//	POST   /v1/sessions/{id}/cancel      → 204 (the turn, not the session)
//	GET    /v1/sessions/{id}/events      SSE, after Last-Event-ID or ?since=N (sse.go); a final
//	                                     "event: stream.error" says why it ended (StreamTooSlow,
//	                                     StreamUnavailable, StreamDeleted, StreamInternal); a
//	                                     Last-Event-ID past the last event is a 400
//	GET    /v1/sessions/{id}/log         ?after=N&limit=M → EventPage (stored events, JSON)
//	GET    /v1/sessions/{id}/lock        → LockInfo
//	POST   /v1/sessions/{id}/unlock      admin → 204
//	GET    /v1/me                        → Me (the token, its user, admin or not)
//	GET    /v1/users                     admin → UserList
//	POST   /v1/users                     admin, UserRequest → 201 User
//	GET    /v1/users/{id}                admin → User (with identities)
//	PATCH  /v1/users/{id}                admin, UserPatch → User (name, role, disabled)
//	DELETE /v1/users/{id}/identities/{kind}/{subject}  ?issuer=I → 204 (admin: any; a user: their own
//	                                     Slack accounts; slacklinks.go)
//	GET    /v1/slack/links/{code}        → SlackLink (the Slack account a link would link)
//	POST   /v1/slack/links/{code}        → User (the account linked to the caller; 404 used or
//	                                     expired, 409 someone else's)
//	GET    /v1/audit                     admin, ?user=U&action=A&since=T&until=T&limit=N&cursor=C → AuditList
//	GET    /v1/teams                     admin → TeamList; POST TeamRequest → 201 Team (teams.go)
//	DELETE /v1/teams/{team}              admin → 204
//	POST   /v1/teams/{team}/members      admin, TeamMemberRequest → 204
//	DELETE /v1/teams/{team}/members/{u}  admin → 204
//	POST   /v1/tokens                    admin, TokenRequest (user: whose) → 201 TokenCreated (the secret, once)
//	GET    /v1/tokens                    admin, ?user=U → TokenList
//	DELETE /v1/tokens/{id}               admin → 204
//	PUT    /v1/secrets/{scope}/{name}    SecretRequest → 200 Secret (never the value; scope
//	                                     repo:owner%2Fname, admin only, or user:me)
//	GET    /v1/secrets                   ?scope=S → SecretList (an admin's: all; a user's: its own)
//	DELETE /v1/secrets/{scope}/{name}    → 204
//
// # Auth
//
// Every /v1 route needs "Authorization: Bearer TOKEN". Tokens are in the
// store as the SHA-256 of their secret only (store.Token); the request's
// owner is the token's id (and its user, the token's user: "People"
// below). Who sees and acts on which session is package authz's rules,
// applied in access.go: a user sees their own sessions and those on
// repositories they can read (GitHub's permission, a --repo-root's
// policy), and acts on others' only with write access to all their
// repositories; a session a caller may not read does not exist for them
// (404, never 403, so ids cannot be probed); one they read but may not
// act on is a 403 that says why. An admin token sees all of them and
// manages tokens, teams and locks. Secrets
// (secrets.go): a user token manages its own (user:me), only an admin a
// repository's or another token's; a value goes in and never comes out.
// A node's token (several nodes; auth.go, "Node tokens") is an admin's
// that is valid only while its node is live, only for POST
// /v1/sessions/{id}/messages, .../cancel and .../stop, and the only one that may name the sender
// an idempotency key belongs to (Harvest-Sender).
//
// # People and the audit log
//
// Every token belongs to a user (store/people.go; people.go): a person with
// a role (admin, member, viewer), identities elsewhere (a GitHub account,
// later an OIDC subject) and any number of tokens. The user is who caused
// what a request does, whatever the channel: a session records its user
// (the token's; for a session a GitHub comment started, the commenter's,
// made a user at first sight by package ghbot), and so do environments
// and secrets. Tokens predate users: each became a user of its own when
// the store was migrated, and a token made without a user still does, so
// a token sees what it saw before, and more only where a repository is
// shared (access.go).
//
// A request may do the lesser of what its token and its user may: an
// admin token is an admin's only while its user is an admin. The user's
// role and disabled are read with the token on every request (one join),
// so disabling a user refuses their very next request, by token or by
// sign-in cookie. An admin cannot demote or disable themselves.
//
// A browser signs in with a token (websession.go), or as the user of an
// account they already have: GitHub or an OIDC provider (signin.go,
// signin_github.go, signin_oidc.go: the authorization code flow with
// PKCE, the flow's state bound to the browser and taken once). Such a
// sign-in has no token: the user stands where the token would (what it
// starts is owned by the user's id), read with the sign-in on every
// request.
//
// The audit log (audit.go) records the routes that change something:
// sessions' create, send, cancel, stop, delete, unlock and shell, tokens,
// users, secrets, environments, memory edits, sign-ins and refused webhook
// deliveries; each entry says who (user, token), from where (channel: api,
// ui, cli, node; the peer's address), what (action, target) and how it
// ended (ok or the error code). Token, user and secret changes are
// recorded in the transaction of the change itself (store.WithAudit); the
// others right after the handler returns. Only admins read it (GET
// /v1/audit); nothing in the API writes or deletes entries.
//
// # Errors
//
// Every error is {"error":{"code","message"[,"details"]}}; the message says
// what was wrong and what to do. In the order a request is checked:
//
//	404 not_found              no such route, or a path that is not clean (//, /./, /../)
//	405 method_not_allowed     the path exists, the method does not (Allow lists those it takes)
//	503 unavailable            the server is shutting down (Retry-After); while harvest serve drains
//	                           for a restart (session.Manager.Drain), creating a session or sending a
//	                           message is 503 too, later, from the handler, and /healthz says "draining"
//	                           (503): reads, streams, cancel and delete still work
//	401 unauthorized           no token, a header that is not "Bearer TOKEN", an unknown token
//	403 forbidden              an admin route with a user token
//	404 not_found              an id of the wrong shape (refused before any lookup)
//	400 bad_request            an unknown or malformed query parameter; malformed JSON, an
//	                           unknown field, a second value after the object, not UTF-8
//	413 too_large              a body over MaxBody (1 MiB), whatever Content-Length says
//	415 unsupported_media_type a body that is not application/json
//	400 invalid                well-formed but unacceptable (details lists every problem)
//	404 not_found              no such session, or one the caller may not read
//	403 forbidden              a session the caller reads but may not act on (access.go)
//	409 conflict               the session's state does not allow it (it has ended)
//	507 insufficient_storage   creating a session, resuming a suspended one (a message) or preparing an
//	                           environment while the data directory is below the server's floor of free
//	                           space (--min-free): nothing stored; the message names the directory to an
//	                           admin only (session/admission.go)
//	503 unavailable            the store did not answer within the request's budget, or cannot be
//	                           reached (Retry-After; see "Deadlines")
//	500 internal               a bug or a failing store (logged)
//
// # Deadlines
//
// Every request carries a store budget (Config.StoreTimeout, harvest
// serve --store-timeout, default 5 s; store.WithBudget): each store call
// made for it — the token's check, the Manager's reads and writes, the
// journal's commit a send waits for, a stream's replay — gets that long,
// and once one ran out the request's later calls fail at once. A
// database that does not answer (frozen, cut off, a SQLite file another
// process holds locked) is therefore a 503 unavailable with Retry-After
// within about one budget, whatever the route, never a hang:
//
//	list, get, log, lock, tokens, secrets, memory    503 (reads of the store)
//	create, send, cancel, stop, delete, unlock       503; a send cut while its commit waited
//	                                                 may still be stored when the store
//	                                                 answers: retried with its
//	                                                 Idempotency-Key, it is found, not
//	                                                 stored twice
//	events                                           503 before the stream starts; a stream
//	                                                 whose replay the store does not answer
//	                                                 ends with stream.error unavailable
//	                                                 (reconnect with Last-Event-ID); a live
//	                                                 stream needs no store and goes on
//	readyz                                           503 with Retry-After, the store's check
//	                                                 saying it does not answer
//
// The sessions' own writes (the runners', the journal's writer, the
// nodes' keeper) carry no budget: they wait for the store as long as it
// takes and go on where they were. With several nodes, what a request
// does when its session's owner is paused, cut off or dead is package
// server/cluster's ("Following the owner").
//
// Bodies are decoded strictly (decode.go): at most MaxBody bytes, exactly
// one JSON object, DisallowUnknownFields at every depth. Routes that take
// no body accept an empty one or {}, and refuse anything else with a 400
// (never 413 or 415). The fields of a new session are checked by the
// session layer, all at once, so details lists every problem; lengths are
// counted in characters, as openapi.json's maxLength. The decoders are pure
// functions of (Content-Type, bytes), fuzzed by FuzzDecode*.
//
// # Concurrency
//
// Handlers run on net/http's goroutines and share nothing but the Manager
// and the Store, which are safe for concurrent use. An event stream is its
// handler's goroutine reading one journal subscription: it owns the
// subscription and closes it when it returns. It returns when the client
// goes away (the request context), when a write stalls past WriteTimeout,
// when the subscription ends (cut off as too slow, session deleted, journal
// closed), or when Drain is called. Drain, then http.Server.Shutdown (which
// waits for every handler), then Manager.Close: nothing the server started
// outlives Shutdown.
package server
