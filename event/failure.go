package event

// FailureKind says why a turn failed (TurnFailed.Kind): one list for every
// agent and the session layer, so a client can branch on it whichever
// agent ran. New kinds are added here, documented, never invented in an
// agent package.
type FailureKind string

// Limits and the harness (the builtin agent; the CLIs where noted).
const (
	// FailMaxSteps: the turn made its limit of model calls.
	FailMaxSteps FailureKind = "max_steps"
	// FailBudget: the turn spent its budget (the model proxy's 402 for a
	// CLI).
	FailBudget FailureKind = "budget"
	// FailTimeout: the turn ran out of time.
	FailTimeout FailureKind = "timeout"
	// FailMaxTokens: replies were cut at the output limit too often.
	FailMaxTokens FailureKind = "max_tokens"
	// FailLoop: the agent repeated itself after being warned (doom loop).
	FailLoop FailureKind = "loop"
	// FailModel: the model API refused or failed a request.
	FailModel FailureKind = "model"
	// FailContext: the conversation does not fit the model's context even
	// after compaction.
	FailContext FailureKind = "context"
	// FailStuck: the agent wrote STUCK.md.
	FailStuck FailureKind = "stuck"
	// FailBlocked: a hook stopped the turn.
	FailBlocked FailureKind = "blocked"
	// FailSandbox: the box failed or could not be reached.
	FailSandbox FailureKind = "sandbox"
)

// The agents that run a CLI in the box.
const (
	// FailCLIStart: the CLI could not be started, did not get ready in
	// time, or is not a version Harvest can drive.
	FailCLIStart FailureKind = "cli_start"
	// FailCLICrashed: the CLI (or its server) exited or broke during the
	// turn; the next turn restarts it.
	FailCLICrashed FailureKind = "cli_crashed"
	// FailCLIExited: an interactive CLI in a terminal exited during the
	// turn; the next turn starts it again.
	FailCLIExited FailureKind = "cli_exited"
	// FailCLIHung: the CLI reported nothing for too long, or stopped
	// answering after its result.
	FailCLIHung FailureKind = "cli_hung"
	// FailCLIProtocol: the CLI printed something that is not its protocol.
	FailCLIProtocol FailureKind = "cli_protocol"
	// FailCLIInput: the CLI did not take the prompt.
	FailCLIInput FailureKind = "cli_input"
	// FailCLIError: the CLI ended the turn with an error of its own.
	FailCLIError FailureKind = "cli_error"
)

// The session layer.
const (
	// FailInterrupted: Harvest stopped during the turn (a crash, a kill, a
	// shutdown); the workspace is kept.
	FailInterrupted FailureKind = "interrupted"
	// FailWatchdog: the turn emitted nothing for the session's
	// turn_watchdog and was cancelled.
	FailWatchdog FailureKind = "watchdog"
	// FailLock: the session lock expired and another run took it.
	FailLock FailureKind = "lock"
)

// FailureKinds lists every kind, in the order above.
var FailureKinds = []FailureKind{
	FailMaxSteps, FailBudget, FailTimeout, FailMaxTokens, FailLoop, FailModel, FailContext, FailStuck, FailBlocked, FailSandbox,
	FailCLIStart, FailCLICrashed, FailCLIExited, FailCLIHung, FailCLIProtocol, FailCLIInput, FailCLIError,
	FailInterrupted, FailWatchdog, FailLock,
}
