package llm

// Event is one streamed delta: TextDelta, ThinkingDelta, ToolUseStart,
// ToolInputDelta or BlockStop. The set is closed. Index is the position of the
// block in Response.Message.Content.
type Event interface {
	eventIndex() int
}

// TextDelta is more text of the text block at Index.
type TextDelta struct {
	Index int
	Text  string
}

// ThinkingDelta is more reasoning text of the thinking block at Index.
type ThinkingDelta struct {
	Index int
	Text  string
}

// ToolUseStart opens the tool call at Index; its input follows as
// ToolInputDelta events.
type ToolUseStart struct {
	Index int
	ID    string
	Name  string
}

// ToolInputDelta is a piece of the tool call's JSON input, as the model wrote
// it: the pieces concatenated are the input, but a single piece is rarely valid
// JSON on its own.
type ToolInputDelta struct {
	Index       int
	PartialJSON string
}

// BlockStop says the block at Index is complete.
type BlockStop struct {
	Index int
}

func (e TextDelta) eventIndex() int      { return e.Index }
func (e ThinkingDelta) eventIndex() int  { return e.Index }
func (e ToolUseStart) eventIndex() int   { return e.Index }
func (e ToolInputDelta) eventIndex() int { return e.Index }
func (e BlockStop) eventIndex() int      { return e.Index }

// StopReason says why the model stopped: one of the constants below, or, for
// a reason Harvest does not map (Anthropic's pause_turn), the provider's value
// verbatim.
type StopReason string

const (
	// StopEndTurn: the model finished its answer (OpenAI "stop").
	StopEndTurn StopReason = "end_turn"
	// StopToolUse: the model called tools and waits for their results
	// (OpenAI "tool_calls").
	StopToolUse StopReason = "tool_use"
	// StopMaxTokens: the output hit MaxTokens or the context window (OpenAI
	// "length", Anthropic "model_context_window_exceeded"). The message is cut
	// off; a tool call in it may be incomplete.
	StopMaxTokens StopReason = "max_tokens"
	// StopSequence: one of Request.StopSequences was generated (Anthropic only;
	// OpenAI reports a stop sequence as "stop", so it maps to StopEndTurn).
	StopSequence StopReason = "stop_sequence"
	// StopRefusal: the model or the provider's filter declined (OpenAI
	// "content_filter").
	StopRefusal StopReason = "refusal"
)

// Response is a finished call.
type Response struct {
	// ID is the provider's id for the response ("msg_...", "chatcmpl-...").
	ID string
	// Model is the model that answered, as the API reported it (often a dated
	// snapshot of the requested alias).
	Model string
	// Message is the assistant message, assembled from the stream.
	Message    Message
	StopReason StopReason
	// StopSequence is the stop sequence that ended the output, when the
	// provider says (Anthropic).
	StopSequence string
	Usage        Usage
}

// Usage counts the tokens of one call. All four counts are disjoint:
// InputTokens excludes cache reads and writes (see the package doc for how the
// OpenAI counts are normalised to this).
type Usage struct {
	// InputTokens are prompt tokens billed at the full input rate.
	InputTokens int `json:"input_tokens"`
	// OutputTokens are generated tokens, reasoning included.
	OutputTokens int `json:"output_tokens"`
	// CacheReadTokens are prompt tokens read from the prompt cache.
	CacheReadTokens int `json:"cache_read_tokens,omitempty"`
	// CacheWriteTokens are prompt tokens written to the prompt cache.
	CacheWriteTokens int `json:"cache_write_tokens,omitempty"`
}

// PromptTokens is the whole prompt: input plus cache reads and writes.
func (u Usage) PromptTokens() int {
	return u.InputTokens + u.CacheReadTokens + u.CacheWriteTokens
}

// Add returns the sum of two usages, for totals over a session.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		InputTokens:      u.InputTokens + v.InputTokens,
		OutputTokens:     u.OutputTokens + v.OutputTokens,
		CacheReadTokens:  u.CacheReadTokens + v.CacheReadTokens,
		CacheWriteTokens: u.CacheWriteTokens + v.CacheWriteTokens,
	}
}
