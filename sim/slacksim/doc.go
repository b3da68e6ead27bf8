// Package slacksim is a stand-in for Slack: a real HTTP server that
// speaks Slack's Web API (the methods Harvest's Slack app uses), Socket
// Mode and the Events API over HTTP, for tests of Harvest's Slack
// integration.
//
// # Why
//
// Harvest takes work from Slack: a mention starts a session in its
// thread, the thread shows progress, a button stops a turn, a slash
// command asks for status. No Slack is reachable from our machines and
// a mocked client proves nothing about the wire, so the clients Harvest
// ships (slack-go, pointed here with slack.OptionAPIURL) and Slack's own
// Bolt framework run in tests against this server, which is itself
// checked against Slack's published descriptions (package slackschema).
//
// # What it serves
//
// The Web API at /api/{method} (Methods): api.test, auth.test,
// apps.connections.open (the app-level xapp- token; every other method
// takes the bot's xoxb- token, else not_allowed_token_type),
// chat.postMessage, chat.update, chat.delete, chat.postEphemeral,
// chat.getPermalink, reactions.add, reactions.remove,
// conversations.replies, conversations.info, users.info (with the
// profile's email) and views.open (with an interaction's trigger_id,
// once, within 3 s). Arguments come as a form, a query or a JSON body;
// the token as Authorization: Bearer or a token argument. Answers are
// HTTP 200 with {"ok": true, ...} or {"ok": false, "error": "..."} and
// Slack's error codes (channel_not_found, not_in_channel, no_text,
// message_not_found, cant_update_message, already_reacted,
// no_reaction, user_not_in_channel, invalid_auth, not_authed, ...);
// over a rate limit, 429 with Retry-After (limits.go).
//
// State is in memory: the workspace (one team, one app, its bot user),
// people (AddUser, with an email), channels (AddChannel, public or
// private, the bot a member unless told otherwise) and direct messages
// (OpenIM), messages and threads, reactions, ephemeral messages, the
// modals opened, the request log (Calls) and every envelope with its
// attempts (Envelopes).
//
// The control API acts as people: Post (a mention, a thread reply, a
// direct message), Edit and Delete of their messages, Click (a button,
// or an option of a static_select, of a message: block_actions), Command
// (a slash command); and as Slack:
// Disconnect (a disconnect message, "warning" or "refresh_requested",
// then the close), Drop (connections ended without a close frame),
// LoseAcks (the next acks of the envelopes whose payload holds some text
// lost with the connection they came on: their envelopes come again, on
// another connection if one is open),
// SetLimit, Storm (every call refused with 429 for a while),
// SetRequestURL and VerifyURL (url_verification), Tamper (HTTP
// deliveries signed with another secret or stamped in the past, for a
// receiver's refusals). A click or a command
// hands the app a trigger_id (views.open takes it once, within 3 s) and a
// response_url (POST /response/{id}: up to 5 answers in 30 minutes,
// ephemeral, in_channel, replace_original or delete_original). Each is
// also POST
// /_sim/slack/<noun> with JSON, for a test in another process (control.go,
// README.md).
//
// # Delivery
//
// Each event, click and command is an envelope (envelope.go has its
// state machine). In Socket Mode (the default) it goes to one open
// connection, the one that waited longest, framed as Slack frames it
// (envelope_id, type events_api / interactive / slash_commands,
// payload, accepts_response_payload, and for events retry_attempt and
// retry_reason); the app acks with {"envelope_id": ...} within
// AckTimeout (3 s) or an event is sent again, on whatever connection is
// open then, after RetryBackoff (0, 1 min, 5 min: three retries, as
// Slack). With no connection open an envelope waits for one.
// Interactions and commands are never retried: Slack shows the person
// an error instead. Each attempt records the connection it went to and
// the one its ack came on (Attempt.AckConn). Every connection is pinged (a WebSocket ping every
// Options.PingInterval, 10 s: Slack's clients reconnect after 30 s of
// silence) and closed if it stops answering. A slash command's ack may carry the answer
// ({"text": ..., "response_type": ...}), as its HTTP answer may.
//
// With a Request URL (Options.RequestURL, SetRequestURL) the same
// envelopes are POSTed there, signed (httpdeliver.go: X-Slack-Signature
// v0 over "v0:timestamp:body" with the signing secret, and
// X-Slack-Request-Timestamp), events as JSON, clicks as a payload form
// field, commands as a form; a non-200 or no answer within AckTimeout is
// a miss, and an event's retries carry X-Slack-Retry-Num and
// X-Slack-Retry-Reason.
//
// Slack sends an app subscribed to app_mention and message.* the
// message events of every conversation the bot is in, its own messages
// and edits included; so does the stand-in, and an app must ignore its
// own (bot_id) as it must on Slack.
//
// # What it does not do
//
// One workspace and one app; no OAuth installs, no Enterprise Grid, no
// files, no conversations.history or users.list, no modal submissions
// (view_submission) or view updates, no message metadata, no
// unfurling, no mrkdwn parsing (mentions are found as "<@U...>" in the
// text), no app_home or reaction events, no chat:write.public (the bot
// posts only where it is a member: not_in_channel). Ephemeral messages
// cannot be clicked. A user object carries no is_email_confirmed: Slack
// sends it, but the description's objs_user forbids it (a person's
// profile email is all there is to match on).
//
// # Concurrency
//
// One mutex, Server.mu, guards all state; Web API and control handlers
// hold it for their whole run and never wait on the network under it.
// Goroutines, all started by Start (or by a request) and waited for by
// Close: the HTTP server with its handlers; each Socket Mode connection's
// handler, which reads acks until the connection ends; the dispatcher
// (one), which moves envelopes by their deadlines on the Clock, writes
// frames to sockets without the lock and closes connections whose
// disconnect grace is over (each close in its own goroutine); one
// goroutine per HTTP delivery in flight. Close ends them all: it cancels
// the server's context (deliveries, socket reads), shuts the HTTP server
// down and ends every socket.
//
// Time: rate-limit windows, ack deadlines, retry backoff, trigger_id
// and response_url expiry and a disconnect's grace all run on
// Options.Clock, so a test moves a fake clock instead of sleeping.
package slacksim
