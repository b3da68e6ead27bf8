// Package modelproxy is the only way agents in a box reach a model: a
// reverse proxy for the Anthropic Messages API and the OpenAI Chat
// Completions API that runs on the host, takes a per-session token where
// the API wants its key, and adds the real key itself.
//
// # Why
//
// Agent CLIs (Claude Code, OpenCode) call the model themselves, so they
// need an endpoint and a key. A box has no network, and whatever is in a
// box — its environment, its files, its process table, anything a
// prompt-injected agent can print — must be assumed to leak. So the real
// key never enters it: the session layer serves this proxy on a box
// listener (sandbox.Sandbox.Listen, bridged by the in-box agent), points
// the CLI at it (ANTHROPIC_BASE_URL, an OpenAI base URL) and gives it a
// token as its API key. The token is worth nothing outside Harvest and
// nothing after its session ends. Because every model call of the box
// passes here, this is also where the session's spending is counted and
// its budget enforced: the CLIs report cost, but a box cannot be trusted
// to report its own.
//
// # Tokens
//
// Grant registers a session and returns a token ("harvest-session-" and
// 256 random bits) and its revoke function. The token is accepted as
// x-api-key or Authorization: Bearer on either API; the proxy keeps only
// its SHA-256 and never logs it. Revoking a token refuses its next requests
// (401) and cancels its requests in flight. Several live grants of one
// session share its spending and budget (the newest grant's budget
// applies; SetBudget changes it); Grant.SpentUSD carries a session's
// spending over a Harvest restart. Grant.Admit is a further check of the
// caller's before each model call (the session layer's: its user's and
// teams' daily budgets), refused as a spent budget is.
//
// # A request
//
//	box CLI ──► route (404 for paths it does not serve: nothing forwarded)
//	        ──► token (401 without a live one: nothing forwarded)
//	        ──► body, at most Config.MaxBodyBytes (413)
//	        ──► budget: spent >= budget → 402; budget on an unpriced model → 400
//	        ──► Grant.Admit: an error → 402 with its text
//	        ──► upstream, with the client's credentials, cookies and
//	            hop-by-hop headers removed and the real key added
//	        ◄── response: keys scrubbed (headers and body), Set-Cookie
//	            dropped; streams flushed event by event; usage metered
//
// Served: POST /v1/messages and /v1/messages/count_tokens (Anthropic; the
// query, like ?beta=true, is kept), POST /v1/chat/completions and
// /chat/completions (OpenAI), GET /v1/models (to the API whose headers the
// request carries). Claude Code's connectivity probe (HEAD /) gets a 404
// like the real API's, and carries on.
//
// The proxy's own refusals come in the API's error shape — Anthropic
// {"type":"error","error":{"type","message"}}, OpenAI
// {"error":{"message","type","param","code"}} — so the CLI shows the
// message as it shows the API's, and they carry x-should-retry: false. A
// spent budget is 402 (Anthropic billing_error, OpenAI insufficient_quota),
// chosen by trying the CLIs against harvest sim: Claude Code 2.1.197 retries
// 429 and 5xx ten times over minutes, and even a 401 unless told
// x-should-retry: false; OpenCode 1.18.33 retries 429 too. Given a 402,
// each makes no further request and ends its run with "harvest: the model
// budget of session … is spent ($… of $…); raise …" (Config.BudgetHelp
// says how). The tests run both CLIs into a spent budget.
//
// # Keys never reach the box
//
// The real keys are added on the host and scrubbed from everything the
// proxy returns: header values, bodies (an upstream error that echoes the
// request's headers), and streams, where a key split across reads is still
// caught (the scrubber holds back only bytes that could start a key, so an
// SSE event, which ends in a newline, is never held). The proxy asks the
// upstream for gzip itself, and decodes it, so it always scrubs plain bytes;
// an encoding it cannot decode is refused (502). Keys shorter than
// MinScrubLen are placeholders (a local server's "ollama") and are not
// scrubbed. Logs carry sessions, paths, models, statuses and usage, never a
// key or a token.
//
// # What is recorded
//
// For each model call answered 2xx the proxy reads the usage the response
// reports — Anthropic's message_start and message_delta (cumulative) or
// body usage; OpenAI's usage chunk or body usage, normalised to package
// llm's meaning (input excludes cache reads and writes) — prices it with
// Config.Prices by the model the response names (else the one requested),
// adds it to the session's spending and calls Grant.OnUsage with a Usage.
// It does so when it sees the stream's last event (message_stop,
// data: [DONE]) or the whole body, before passing that on, so the client's
// next request finds the budget up to date; a response cut short is
// recorded with what it reported until then (Usage.Complete false). An
// OpenAI stream that did not ask for usage is made to
// (stream_options.include_usage): otherwise a box could stream uncounted.
// count_tokens and models calls cost nothing and are not recorded.
//
// The budget is checked before each call, against what has been recorded:
// calls in flight together can overshoot it by what they cost. An upstream
// that reports no usage is not counted (logged as a warning).
//
// # Watching it
//
// Config.Observer hears of every request once it is answered (how it
// ended, its usage: package telemetry's metrics). A model call of a grant
// with a Trace is a span ("chat MODEL", with its tokens and cost) under the
// span of the context Trace returns: the session's turn running, so a CLI's
// model calls land in its turn's trace although the CLI knows nothing of
// it. Nothing of the trace is sent upstream.
//
// # Concurrency
//
// A Proxy is safe for concurrent use; one serves every session. Proxy.mu
// guards the token and session tables and the spending; it is never held
// while calling out (upstream, OnUsage, logger). Each request's state lives
// on its own goroutine: the ReverseProxy runs its hooks and reads the
// response there. OnUsage runs on that goroutine before the client gets the
// end of the response, so it must be quick. Serve owns its goroutine and
// returns only once the server and every handler have stopped.
package modelproxy
