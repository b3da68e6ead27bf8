// Package opencode is the agent that runs the real OpenCode CLI (sst's
// opencode, pinned and tested at TestedVersion) in a box, driven through
// its HTTP API.
//
// # Why a server
//
// `opencode serve` is OpenCode's headless mode: every client of OpenCode
// (its TUI included) drives it through the same HTTP API and server-sent
// event stream, so the API is the stable, documented surface, described
// by the OpenAPI document the server itself serves. Running `opencode run`
// per message would start the CLI (2-3 s in a box) for every turn and give
// no clean way to cancel or to watch a turn.
//
// # Process model
//
//	host (Harvest)                          |  box (network none)
//	Agent ── http.Client ── Sandbox.Dial ───┼──► harvest-agent ──► 127.0.0.1:PORT
//	                                         |        opencode serve (box user)
//	model proxy ◄── box listener ◄───────────┼──── OpenCode's provider (ModelURL)
//
// The server runs as the box user (uid 1000 when Harvest runs as root),
// in Config.Workdir, bound to the box's 127.0.0.1 on a port it picks
// (--port 0; the agent reads the address it prints). Nothing outside the
// box can reach it: every request is a connection the box's agent makes
// inside the box (Sandbox.Dial) and carries over Harvest's connection to
// it. The model is reached the other way, through a box listener serving
// the model proxy (tests serve `harvest sim` there): OpenCode is
// configured with one provider, "harvest", an OpenAI-compatible
// (@ai-sdk/openai-compatible) or Anthropic (@ai-sdk/anthropic) endpoint
// whose baseURL is Config.ModelURL/v1 and whose key, the session's proxy
// token, is read from a 0600 file ({file:...}) rather than the
// environment, so the tools' environment does not carry it.
//
// The config is passed in OPENCODE_CONFIG_CONTENT, which OpenCode merges
// last, over the user's and the repository's opencode.json: the provider
// and model, no snapshots (Harvest tracks the workspace with git), no
// formatters or language servers, no sharing, no autoupdate, and
// permissions that allow what works in a box and deny the question tool,
// web access and doom-loop repeats: nobody could answer a prompt during a
// turn. A permission or question OpenCode asks anyway is rejected through
// the API. OPENCODE_DISABLE_AUTOUPDATE, _MODELS_FETCH, _LSP_DOWNLOAD and
// _SHARE and an offline npm keep it from reaching for the network at
// start (the box has none: each attempt would only fail, or wait).
// Sessions are created with a title, which saves the model request
// OpenCode otherwise makes to invent one.
//
// The server starts in New and runs until Close. When it dies (a crash, a
// kill, a broken event stream), the turn fails and the next turn starts a
// new one, which finds the session in OpenCode's database under the box
// user's HOME (~/.local/share/opencode/opencode.db, SQLite) and continues
// it.
//
// # API calls
//
//	GET  /global/health                   version (at start)
//	GET  /doc                             OpenAPI document: compatibility (at start)
//	POST /session {title}                 the session (at start, unless resumed)
//	GET  /session/{id}                    is the resumed session there (at start)
//	GET  /event                           events, one stream per turn
//	POST /session/{id}/prompt_async       the turn's prompt (204; work goes on)
//	POST /session/{id}/abort              cancel, watchdog, Close
//	GET  /session/status                  is the session still busy after an abort
//	POST /permission/{id}/reply           reject a permission prompt
//	POST /question/{id}/reject            reject a question
//	GET  /session/{id}, /session/{id}/message   State, at the end of each turn
//
// # Compatibility check
//
// At start the agent reads the server's OpenAPI document (GET /doc) and
// CheckAPI checks that every operation above exists with its operation id
// and the body fields the agent sends, that the Event union has every
// event type the agent maps, and that each message part and tool state it
// reads has the fields it reads. A server that lacks any of them is an
// *IncompatibleError naming the version (GET /global/health) and each
// missing piece: New fails with it, and so does every turn after. A
// different version whose API has all of it is used, with a warning.
//
// # A turn
//
// Turn opens the event stream (and waits for server.connected, so nothing
// is missed), posts the prompt with prompt_async and maps the events of
// its session until the session is idle again. Every event but the
// stream's own heartbeats counts as a sign of life for the watchdog.
//
//	OpenCode event                          Harvest payload
//	(before the prompt)                     turn.started
//	message.part.delta, text part           assistant.delta
//	message.part.updated, text, time.end    assistant.message (also when the
//	                                        message's first tool call starts,
//	                                        or its step ends, if not yet)
//	message.part.delta, reasoning part      assistant.thinking.delta
//	message.part.updated, reasoning, end    assistant.thinking
//	tool part, first state past pending     tool.started (input, summary)
//	tool part running, metadata.output      tool.output (what is new of it)
//	tool part completed / error             tool.finished (output / is_error)
//	step-finish part                        step.finished (tokens, cost, reason)
//	session.error                           remembered: the turn fails
//	session.status idle / session.idle      turn.finished (result: the last
//	  (after busy)                          text; usage and cost: the steps')
//	                                        or turn.failed (the error)
//
// Parts of user messages (OpenCode echoes the prompt) and parts of
// messages the turn never saw announced are ignored, and an idle before
// the session went busy is not this turn's end: the second idle an
// aborted turn sends may arrive on the next turn's stream. OpenCode's
// token counts are Harvest's: input excludes cache reads. Its cost is
// computed from the price the agent puts in the model's config
// (Config.Prices; 0 for a model it does not list).
//
// Failures (event.TurnFailed.Kind): session.error of APIError or
// ProviderAuthError is event.FailModel, ContextOverflowError
// event.FailContext, MessageOutputLengthError event.FailMaxTokens, others event.FailCLIError;
// the server exiting or its stream breaking is event.FailCLICrashed (with how it
// ended and the end of its output); no event for NoOutputTimeout is
// event.FailCLIHung (the session is aborted first); a server that does not start,
// or is incompatible, event.FailCLIStart; a lost box event.FailSandbox.
//
// # Cancel
//
// When the turn's context ends, the agent posts abort: OpenCode stops the
// model request and kills the running tool's process tree (the tests check
// that no process of it is left). The turn waits for the session to go
// idle, at most AbortGrace, mapping what comes meanwhile; a session that
// does not stop gets its server stopped (the next turn starts a new one).
// Tool calls left open are finished as errors ("interrupted"), and the
// turn ends turn.cancelled with context.Cause as the reason.
//
// # Resume
//
// State is OpenCode's session id and the session's conversation, read
// through the API at the end of every turn (GET /session/{id} and its
// messages with their parts: exactly what `opencode export` writes),
// gzipped (a few KiB per exchange; bounded by MaxStateBytes uncompressed,
// beyond which State fails and the caller keeps its previous state). It
// is nil before the first turn. New with a state writes the conversation
// into the new box and runs `opencode import` before it starts the server,
// so the session keeps its id and the resumed turn's model request
// carries the whole earlier conversation. The workdir must be the same
// (OpenCode files sessions by directory). Reading the conversation through
// the API rather than copying the SQLite database keeps State to one
// session, consistent (no WAL to copy), and in a format OpenCode itself
// imports.
//
// # Concurrency
//
// Turns are sequential (the agent.Agent contract). A turn owns its event
// stream: one reader goroutine, started by subscribe and waited for when
// the turn ends (subscription.close). The server process's output is
// copied by the sandbox package's goroutines, which Process.Wait waits
// for; nothing else runs in the background. Agent.srvMu serialises
// starting and stopping the server and is never held across a turn's
// event loop; Agent.mu guards the session id, the version and the saved
// state, and is never held across I/O. State and Close may be called
// during a turn: State answers the state saved at the end of the last
// one; Close stops the server, which ends a running turn with event.FailCLICrashed.
//
// # Weak points
//
// A tool process tree survives a server that is killed (not aborted): the
// bash tool starts commands in their own session, so they are orphaned,
// not killed, when the server dies; they live until they end or the box
// does. OpenCode's own limits apply within a turn (its bash timeout: 2
// minutes by default, at most 10); NoOutputTimeout is the agent's only
// bound on a turn that keeps reporting progress. The permission and
// question rejection is a backstop the tests do not reach: the config
// denies what would ask.
package opencode
