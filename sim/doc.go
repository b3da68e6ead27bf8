// Package sim is a scripted model server: it speaks the Anthropic Messages
// API and the OpenAI Chat Completions API over real HTTP and answers each
// request from a YAML script.
//
// # Why
//
// Harvest talks to models two ways: its own agent loop calls a model API
// (package llm), and agent CLIs in the sandbox (Claude Code, OpenCode) call
// one themselves. No model API is reachable from our machines, and a fake
// client or a mocked transport would prove nothing about the wire. So the
// same client code that runs in production runs in tests against this
// server, which shapes its replies as the real APIs do: status codes,
// headers (request-id, retry-after), JSON bodies, SSE event names and order,
// tool-call arguments streamed in partial pieces, usage with cache counts,
// and the APIs' own error bodies. It validates requests as the APIs do (a
// tool_result without its tool_use is a 400), so a client bug that the real
// API would reject is rejected here too. The end-to-end tests in e2e/clis
// prove it against the real Claude Code and OpenCode CLIs.
//
// Every request is kept in a log (Server.Requests, and GET /_sim/requests
// as JSON for tests in another process): what the model was sent is what
// tests assert. Record and replay (WithRecord, WithReplay) capture real API
// traffic as cassettes where a real API is reachable.
//
// # Endpoints
//
//	POST /v1/messages               Anthropic; streamed (stream: true) or not; ?beta=true accepted
//	POST /v1/messages/count_tokens  Anthropic; an estimate (4 bytes a token); uses no rule
//	POST /v1/chat/completions       OpenAI; streamed (with stream_options.include_usage) or not
//	GET  /v1/models                 the script's models, in the shape of the API the headers name
//	GET  /_sim/requests             the request log, JSON, oldest first
//
// Anthropic clients take the server's root as base URL (ANTHROPIC_BASE_URL=
// http://127.0.0.1:PORT); OpenAI clients take http://127.0.0.1:PORT/v1. A
// request needs a non-empty key (x-api-key or Authorization: Bearer for
// Anthropic, Authorization: Bearer for OpenAI) and, for Anthropic, an
// anthropic-version header, else the API's 401 or 400. The key is not
// checked; the request log keeps it whole, the log line shows a masked form.
//
// # Scripts
//
// A script is one YAML document. Unknown fields, bad durations, globs and
// regexps, replies that say nothing, and the like fail at load with
// "FILE:LINE: reason".
//
//	mode: match          # match (default) or sequence
//	models: [claude-sonnet-4-5]   # optional: listed by GET /v1/models
//	defaults:            # optional; apply to every reply that does not say
//	  usage: {input_tokens: 100, output_tokens: 20}
//	  delay: 0ms         # before each response
//	  chunk_delay: 0ms   # between streamed events
//	rules:
//	  - name: write-file         # optional; default "rule N"; unique
//	    when:                    # all must hold; omitted: always
//	      api: anthropic         # or openai
//	      model: "claude-*"      # a path.Match glob
//	      turn: 2                # 1 + the number of assistant messages in the request
//	      last_user: "substring" # in the newest user message with text (text sent along with tool results counts)
//	      last_user_regexp: "^fix (bug|issue)"   # Go regexp, same text
//	      tool_result: "substring"   # in the newest tool result(s)
//	      tools: [Write, Bash]   # all offered by the request
//	      system: "substring"    # in the system prompt (and system-role messages)
//	      stream: true           # the request is (not) streamed
//	      max_tokens: 8192       # the request's max_tokens is at most this
//	    times: 1                 # uses; 0 or omitted: unlimited (match mode), 1 (sequence mode)
//	    reply:
//	      thinking: "..."        # a thinking block (OpenAI: reasoning_content)
//	      text: "..."
//	      tool_calls:
//	        - {name: Write, input: {file_path: /x, content: hi}, id: optional}
//	      stop_reason: end_turn  # default tool_use with tool_calls, else end_turn
//	      usage: {input_tokens: 100, output_tokens: 20, cache_read_input_tokens: 0, cache_creation_input_tokens: 0}
//	      delay: 50ms            # before the response starts
//	      chunk_delay: 5ms       # between streamed events
//	      error: {status: 429, message: "...", retry_after: 1s, type: rate_limit_error}
//
// In match mode each request gets the first rule whose conditions hold and
// that has uses left. In sequence mode the rules are used in order, each
// its times; a request the next rule does not match is refused naming that
// rule, and so is one after the last. A request no rule answers gets a 400
// in its API's error shape naming the request (API, model, turn, last user
// text, newest tool result, tools offered) and the closest rule (fewest
// failed conditions, then most that held) with its line and the conditions
// that failed; it is logged with an empty Rule.
//
// Replies are written in Anthropic's terms and mapped for OpenAI:
// stop_reason end_turn/stop_sequence/pause_turn become finish_reason stop,
// max_tokens length, tool_use tool_calls, refusal content_filter (OpenAI's
// own words are accepted too); prompt_tokens is input + cache read + cache
// creation tokens, completion_tokens output, prompt_tokens_details.
// cached_tokens cache read. Usage not given is estimated: input from the
// request size, output from the reply (4 bytes a token). An error replaces
// the reply: its type defaults from the status (Anthropic: 400
// invalid_request_error, 401 authentication_error, 403 permission_error,
// 404 not_found_error, 413 request_too_large, 429 rate_limit_error, 500
// api_error, 529 overloaded_error; OpenAI: invalid_request_error, 429
// requests/rate_limit_exceeded, 5xx server_error) and retry_after sets
// retry-after in whole seconds (rounded up) plus retry-after-ms, which the
// official SDKs read first.
//
// Streams follow each API's grammar. Anthropic: message_start,
// content_block_start (a ping after the first), content_block_delta
// (thinking_delta then signature_delta; text_delta; input_json_delta, an
// empty partial_json first), content_block_stop, message_delta with the stop
// reason and cumulative usage, message_stop. OpenAI: a role chunk, content
// (and reasoning_content) chunks, per tool call a header (index, id, type,
// name, empty arguments) then argument pieces, a finish_reason chunk, the
// usage chunk with empty choices when asked for, data: [DONE]. Text is cut
// into pieces of one to five words, arguments into pieces of 6 to 23 bytes.
//
// sim/README.md has examples and what the real CLIs send.
package sim
