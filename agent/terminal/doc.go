// Package terminal is the terminal agent (seed 001): any interactive CLI on
// a pseudo-terminal in the session's box, driven the way a person at a
// keyboard would. Its raw bytes stream out as terminal.output events (a
// web terminal replays them byte for byte), the prompt is typed into the
// PTY, and a turn ends on a completion signal, with a timeout fallback.
// Claude Code in interactive mode is the first target; any other REPL works
// with a done pattern or the timeout.
//
// # The PTY model
//
// The CLI runs in the box (sandbox.Cmd with a TTY, as the box user), its
// stdin an io.Pipe whose write end belongs to one writer goroutine per run,
// its terminal output an [output] that the sandbox's copier writes to.
// output keeps the bytes for the turn to emit and applies them to a small
// screen model (render.go): a grid with scrollback that follows cursor
// motion and erasing, so that "the text since the prompt" and "the last
// lines on screen" mean what a person would read. There is no full terminal
// emulator: Claude Code's answer comes exactly from its Stop hook, not the
// screen; line-oriented REPLs need no more than this; and Claude Code draws
// with relative cursor motion and erase-in-line, which the model follows
// (its error messages quote real screens). A generic CLI stays running
// between turns (a shell keeps its variables); a CLI that exited or was
// killed is started again by the next turn — Claude Code with --resume and
// its session id, so the conversation goes on.
//
// # Completion: how a turn knows it is over
//
// Claude Code is configured (settings.json in its CLAUDE_CONFIG_DIR,
// written by New with the box's file API) with hooks for SessionStart,
// UserPromptSubmit, Pre/PostToolUse(Failure), Stop and StopFailure. Each
// hook runs
//
//	f=$(mktemp DIR/h.XXXXXXXX) && cat >"$f" && printf '%s %s %s\n' NONCE EVENT "$f" >>DIR/log
//
// and a `tail -F` of DIR/log in the box streams those lines to the agent,
// which reads each payload (the hook's JSON input) and deletes it. Why a
// file, not the terminal: in interactive mode a hook's stdout never reaches
// the TTY (Claude Code shows it only in its transcript view), and writing
// to /dev/tty would tear Claude Code's own rendering. Why a file per
// payload: hooks of one event run in parallel (PreToolUse of parallel tool
// calls), and a short line written with one write(2) to an O_APPEND file
// never interleaves with another, whatever the payload's size. Why tail:
// the hook's moment reaches Harvest as soon as it happens, with no polling
// of the box, and a tail that dies is restarted (skipping what it already
// delivered).
//
// It is robust because nothing the CLI prints on the terminal is parsed for
// completion: text the model writes cannot end a turn. The log lines carry
// a random per-agent nonce and must name a payload file in the hook
// directory, and the payload's event must be the one the line names; the
// Stop hook's prompt_id must be the one UserPromptSubmit reported for this
// turn's prompt, so a late Stop of an earlier (cancelled) prompt is not
// taken for this one's. (The agent in the box can read settings.json and
// forge a line on purpose; all it gains is ending its own turn.) The hooks
// also give the turn its events: UserPromptSubmit proves the prompt arrived
// whole (Enter is typed again, up to three times, until it does); tool
// hooks become tool.started/tool.finished; Stop's last_assistant_message is
// the assistant.message and turn.finished's result; StopFailure is
// turn.failed{model}. A Stop after which Claude Code keeps working (another
// Stop hook of the caller's settings blocked it) is not the end: the turn
// waits for the next one.
//
// For a generic CLI, Config.DonePattern (a regexp matched against the end
// of the text printed since the input) is the signal — typically its
// prompt. Either way, a match or a Stop is followed by a settle (the output
// quiet for 150 ms, at most 2 s) so the last of the rendering lands in this
// turn's terminal.output. The fallbacks: no output for Config.IdleTimeout
// (default 30 min) ends the turn as finished with stop reason idle_timeout
// and the screen's text as the result; and Claude Code idle at its prompt
// (its status line no longer says "esc to interrupt") for 5 s without a
// Stop hook ends it with stop reason "prompt" — how slash commands, which
// run no hooks, end (after 1 s).
//
// # Input
//
// The CLI is ready for its first input when Claude Code's SessionStart hook
// ran and its screen has been quiet for 500 ms (keys typed earlier are
// partly lost: the paste survives, the Enter does not); a generic CLI when
// Config.ReadyPattern (default DonePattern) matches, or its output is quiet.
// Claude Code gets the prompt as one bracketed paste (ESC[200~ … ESC[201~,
// so newlines are part of the prompt, paste markers inside it removed), and
// Enter ("\r") once the paste is echoed. A generic CLI gets the prompt and
// Config.SubmitKeys (default "\r"), pasted only with Config.Paste. What
// Claude Code 2.1.197 needs to start straight at its prompt (onboarding,
// trust dialog, API-key approval, bypass-permissions warning) is listed at
// claudeGlobalConfig.
//
// # Cancel ladder
//
// A cancelled turn types Config.CancelKeys — Esc for Claude Code (it
// interrupts the response and its running tool, keeping the session; Ctrl-C
// twice would exit it), Ctrl-C for a generic CLI — and waits for the CLI to
// settle: Claude Code back to idle (or its Stop hook), a generic CLI's done
// pattern (or quiet output). A generic CLI gets its keys again every 2 s
// until then (a shell loses a Ctrl-C typed between forking a command and
// handing it the terminal). If it has not after Config.CancelGrace
// (default 10 s), SIGINT goes to the CLI's process group; 5 s later its
// whole tree is killed; 5 s after that it is abandoned. The turn ends as
// turn.cancelled in every case, with context.Cause as the reason; tool
// calls still open get a tool.finished error. A CLI that did not survive is
// started again by the next turn. Close ends the CLI for good: SIGINT for
// Claude Code (it saves its session and exits), SIGHUP and SIGTERM for any
// other (an interactive shell ignores one of them; the box's agent starts
// commands with SIGHUP ignored, so most others only heed the second), then
// SIGKILL.
//
// # Output chunking
//
// Every byte is emitted, in order, as terminal.output: at most 20 ms after
// the first byte of a chunk arrived, or at once when 16 KiB piled up (no
// event carries more). Output between turns (an idle CLI prints next to
// nothing) is kept, up to 8 MiB, and emitted after the next turn.started.
//
// # Turn outcomes
//
// turn.finished (Result: Claude Code's last assistant message, or a
// generic CLI's text since the input without its echo and final prompt;
// StopReason: stop_hook, done_pattern, prompt or idle_timeout),
// turn.cancelled, or turn.failed with event.FailCLIStart (the CLI did not start or
// reach its prompt: the error quotes the screen, e.g. a dialog), event.FailCLIExited
// (it exited mid-turn: its status and screen), event.FailCLIInput (Claude Code never
// took the prompt), "model" (Claude Code's StopFailure: an API error) or
// "sandbox" (the box connection was lost). Usage and cost are zero:
// interactive Claude Code prints neither; the session layer gets them from
// the model proxy, which sees every request.
//
// # State
//
// For Claude Code, State is its session id and transcript (read from the
// box); New writes the transcript where Claude Code 2.1.197 looks for it
// ($CLAUDE_CONFIG_DIR/projects/<workdir with every non-alphanumeric
// character as '-'>/<id>.jsonl) and the first start resumes it. If
// --resume fails (the CLI exits before it is ready) the agent starts a new
// conversation instead of failing every turn. A generic CLI has no state.
//
// # Concurrency
//
// Turn runs on the caller's goroutine and is the only caller of emit; it
// holds turnMu, which Close also takes (Close first cancels a running turn
// through its own context). The goroutines behind it: the sandbox's output
// copiers (they call output.Write and watcher.Write, which only append
// under a mutex and signal a channel of capacity one — they never wait on
// the turn), the sandbox's stdin copier (it ends when the pipe closes), and
// one input writer per CLI run, owned by the cli: release closes its
// channel and pipe and waits for it; every run is released when its
// process is gone (or abandoned), and Close releases the last. The tail is
// a box process, killed and waited for by Close. The turn's loop wakes on
// output, hook lines, the process's exit, cancellation or its next
// deadline, and re-evaluates its phase each time:
//
//	starting ──ready──► pasted ──Enter──► submitted ──UserPromptSubmit──► working
//	(generic: starting ──ready── types prompt+Enter ──────────────────► working)
//	working ──Stop / done pattern──► settling ──quiet──► finished
//	working ──idle timeout / idle at prompt──────────────► finished
//	any but starting ──ctx done──► cancelling ──settled──► cancelled
//	                                          └─grace─► SIGINT ─► SIGKILL ─► cancelled
//	any ──process exit──► failed (cancelled while cancelling)
//
// State, SessionID and Resize may be called from other goroutines while a
// turn runs (the fields they read are under Agent.mu or claude.mu).
package terminal
