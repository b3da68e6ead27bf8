package openai

import (
	"encoding/base64"
	"encoding/json"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/harvest-dev/harvest/llm"
)

// params converts a validated llm.Request into a Chat Completions request.
func (p *Provider) params(req llm.Request) sdk.ChatCompletionNewParams {
	c := sdk.ChatCompletionNewParams{
		Model:    shared.ChatModel(req.Model),
		Messages: messages(req.System, req.Messages),
		Tools:    tools(req.Tools),
		// Without include_usage a stream reports no token counts at all.
		StreamOptions: sdk.ChatCompletionStreamOptionsParam{IncludeUsage: param.NewOpt(true)},
	}
	if req.MaxTokens > 0 {
		if p.legacyMaxTokens {
			c.MaxTokens = param.NewOpt(int64(req.MaxTokens))
		} else {
			c.MaxCompletionTokens = param.NewOpt(int64(req.MaxTokens))
		}
	}
	if req.Temperature != nil {
		c.Temperature = param.NewOpt(*req.Temperature)
	}
	if len(req.StopSequences) > 0 {
		c.Stop = sdk.ChatCompletionNewParamsStopUnion{OfStringArray: req.StopSequences}
	}
	if req.Thinking != nil && req.Thinking.Effort != "" {
		c.ReasoningEffort = shared.ReasoningEffort(req.Thinking.Effort)
	}
	return c
}

func tools(ts []llm.Tool) []sdk.ChatCompletionToolUnionParam {
	out := make([]sdk.ChatCompletionToolUnionParam, 0, len(ts))
	for _, t := range ts {
		schema := t.InputSchema
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		// The SDK models parameters as map[string]any; sending the function
		// definition as raw JSON spares decoding every schema on every request.
		def, _ := json.Marshal(struct {
			Name        string          `json:"name"`
			Description string          `json:"description,omitempty"`
			Parameters  json.RawMessage `json:"parameters"`
		}{t.Name, t.Description, schema})
		out = append(out, sdk.ChatCompletionToolUnionParam{OfFunction: &sdk.ChatCompletionFunctionToolParam{
			Function: param.Override[shared.FunctionDefinitionParam](json.RawMessage(def)),
		}})
	}
	return out
}

// messages flattens the conversation into Chat Completions messages:
//
//   - the system prompt is a "system" message;
//   - a user message's tool results become "tool" messages, first, since they
//     must directly follow the assistant message that called the tools; its
//     text and images follow as one "user" message;
//   - images inside tool results (tool messages carry text only) go into that
//     user message, each announced by a text part naming its tool call;
//   - assistant text and tool calls make one "assistant" message; thinking is
//     dropped (Chat Completions takes no reasoning back).
func messages(system string, ms []llm.Message) []sdk.ChatCompletionMessageParamUnion {
	out := make([]sdk.ChatCompletionMessageParamUnion, 0, len(ms)+1)
	if system != "" {
		out = append(out, sdk.SystemMessage(system))
	}
	for _, m := range ms {
		if m.Role == llm.RoleAssistant {
			out = append(out, assistant(m))
			continue
		}
		var parts []sdk.ChatCompletionContentPartUnionParam
		for _, b := range m.Content {
			switch b := b.(type) {
			case llm.ToolResult:
				text := b.Text()
				var images []llm.Image
				for _, c := range b.Content {
					if im, ok := c.(llm.Image); ok {
						images = append(images, im)
					}
				}
				if len(images) > 0 {
					if text != "" {
						text += "\n"
					}
					text += "(the tool's images follow in the next user message)"
					parts = append(parts, sdk.TextContentPart("Images from tool call "+b.ToolUseID+":"))
					for _, im := range images {
						parts = append(parts, imagePart(im))
					}
				}
				if b.IsError {
					// Chat Completions has no error flag on tool messages.
					text = "Error: " + text
				}
				out = append(out, sdk.ToolMessage(text, b.ToolUseID))
			case llm.Text:
				parts = append(parts, sdk.TextContentPart(b.Text))
			case llm.Image:
				parts = append(parts, imagePart(b))
			}
		}
		switch {
		case len(parts) == 0:
		case len(parts) == 1 && parts[0].OfText != nil:
			// A plain string is what every OpenAI-compatible server accepts.
			out = append(out, sdk.UserMessage(parts[0].OfText.Text))
		default:
			out = append(out, sdk.UserMessage(parts))
		}
	}
	return out
}

func assistant(m llm.Message) sdk.ChatCompletionMessageParamUnion {
	var text strings.Builder
	a := &sdk.ChatCompletionAssistantMessageParam{}
	for _, b := range m.Content {
		switch b := b.(type) {
		case llm.Text:
			text.WriteString(b.Text)
		case llm.ToolUse:
			args := string(b.Input)
			if args == "" {
				args = "{}"
			}
			a.ToolCalls = append(a.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
					ID:       b.ID,
					Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: b.Name, Arguments: args},
				},
			})
		}
	}
	if text.Len() > 0 || len(a.ToolCalls) == 0 {
		a.Content.OfString = param.NewOpt(text.String())
	}
	return sdk.ChatCompletionMessageParamUnion{OfAssistant: a}
}

func imagePart(im llm.Image) sdk.ChatCompletionContentPartUnionParam {
	return sdk.ImageContentPart(sdk.ChatCompletionContentPartImageImageURLParam{
		URL: "data:" + im.MediaType + ";base64," + base64.StdEncoding.EncodeToString(im.Data),
	})
}
