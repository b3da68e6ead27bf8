// Package openai is the llm.Provider for OpenAI Chat Completions, on the
// official SDK (github.com/openai/openai-go/v3). With a different base URL it
// serves any OpenAI-compatible server: vLLM, Ollama (http://localhost:11434/v1),
// llama.cpp's server, OpenRouter (https://openrouter.ai/api/v1).
//
// Chat Completions, not the Responses API, because it is the dialect those
// servers speak. Every call streams with stream_options.include_usage, so the
// last chunk carries the token counts. The SDK is built from explicit options
// only (no OPENAI_* environment), with its retries off (llm.Client retries).
//
// What Chat Completions cannot carry is flattened (see messages in
// convert.go): tool results become "tool" messages, images in tool results move
// to a following user message, thinking is not sent back. Reasoning that
// OpenAI-compatible servers stream as "reasoning_content" (vLLM, DeepSeek) or
// "reasoning" (Ollama, OpenRouter) arrives as ThinkingDelta events.
//
// Usage: prompt_tokens includes prompt_tokens_details.cached_tokens (and
// cache_write_tokens where reported); InputTokens is what is left, so that
// llm.Usage means the same for every provider.
package openai

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/harvest-dev/harvest/llm"
)

// Name is the provider's default name, the prefix of its model names.
const Name = "openai"

// DefaultBaseURL is the OpenAI API.
const DefaultBaseURL = "https://api.openai.com/v1"

// Config configures a Provider.
type Config struct {
	// Name overrides the provider name used in errors ("ollama", "vllm");
	// default "openai".
	Name string
	// APIKey is sent as a bearer token. Required for the OpenAI API; optional
	// for other servers (Ollama and llama.cpp need none).
	APIKey string
	// BaseURL includes the /v1 path; default DefaultBaseURL.
	BaseURL string
	// HTTPClient sends the requests; nil uses a client with no overall timeout.
	HTTPClient *http.Client
	// MaxTokensField is the request field that carries Request.MaxTokens:
	// "max_completion_tokens" (OpenAI's, which its reasoning models require) or
	// "max_tokens" (what most OpenAI-compatible servers read). Default: the
	// first for api.openai.com, the second elsewhere.
	MaxTokensField string
}

// Provider calls Chat Completions. It is safe for concurrent use.
type Provider struct {
	name            string
	chat            sdk.ChatCompletionService
	legacyMaxTokens bool
}

var _ llm.Provider = (*Provider)(nil)

// New returns a provider for cfg.
func New(cfg Config) (*Provider, error) {
	name := cfg.Name
	if name == "" {
		name = Name
	}
	base := cfg.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("%s: base URL %q is not an absolute URL like https://api.openai.com/v1", name, base)
	}
	official := u.Host == "api.openai.com"
	if official && cfg.APIKey == "" {
		return nil, fmt.Errorf("%s: no API key; set OPENAI_API_KEY (or the endpoint's api_key)", name)
	}
	legacy := !official
	switch cfg.MaxTokensField {
	case "":
	case "max_tokens":
		legacy = true
	case "max_completion_tokens":
		legacy = false
	default:
		return nil, fmt.Errorf("%s: MaxTokensField %q; use max_tokens or max_completion_tokens", name, cfg.MaxTokensField)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	opts := []option.RequestOption{
		option.WithBaseURL(base),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	return &Provider{name: name, chat: sdk.NewChatCompletionService(opts...), legacyMaxTokens: legacy}, nil
}

// Name returns the provider's name.
func (p *Provider) Name() string { return p.name }

// Stream sends one streaming Chat Completions request. See llm.Provider.
func (p *Provider) Stream(ctx context.Context, req llm.Request, fn func(llm.Event)) (*llm.Response, error) {
	stream := p.chat.NewStreaming(ctx, p.params(req))
	defer stream.Close()

	a := assembler{emit: fn, open: -1}
	for stream.Next() {
		if ctx.Err() != nil {
			break // no event after a cancel, even one already buffered
		}
		a.add(stream.Current())
	}
	if err := stream.Err(); err != nil {
		return nil, p.classify(ctx, err)
	}
	if ce := llm.ContextError(ctx, p.name); ce != nil {
		return nil, ce
	}
	if !a.finished {
		return nil, &llm.Error{Kind: llm.ErrNetwork, Provider: p.name,
			Message: "the response stream ended before a finish_reason"}
	}
	if err := a.finish(); err != nil {
		return nil, &llm.Error{Kind: llm.ErrServer, Provider: p.name, Message: err.Error()}
	}
	return &a.resp, nil
}
