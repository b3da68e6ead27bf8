// Package llm is Harvest's provider-neutral interface to language models: the
// conversation types, one streaming call, usage and cost, typed errors and
// retries. It imports no vendor SDK; the backends do (llm/anthropic on the
// Anthropic Messages API, llm/openai on OpenAI Chat Completions, which also
// serves vLLM, Ollama, llama.cpp and OpenRouter), and llm/providers opens one
// from a model name such as "anthropic/claude-sonnet-4-5".
//
// # Shape
//
//	caller (agent loop)
//	   |  Client.Stream(ctx, Request, func(Event)) -> *Response
//	Client ── retries, per-attempt timeouts, cancellation, default model
//	   |  Provider.Stream: exactly one HTTP attempt, errors classified as *Error
//	anthropic.Provider | openai.Provider ── official SDK, SDK retries off
//
// Retries live above the providers, in one place, so that both backends retry
// the same way and a test can see every attempt. Providers make one attempt
// each and turn every failure into an *Error whose Kind says what happened;
// the SDKs' own retries are disabled, otherwise two retry loops would nest
// (up to 3 x 5 attempts) and retry-after would be honoured by code we cannot
// observe or bound.
//
// # Conversations
//
// A Message is a Role and a list of Blocks. Block is a closed set of plain
// structs (Text, Thinking, RedactedThinking, ToolUse, ToolResult, Image); a type
// switch over them is exhaustive. They mirror the Anthropic content model
// because it is the richer of the two: the OpenAI backend flattens it (tool
// results become "tool" messages, images in tool results a following user
// message) and documents what it cannot carry. Messages marshal to JSON with a
// "type" tag per block, so a conversation can be stored and resumed.
//
// # Streaming
//
// Stream calls the callback synchronously, on the caller's goroutine, for each
// delta in the order the API sent them: TextDelta, ThinkingDelta, ToolUseStart,
// ToolInputDelta, BlockStop. Every event carries the index of its block in the
// final Message, so a caller can route deltas per block. A slow callback slows
// the HTTP read (TCP flow control); no event is ever dropped. When the stream
// ends, Stream returns the assembled Response: the assistant Message with every
// tool input as complete JSON, the stop reason and the usage. Complete is Stream
// without a callback.
//
// # Retries
//
// Client retries ErrRateLimited, ErrOverloaded, ErrServer, ErrNetwork and
// per-attempt ErrTimeout with exponential backoff and jitter, and honours the
// API's retry-after when it asks for longer. It retries only while no event has
// reached the callback: a caller that has shown half an answer cannot be handed
// a different whole one, so a stream that fails after its first delta returns
// the error and the caller decides (the agent loop can re-run the step).
// Cancelling the context stops everything promptly, including a backoff sleep,
// and the error is ErrCanceled.
//
// # Usage and cost
//
// Usage is normalised to the Anthropic meaning: InputTokens are the prompt
// tokens billed at the full input rate, excluding cache reads and cache writes.
// OpenAI reports prompt_tokens including its cached tokens
// (prompt_tokens_details.cached_tokens), so the OpenAI backend subtracts them:
// InputTokens = prompt_tokens - cached_tokens - cache_write_tokens. Then one
// formula prices both (see Price.Cost), and Usage.PromptTokens gives the whole
// prompt size for either.
package llm
