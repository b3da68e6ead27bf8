// Package anthropic is the llm.Provider for the Anthropic Messages API, on the
// official SDK (github.com/anthropics/anthropic-sdk-go).
//
// Every call streams (POST /v1/messages with "stream": true): the SDK decodes
// the server-sent events and this package turns them into llm events and an
// llm.Response. It assembles the message itself from the events rather than
// with the SDK's Message.Accumulate, which rebuilds the raw JSON of the message
// after every delta; nothing here needs that JSON.
//
// The SDK is built with its environment defaults off and its retries off
// (llm.Client retries): the API key and base URL come only from Config, so a
// stray ANTHROPIC_* variable or profile file never changes where requests go.
//
// Prompt caching: with llm.Request.Cache the system prompt, the last tool and
// the last cacheable block of the last message carry cache_control (3 of the
// API's 4 breakpoints), so each step of an agent loop writes the conversation
// so far and the next step reads it back.
package anthropic

import (
	"context"
	"fmt"
	"net/http"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/harvest-dev/harvest/llm"
)

// Name is the provider's default name, the prefix of its model names.
const Name = "anthropic"

// DefaultBaseURL is the Anthropic API.
const DefaultBaseURL = "https://api.anthropic.com"

// Config configures a Provider.
type Config struct {
	// Name overrides the provider name used in errors; default "anthropic".
	Name string
	// APIKey is sent as x-api-key. Required.
	APIKey string
	// BaseURL is the API's base URL (without /v1); default DefaultBaseURL. Point
	// it at `harvest sim` or a proxy.
	BaseURL string
	// HTTPClient sends the requests; nil uses a client with no overall timeout
	// (streams can be long; Request.Timeout and the context bound them).
	HTTPClient *http.Client
}

// Provider calls the Messages API. It is safe for concurrent use.
type Provider struct {
	name string
	msgs sdk.MessageService
}

var (
	_ llm.Provider     = (*Provider)(nil)
	_ llm.TokenCounter = (*Provider)(nil)
)

// New returns a provider for cfg.
func New(cfg Config) (*Provider, error) {
	name := cfg.Name
	if name == "" {
		name = Name
	}
	if cfg.APIKey == "" {
		return nil, fmt.Errorf("%s: no API key; set ANTHROPIC_API_KEY (or the endpoint's api_key)", name)
	}
	base := cfg.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	msgs := sdk.NewMessageService(
		option.WithBaseURL(base),
		option.WithAPIKey(cfg.APIKey),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
	)
	return &Provider{name: name, msgs: msgs}, nil
}

// Name returns the provider's name.
func (p *Provider) Name() string { return p.name }

// Stream sends one streaming Messages request. See llm.Provider.
func (p *Provider) Stream(ctx context.Context, req llm.Request, fn func(llm.Event)) (*llm.Response, error) {
	stream := p.msgs.NewStreaming(ctx, params(req))
	defer stream.Close()

	a := assembler{emit: fn}
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
	if !a.stopped {
		return nil, &llm.Error{Kind: llm.ErrNetwork, Provider: p.name,
			Message: "the response stream ended before message_stop"}
	}
	if err := a.finish(); err != nil {
		return nil, &llm.Error{Kind: llm.ErrServer, Provider: p.name, Message: err.Error()}
	}
	return &a.resp, nil
}

// CountTokens returns the input tokens of req (POST /v1/messages/count_tokens).
func (p *Provider) CountTokens(ctx context.Context, req llm.Request) (int, error) {
	res, err := p.msgs.CountTokens(ctx, countParams(req))
	if err != nil {
		return 0, p.classify(ctx, err)
	}
	return int(res.InputTokens), nil
}
