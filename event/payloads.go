package event

import "encoding/json"

// Wire types, one per payload.
const (
	TypeSessionState     Type = "session.state"
	TypeMessageQueued    Type = "message.queued"
	TypeMessageDelivered Type = "message.delivered"
	TypeTurnStarted      Type = "turn.started"
	TypeAssistantDelta   Type = "assistant.delta"
	TypeAssistantMessage Type = "assistant.message"
	TypeThinkingDelta    Type = "assistant.thinking.delta"
	TypeThinking         Type = "assistant.thinking"
	TypeToolStarted      Type = "tool.started"
	TypeToolInputDelta   Type = "tool.input.delta"
	TypeToolOutput       Type = "tool.output"
	TypeToolFinished     Type = "tool.finished"
	TypeStepFinished     Type = "step.finished"
	TypeTurnFinished     Type = "turn.finished"
	TypeTurnCancelled    Type = "turn.cancelled"
	TypeTurnFailed       Type = "turn.failed"
	TypeTerminalOutput   Type = "terminal.output"
	TypeCompaction       Type = "compaction"
	TypeLoopDetected     Type = "loop.detected"
	TypeTodoUpdated      Type = "todo.updated"
	TypeGitCommitted     Type = "git.committed"
	TypeGitPushed        Type = "git.pushed"
	TypePROpened         Type = "pr.opened"
	TypePRMerged         Type = "pr.merged"
	TypePRClosed         Type = "pr.closed"
	TypeStuck            Type = "stuck"
	TypeGitHubFailed     Type = "github.failed"
	TypeShellOpened      Type = "shell.opened"
	TypeShellClosed      Type = "shell.closed"
)

// Usage counts tokens (a provider-neutral copy of the model layer's usage, so
// this package depends on nothing).
type Usage struct {
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
}

// Add returns u+v.
func (u Usage) Add(v Usage) Usage {
	return Usage{u.InputTokens + v.InputTokens, u.OutputTokens + v.OutputTokens, u.CacheReadTokens + v.CacheReadTokens, u.CacheWriteTokens + v.CacheWriteTokens}
}

// SessionState: the session moved to State (see the session package's state
// machine).
type SessionState struct {
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
}

// MessageQueued: a user message was stored and waits for the agent.
type MessageQueued struct {
	MessageID string `json:"message_id"`
	Text      string `json:"text"`
	Mode      string `json:"mode"` // queue | interrupt | inject
	Position  int    `json:"position"`
}

// MessageDelivered: a queued message was handed to the agent.
type MessageDelivered struct {
	MessageID string `json:"message_id"`
}

// TurnStarted: the agent starts working on a message.
type TurnStarted struct {
	Prompt string `json:"prompt"`
	Model  string `json:"model,omitempty"`
}

// AssistantDelta: a piece of the assistant's text as it streams.
type AssistantDelta struct {
	Text string `json:"text"`
}

// AssistantMessage: the assistant's complete text of one step.
type AssistantMessage struct {
	Text string `json:"text"`
}

// ThinkingDelta: a piece of the model's visible reasoning as it streams.
type ThinkingDelta struct {
	Text string `json:"text"`
}

// Thinking: one complete block of the model's visible reasoning.
type Thinking struct {
	Text string `json:"text"`
}

// ToolStarted: a tool call begins.
type ToolStarted struct {
	CallID string          `json:"call_id"`
	Tool   string          `json:"tool"`
	Input  json.RawMessage `json:"input,omitempty"`
	// Summary is a one-line human description ("bash: go test ./...").
	Summary string `json:"summary,omitempty"`
}

// ToolInputDelta: a piece of a tool call's input JSON as the model streams it.
type ToolInputDelta struct {
	Index       int    `json:"index"`
	PartialJSON string `json:"partial_json"`
}

// ToolOutput: output of a running tool (a command's stdout or stderr).
type ToolOutput struct {
	CallID string `json:"call_id"`
	Stream string `json:"stream,omitempty"` // stdout | stderr
	Text   string `json:"text"`
}

// ToolFinished: a tool call ended. Output is what the model was given.
type ToolFinished struct {
	CallID     string `json:"call_id"`
	Tool       string `json:"tool"`
	Output     string `json:"output"`
	IsError    bool   `json:"is_error,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	// Blocked says a hook or a permission rule refused the call (and why).
	Blocked string `json:"blocked,omitempty"`
}

// StepFinished: one model call (and its tool calls) completed.
type StepFinished struct {
	Step       int     `json:"step"`
	Model      string  `json:"model,omitempty"`
	StopReason string  `json:"stop_reason,omitempty"`
	Usage      Usage   `json:"usage"`
	CostUSD    float64 `json:"cost_usd"`
	DurationMS int64   `json:"duration_ms"`
}

// TurnFinished: the agent completed the turn.
type TurnFinished struct {
	Result     string  `json:"result"`
	StopReason string  `json:"stop_reason,omitempty"`
	Steps      int     `json:"steps"`
	Usage      Usage   `json:"usage"`
	CostUSD    float64 `json:"cost_usd"`
	DurationMS int64   `json:"duration_ms"`
}

// TurnCancelled: the turn was cancelled (by the user, an interrupting message,
// or shutdown).
type TurnCancelled struct {
	Reason string `json:"reason,omitempty"`
}

// TurnFailed: the turn ended without a result. Kind is machine-readable:
// max_steps, budget, timeout, max_tokens, loop, model, agent, sandbox,
// interrupted, stuck.
type TurnFailed struct {
	Kind  FailureKind `json:"kind"`
	Error string      `json:"error"`
	Usage Usage       `json:"usage"`
	Cost  float64     `json:"cost_usd"`
}

// TerminalOutput: raw bytes from a terminal agent's PTY (base64 on the wire).
type TerminalOutput struct {
	Data []byte `json:"data"`
}

// Compaction: the conversation was shortened to fit the model's context.
type Compaction struct {
	BeforeTokens int  `json:"before_tokens"`
	AfterTokens  int  `json:"after_tokens"`
	Pruned       int  `json:"pruned_tool_outputs"`
	Summarized   bool `json:"summarized"`
}

// LoopDetected: the agent repeated itself. Action is "warned" (the model was
// told once) or "stopped" (the turn ended).
type LoopDetected struct {
	Pattern string `json:"pattern"` // same_call | same_error | same_message | cycle
	Detail  string `json:"detail"`
	Action  string `json:"action"`
}

// TodoItem is one entry of the agent's todo list.
type TodoItem struct {
	Content string `json:"content"`
	Status  string `json:"status"` // pending | in_progress | completed
}

// TodoUpdated: the agent changed its todo list.
type TodoUpdated struct {
	Items []TodoItem `json:"items"`
}

// GitCommitted: a commit was made on a session branch.
type GitCommitted struct {
	Repo    string `json:"repo"`
	Branch  string `json:"branch"`
	SHA     string `json:"sha"`
	Message string `json:"message"`
	// Author is "Name <email>".
	Author string `json:"author,omitempty"`
}

// GitPushed: a branch was pushed (through Harvest's git endpoint: From is
// the commit the branch was at before, zeros for a new branch; To the one
// it is at now). Refused, when set, says why the push was refused and
// nothing landed.
type GitPushed struct {
	Repo    string `json:"repo"`
	Branch  string `json:"branch"`
	Remote  string `json:"remote"`
	From    string `json:"from,omitempty"`
	To      string `json:"to,omitempty"`
	Refused string `json:"refused,omitempty"`
}

// ShellOpened: someone opened an interactive shell in the session's box
// (GET /v1/sessions/{id}/shell): who (By, the token's id; ByName, its
// name) and, in the envelope's time, when. What is typed is not recorded:
// the box is the session's, and a shell can read as much as the agent.
// Shell pairs it with its ShellClosed.
type ShellOpened struct {
	Shell  string `json:"shell"`
	By     string `json:"by"`
	ByName string `json:"by_name,omitempty"`
	Repo   string `json:"repo,omitempty"`
}

// ShellClosed: that shell ended: its exit (Code, -1 when killed), how
// long it was open, and why it ended (Reason: "exited", "disconnected",
// "box gone").
type ShellClosed struct {
	Shell      string `json:"shell"`
	By         string `json:"by"`
	Code       int    `json:"code"`
	DurationMS int64  `json:"duration_ms"`
	Reason     string `json:"reason"`
}

// PROpened: a pull request was opened.
type PROpened struct {
	Repo   string `json:"repo"`
	Number int    `json:"number"`
	URL    string `json:"url"`
	Branch string `json:"branch,omitempty"`
	Base   string `json:"base,omitempty"`
	Draft  bool   `json:"draft,omitempty"`
}

// PRMerged: the session's pull request was merged (By, on GitHub); the
// session ends with it.
type PRMerged struct {
	Repo   string `json:"repo"`
	Number int    `json:"number"`
	URL    string `json:"url,omitempty"`
	Branch string `json:"branch,omitempty"`
	By     string `json:"by,omitempty"`
	// SHA is the merge commit.
	SHA string `json:"sha,omitempty"`
}

// PRClosed: the session's pull request was closed without being merged
// (By, on GitHub); the session ends with it, and its branch, if the
// session made it, is deleted (unless the server keeps branches).
type PRClosed struct {
	Repo   string `json:"repo"`
	Number int    `json:"number"`
	URL    string `json:"url,omitempty"`
	Branch string `json:"branch,omitempty"`
	By     string `json:"by,omitempty"`
}

// GitHubFailed: publishing a turn's work or telling GitHub how the
// session goes failed (a push, the pull request, the progress comment);
// the session goes on, and the next turn tries again. Error never
// carries a credential.
type GitHubFailed struct {
	Repo  string `json:"repo,omitempty"`
	What  string `json:"what"`
	Error string `json:"error"`
}

// Stuck: the agent wrote STUCK.md; Text is its content.
type Stuck struct {
	Repo string `json:"repo,omitempty"`
	Text string `json:"text"`
}

func (SessionState) EventType() Type     { return TypeSessionState }
func (MessageQueued) EventType() Type    { return TypeMessageQueued }
func (MessageDelivered) EventType() Type { return TypeMessageDelivered }
func (TurnStarted) EventType() Type      { return TypeTurnStarted }
func (AssistantDelta) EventType() Type   { return TypeAssistantDelta }
func (AssistantMessage) EventType() Type { return TypeAssistantMessage }
func (ThinkingDelta) EventType() Type    { return TypeThinkingDelta }
func (Thinking) EventType() Type         { return TypeThinking }
func (ToolStarted) EventType() Type      { return TypeToolStarted }
func (ToolInputDelta) EventType() Type   { return TypeToolInputDelta }
func (ToolOutput) EventType() Type       { return TypeToolOutput }
func (ToolFinished) EventType() Type     { return TypeToolFinished }
func (StepFinished) EventType() Type     { return TypeStepFinished }
func (TurnFinished) EventType() Type     { return TypeTurnFinished }
func (TurnCancelled) EventType() Type    { return TypeTurnCancelled }
func (TurnFailed) EventType() Type       { return TypeTurnFailed }
func (TerminalOutput) EventType() Type   { return TypeTerminalOutput }
func (Compaction) EventType() Type       { return TypeCompaction }
func (LoopDetected) EventType() Type     { return TypeLoopDetected }
func (TodoUpdated) EventType() Type      { return TypeTodoUpdated }
func (GitCommitted) EventType() Type     { return TypeGitCommitted }
func (GitPushed) EventType() Type        { return TypeGitPushed }
func (PROpened) EventType() Type         { return TypePROpened }
func (PRMerged) EventType() Type         { return TypePRMerged }
func (PRClosed) EventType() Type         { return TypePRClosed }
func (Stuck) EventType() Type            { return TypeStuck }
func (GitHubFailed) EventType() Type     { return TypeGitHubFailed }
func (ShellOpened) EventType() Type      { return TypeShellOpened }
func (ShellClosed) EventType() Type      { return TypeShellClosed }

func init() {
	for _, p := range []Payload{
		SessionState{}, MessageQueued{}, MessageDelivered{}, TurnStarted{},
		AssistantDelta{}, AssistantMessage{}, ThinkingDelta{}, Thinking{},
		ToolStarted{}, ToolInputDelta{}, ToolOutput{}, ToolFinished{},
		StepFinished{}, TurnFinished{}, TurnCancelled{}, TurnFailed{},
		TerminalOutput{}, Compaction{}, LoopDetected{}, TodoUpdated{},
		GitCommitted{}, GitPushed{}, PROpened{}, PRMerged{}, PRClosed{}, Stuck{}, GitHubFailed{},
		ShellOpened{}, ShellClosed{},
	} {
		register(p)
	}
}
