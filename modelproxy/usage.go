package modelproxy

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/harvest-dev/harvest/llm"
)

// Usage is one model call made with a session's token: what the upstream
// reported it used and what that cost.
type Usage struct {
	Session string
	// API is the wire protocol: "anthropic" or "openai".
	API string
	// Model is the model as the upstream named it in the response (often a
	// dated snapshot), else as the request asked for it.
	Model  string
	Stream bool
	// Tokens are in package llm's meaning for both APIs: InputTokens
	// exclude cache reads and writes (OpenAI's prompt_tokens less its
	// cached tokens).
	Tokens llm.Usage
	// CostUSD is Tokens priced by the proxy's price table (by Model, else by
	// the requested model); 0 when neither is priced.
	CostUSD float64
	Priced  bool
	// SpentUSD is the session's total after this call.
	SpentUSD float64
	// Complete says the response ended as the API ends one (message_stop,
	// data: [DONE], a whole JSON body). false: it was cut short (the
	// client went away, the token was revoked, the upstream broke off), and
	// Tokens are what the upstream had reported until then.
	Complete bool
	// Duration runs from the request's arrival to the response's end.
	Duration time.Duration
}

// maxLine bounds one SSE line the meter buffers; longer lines (a huge
// content delta) are skipped: they carry no usage.
const maxLine = 1 << 20

// meter reads the usage out of a response as it passes: SSE events of
// either API as they stream, or a whole JSON body.
type meter struct {
	api      string
	model    string // as the response names it
	tokens   llm.Usage
	reported bool // the response reported usage
	complete bool // its last event (or whole body) was seen

	line []byte // a partial SSE line
	long bool   // the current line passed maxLine and is skipped
}

// feed parses a chunk of an SSE stream and returns whether the stream's
// last event has been seen.
func (m *meter) feed(b []byte) bool {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			m.buffer(b)
			break
		}
		m.buffer(b[:i])
		if !m.long {
			m.event(m.line)
		}
		m.line, m.long = m.line[:0], false
		b = b[i+1:]
	}
	return m.complete
}

func (m *meter) buffer(b []byte) {
	if m.long {
		return
	}
	if len(m.line)+len(b) > maxLine {
		m.line, m.long = m.line[:0], true
		return
	}
	m.line = append(m.line, b...)
}

// event handles one SSE line; only data lines matter.
func (m *meter) event(line []byte) {
	data, ok := bytes.CutPrefix(bytes.TrimSuffix(line, []byte("\r")), []byte("data:"))
	if !ok {
		return
	}
	data = bytes.TrimSpace(data)
	if m.api == apiOpenAI {
		m.openAIChunk(data)
	} else {
		m.anthropicEvent(data)
	}
}

// anthropicEvent reads message_start (model, input and cache usage),
// message_delta (cumulative usage: output tokens, and input counts when the
// server updates them) and message_stop (the end).
func (m *meter) anthropicEvent(data []byte) {
	if !bytes.Contains(data, []byte(`"message_`)) {
		return // content block events: most of the stream
	}
	var ev struct {
		Type    string `json:"type"`
		Message *struct {
			Model string     `json:"model"`
			Usage *anthUsage `json:"usage"`
		} `json:"message"`
		Usage *anthUsage `json:"usage"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	switch ev.Type {
	case "message_start":
		if ev.Message != nil {
			m.model = ev.Message.Model
			m.apply(ev.Message.Usage)
		}
	case "message_delta":
		m.apply(ev.Usage)
	case "message_stop":
		m.complete = true
	}
}

// openAIChunk reads the model from the first chunk and the usage from the
// chunk that has it (stream_options.include_usage, which the proxy makes
// sure of); data: [DONE] is the end.
func (m *meter) openAIChunk(data []byte) {
	if bytes.Equal(data, []byte("[DONE]")) {
		m.complete = true
		return
	}
	if m.model != "" && !bytes.Contains(data, []byte(`"usage"`)) {
		return
	}
	var ch struct {
		Model string    `json:"model"`
		Usage *oaiUsage `json:"usage"`
	}
	if json.Unmarshal(data, &ch) != nil {
		return
	}
	if m.model == "" {
		m.model = ch.Model
	}
	m.apply(ch.Usage)
}

// parseJSON reads a whole (not streamed) response body.
func (m *meter) parseJSON(body []byte) {
	var r struct {
		Model string          `json:"model"`
		Usage json.RawMessage `json:"usage"`
	}
	if json.Unmarshal(body, &r) == nil {
		m.model = r.Model
		if len(r.Usage) > 0 && string(r.Usage) != "null" {
			if m.api == apiOpenAI {
				var u oaiUsage
				if json.Unmarshal(r.Usage, &u) == nil {
					m.apply(&u)
				}
			} else {
				var u anthUsage
				if json.Unmarshal(r.Usage, &u) == nil {
					m.apply(&u)
				}
			}
		}
	}
	m.complete = true
}

// apply takes a usage report (*anthUsage or *oaiUsage; a nil one is
// none).
func (m *meter) apply(u interface{ applyTo(*llm.Usage) bool }) {
	if u != nil && u.applyTo(&m.tokens) {
		m.reported = true
	}
}

// anthUsage is the Messages API's usage; a field that is absent leaves the
// count as it was (message_delta repeats only what changed).
type anthUsage struct {
	InputTokens              *int `json:"input_tokens"`
	OutputTokens             *int `json:"output_tokens"`
	CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int `json:"cache_creation_input_tokens"`
}

func (u *anthUsage) applyTo(t *llm.Usage) bool {
	if u == nil {
		return false
	}
	set := func(dst *int, v *int) {
		if v != nil {
			*dst = max(*v, 0)
		}
	}
	set(&t.InputTokens, u.InputTokens)
	set(&t.OutputTokens, u.OutputTokens)
	set(&t.CacheReadTokens, u.CacheReadInputTokens)
	set(&t.CacheWriteTokens, u.CacheCreationInputTokens)
	return true
}

// oaiUsage is Chat Completions' usage: prompt_tokens include the cached
// (and, where reported, cache-written) tokens, which llm.Usage keeps apart.
type oaiUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens     int `json:"cached_tokens"`
		CacheWriteTokens int `json:"cache_write_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u *oaiUsage) applyTo(t *llm.Usage) bool {
	if u == nil {
		return false
	}
	var cached, written int
	if d := u.PromptTokensDetails; d != nil {
		cached, written = max(d.CachedTokens, 0), max(d.CacheWriteTokens, 0)
	}
	*t = llm.Usage{
		InputTokens:      max(u.PromptTokens-cached-written, 0),
		OutputTokens:     max(u.CompletionTokens, 0),
		CacheReadTokens:  cached,
		CacheWriteTokens: written,
	}
	return true
}
