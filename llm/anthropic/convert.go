package anthropic

import (
	"encoding/base64"
	"encoding/json"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/packages/param"

	"github.com/harvest-dev/harvest/llm"
)

// params converts a validated llm.Request into the SDK's request.
func params(req llm.Request) sdk.MessageNewParams {
	p := sdk.MessageNewParams{
		Model:         sdk.Model(req.Model),
		MaxTokens:     int64(req.MaxTokens),
		Messages:      messages(req.Messages, req.Cache),
		Tools:         tools(req.Tools, req.Cache),
		StopSequences: req.StopSequences,
	}
	if p.MaxTokens == 0 {
		p.MaxTokens = llm.DefaultMaxTokens
	}
	if req.System != "" {
		sys := sdk.TextBlockParam{Text: req.System}
		if req.Cache {
			sys.CacheControl = sdk.NewCacheControlEphemeralParam()
		}
		p.System = []sdk.TextBlockParam{sys}
	}
	if req.Temperature != nil {
		p.Temperature = param.NewOpt(*req.Temperature)
	}
	if t := req.Thinking; t != nil {
		if t.BudgetTokens > 0 {
			p.Thinking = sdk.ThinkingConfigParamOfEnabled(int64(t.BudgetTokens))
		} else {
			p.Thinking = sdk.ThinkingConfigParamUnion{OfAdaptive: &sdk.ThinkingConfigAdaptiveParam{}}
		}
		if t.Effort != "" {
			p.OutputConfig = sdk.OutputConfigParam{Effort: sdk.OutputConfigEffort(t.Effort)}
		}
	}
	return p
}

// countParams converts a request for count_tokens, which takes the same
// prompt fields but no output settings.
func countParams(req llm.Request) sdk.MessageCountTokensParams {
	p := params(req)
	c := sdk.MessageCountTokensParams{
		Model:    p.Model,
		Messages: p.Messages,
		Thinking: p.Thinking,
	}
	if len(p.System) > 0 {
		c.System = sdk.MessageCountTokensParamsSystemUnion{OfTextBlockArray: p.System}
	}
	for _, t := range p.Tools {
		c.Tools = append(c.Tools, sdk.MessageCountTokensToolUnionParam{OfTool: t.OfTool})
	}
	return c
}

func tools(ts []llm.Tool, cache bool) []sdk.ToolUnionParam {
	out := make([]sdk.ToolUnionParam, 0, len(ts))
	for _, t := range ts {
		schema := t.InputSchema
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		tp := &sdk.ToolParam{
			Name: t.Name,
			// Verbatim: the SDK's schema struct would drop keywords it does not model.
			InputSchema: param.Override[sdk.ToolInputSchemaParam](schema),
		}
		if t.Description != "" {
			tp.Description = param.NewOpt(t.Description)
		}
		out = append(out, sdk.ToolUnionParam{OfTool: tp})
	}
	if cache && len(out) > 0 {
		out[len(out)-1].OfTool.CacheControl = sdk.NewCacheControlEphemeralParam()
	}
	return out
}

func messages(ms []llm.Message, cache bool) []sdk.MessageParam {
	out := make([]sdk.MessageParam, 0, len(ms))
	for _, m := range ms {
		blocks := make([]sdk.ContentBlockParamUnion, 0, len(m.Content))
		for _, b := range m.Content {
			if cb, ok := contentBlock(b); ok {
				blocks = append(blocks, cb)
			}
		}
		if len(blocks) == 0 {
			// Nothing the API accepts is left (say, only unsigned thinking from
			// another provider); an empty message would be refused.
			continue
		}
		out = append(out, sdk.MessageParam{Role: sdk.MessageParamRole(m.Role), Content: blocks})
	}
	if cache && len(out) > 0 {
		last := out[len(out)-1].Content
		// Thinking blocks cannot carry cache_control; mark the last block that can.
		for i := len(last) - 1; i >= 0; i-- {
			if cc := last[i].GetCacheControl(); cc != nil {
				*cc = sdk.NewCacheControlEphemeralParam()
				break
			}
		}
	}
	return out
}

// contentBlock converts one content block. It drops what the Messages API refuses
// and has no use for: empty text blocks ("text content blocks must be
// non-empty") and thinking without a signature (from another provider).
func contentBlock(b llm.Block) (sdk.ContentBlockParamUnion, bool) {
	switch b := b.(type) {
	case llm.Text:
		if b.Text == "" {
			return sdk.ContentBlockParamUnion{}, false
		}
		return sdk.NewTextBlock(b.Text), true
	case llm.Thinking:
		if b.Signature == "" {
			return sdk.ContentBlockParamUnion{}, false
		}
		return sdk.NewThinkingBlock(b.Signature, b.Text), true
	case llm.RedactedThinking:
		return sdk.NewRedactedThinkingBlock(b.Data), true
	case llm.ToolUse:
		input := b.Input
		if len(input) == 0 {
			input = json.RawMessage(`{}`)
		}
		return sdk.NewToolUseBlock(b.ID, input, b.Name), true
	case llm.ToolResult:
		tr := &sdk.ToolResultBlockParam{ToolUseID: b.ToolUseID}
		if b.IsError {
			tr.IsError = param.NewOpt(true)
		}
		for _, c := range b.Content {
			switch c := c.(type) {
			case llm.Text:
				if c.Text != "" {
					tr.Content = append(tr.Content, sdk.ToolResultBlockParamContentUnion{OfText: &sdk.TextBlockParam{Text: c.Text}})
				}
			case llm.Image:
				tr.Content = append(tr.Content, sdk.ToolResultBlockParamContentUnion{OfImage: image(c)})
			}
		}
		return sdk.ContentBlockParamUnion{OfToolResult: tr}, true
	case llm.Image:
		return sdk.ContentBlockParamUnion{OfImage: image(b)}, true
	}
	return sdk.ContentBlockParamUnion{}, false
}

func image(im llm.Image) *sdk.ImageBlockParam {
	return &sdk.ImageBlockParam{Source: sdk.ImageBlockParamSourceUnion{OfBase64: &sdk.Base64ImageSourceParam{
		MediaType: sdk.Base64ImageSourceMediaType(im.MediaType),
		Data:      base64.StdEncoding.EncodeToString(im.Data),
	}}}
}
