// Package builtin is Harvest's own agent: the agentic loop of seed 004,
// running in the Harvest process, with its tools acting inside the session's
// sandbox through the in-box agent. Model keys stay in Harvest; the box only
// ever sees tool calls.
//
// # The loop
//
// A turn takes one user message to a result:
//
//	            ┌────────────────────────────────────────────────────────┐
//	            ▼                                                        │
//	prompt ─► checks ─► compact? ─► model call ─► no tool calls ─► STUCK.md? ─► Stop hooks ─► turn.finished
//	hooks     │ cancelled/timeout   (streamed)    │                  │ yes       │ block: go on (≤3)
//	          │ max_steps, budget                 │                  ▼           │
//	          ▼                                   ▼               stuck ─► turn.failed{stuck}
//	     turn.failed / turn.cancelled        tool calls: pre hooks → run → post hooks
//	                                              │ (read-only ones of a step in parallel,
//	                                              │  the others one at a time, in order)
//	                                              ▼
//	                                         loop detector: first hit warns the model,
//	                                         second ends the turn (loop.detected, turn.failed{loop})
//
// Limits (agent definition harness_config, overridable by harvest run flags):
// max_steps (default 200 model calls a turn), timeout (default 1h, the turn's
// wall clock, tools included), budget_usd (checked after each step against the
// priced usage; a budget on an unpriced model is refused), max_output_tokens
// (each reply's cap, default 16384: a cut-off reply is resumed, its
// incomplete tool calls answered with an error, and three cut-offs in a row
// end the turn). Every end of a turn is exactly one of turn.finished,
// turn.cancelled (the caller's context) or turn.failed with a Kind* kind and
// a reason written for the user.
//
// # The conversation stays valid
//
// Whatever stops a turn — a cancel mid-stream, a cancel while tools run, a
// crash between two commits — the conversation left behind is one the model
// APIs accept: a partial reply is dropped, tool calls without results get an
// error result (closeDangling), and consecutive user content is merged into
// one message (appendUser). State serialises it, with the todo list, so that
// a suspended session resumes exactly where it was.
//
// # Concurrency
//
// Turn runs on the caller's goroutine. The only goroutines it starts run the
// tool calls of one group (several read-only calls, or one call that may
// write) and wait for them; the turn waits for all of them before going on.
// While they run, the turn's goroutine emits their live output (tool.output,
// handed over on a channel), so emit is only ever called from the turn's
// goroutine, never concurrently. Hooks run in
// order, never concurrently. State and Messages may be called from another
// goroutine while a turn runs (the conversation is committed under a mutex
// after each change).
//
// # Why tools run in the box and the loop does not
//
// Running the loop inside the box (as an agent CLI does) would put the model
// key where the agent's code runs. Here the box gets exactly what the tools
// do — file operations and processes through the in-box agent — so an agent
// that goes rogue inside the box has nothing to steal, and a tool call costs
// one round trip on the box's connection (about 0.1 ms on the local backend;
// see BENCHMARKS.md for the loop's own overhead per step).
package builtin
