// Package claudecode is the agent that runs the real Claude Code CLI
// (pinned: 2.1.197) in the session's box, as the box's unprivileged user,
// and maps what it prints onto Harvest events. Harvest keeps the things it
// owns (the box, the queue, events, budget, the saved conversation) and
// leaves the agentic loop, its tools and prompts to Claude Code.
//
// # Process model
//
// One long-lived process per box, started by the first turn:
//
//	claude -p --input-format stream-json --output-format stream-json --verbose
//	       --include-partial-messages --permission-mode bypassPermissions
//	       [--model M] [--append-system-prompt INSTRUCTIONS]
//	       (--session-id ID | --resume ID)
//
// in Config.Workdir, with HOME and CLAUDE_CONFIG_DIR out of the workspaces
// (default: the box's HOME, a tmpfs in local boxes, and HOME/.claude),
// ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY set to the in-box model endpoint
// and the session's token, and every kind of traffic the box cannot make
// switched off (CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, DISABLE_AUTOUPDATER,
// DISABLE_TELEMETRY, DISABLE_ERROR_REPORTING, ...). Haiku and subagent models
// are pinned to Config.Model, so the CLI asks the model endpoint for one
// model only. 2.1.197 needs --verbose for stream-json output and refuses
// bypassPermissions as root (the box user never is). Harvest chooses the
// session id (a UUID) so it is known before the CLI prints anything.
//
// A turn writes one line on stdin,
//
//	{"type":"user","message":{"role":"user","content":PROMPT}}
//
// and reads stdout until the CLI's `result` line. Claude Code then waits for
// the next line on stdin, so the follow-up turn reuses the process (and its
// prompt cache). After `result` the turn sends a read-only control request
// ({"type":"control_request","request_id":…,"request":{"subtype":"mcp_status"}})
// and ends when its control_response arrives: that proves the CLI is idle and
// listening, catches a CLI that hangs after its result within the same turn,
// and leaves nothing of this turn to be read by the next.
//
// # Lines and events
//
//	stdout line                                    event
//	system/init (each turn)                        logged (model, session)
//	stream_event message_start                     a step begins (ends the previous one)
//	stream_event content_block_delta text          AssistantDelta
//	stream_event content_block_delta thinking      ThinkingDelta
//	stream_event content_block_delta input_json    ToolInputDelta
//	stream_event message_delta                     the step's final usage and stop reason
//	assistant, text block                          AssistantMessage
//	assistant, thinking block                      Thinking
//	assistant, tool_use block                      ToolStarted{call id, tool, input, summary}
//	user, tool_result block                        ToolFinished{output, is_error, duration}
//	(next step, or result)                         StepFinished{usage, cost}
//	system/compact_boundary                        Compaction{pre_tokens, post_tokens}
//	result success                                 TurnFinished{result, usage, cost, steps}
//	result is_error, api_error_status              TurnFailed kind model
//	result error_max_turns / error_max_budget_usd  TurnFailed kind max_steps / budget
//	result other errors                            TurnFailed kind cli_error
//	control_request (from the CLI)                 answered with an error, logged
//	anything else that is JSON                     logged, ignored
//	anything that is not JSON                      TurnFailed kind cli_protocol
//
// A step is one model call of the main conversation and the tool calls it
// asked for, as in the builtin agent, so StepFinished comes after those
// calls' results. Subagents' (Task) lines carry parent_tool_use_id: their
// tool calls are mapped (summary "subagent Bash: …"), their text is not.
// Claude Code reports cost per turn, and as a running total per process
// (total_cost_usd); the turn's cost is the difference from the previous
// result of the same process. Steps get an estimate from Config.Prices, and
// the last step what is left of the turn's cost, so steps add up to what
// Claude Code charged (the session sums steps). Usage per step is exact (the
// reply's message_delta); the turn's usage is the result's (main loop only).
// Every ToolStarted gets a ToolFinished, an error one if the turn ended
// first.
//
// # Cancel ladder
//
// When the turn's context is cancelled: the CLI's own interrupt
// (control_request subtype "interrupt"; 2.1.197 answers a control_response,
// rejects the running tool call, kills its processes and prints a `result`
// error_during_execution within ~100 ms); after Config.InterruptGrace without
// that result, SIGINT to its process group (2.1.197 then prints the result
// and exits); after InterruptGrace again, the sandbox kills the process tree.
// The turn ends with TurnCancelled (reason: the context's cause). A process
// that was killed or exited is started again by the next turn, with --resume.
//
// # Watchdog
//
// A turn fails, and the process is killed, when the CLI prints nothing for
// Config.NoOutputTimeout (cli_hung; default 15 min, above the Bash tool's own
// 10-minute limit), does not answer the control request after its result
// within Config.ResultTimeout (cli_hung), exits during the turn (cli_crashed,
// with the exit status and the end of its stderr), or prints a line that is
// not JSON or longer than 32 MiB (cli_protocol). The next turn starts the CLI
// again with --resume, so the conversation goes on from its transcript. A CLI
// that exits after a complete result finishes its turn normally; the next
// turn starts a new one.
//
// # Resume across suspension
//
// Claude Code keeps the conversation in CLAUDE_CONFIG_DIR/projects/<cwd with
// every non-alphanumeric character as '-'>/<session>.jsonl (plus
// <session>/ for tool results kept apart and subagent transcripts). State
// (not the turn: the answer is not held back) copies those files out of the
// box into memory, incrementally (the transcript only grows), after waiting
// for the last turn's last line to reach it: 2.1.197 writes the transcript
// 100-200 ms after printing the line; Close copies them one last time.
// State returns the session id and the files (a gzipped
// tar; the transcript grows with every tool output, and the copy is
// bounded by Config.MaxStateBytes). New writes them back into the new box,
// as the box user, and the first turn starts the CLI with --resume ID, which
// sends the whole earlier conversation to the model.
//
// # Concurrency
//
// Per running CLI, three goroutines (process.go), started with it and
// waited for when it is killed or released: the stdout reader (lines to the
// turn; after a kill it discards so the box never blocks), the stdin writer
// (lines from the turn; a blocked write ends with the process), and the
// waiter (closes both pipes once the process has exited and its output was
// delivered). The turn's goroutine does everything else: it maps lines,
// runs the watchdog and the cancel ladder in one select, and calls emit,
// never concurrently. Agent.mu guards the process pointer, the saved files
// and the request counter; State and Close may run during a turn (Close
// kills the CLI, the turn then fails).
package claudecode
