// Package providers lists every model API Harvest speaks, in one place, and
// opens a client from a model name such as "anthropic/claude-sonnet-4-5".
//
// The part before the first slash names an endpoint; the rest is the model id
// the endpoint's API is asked for. Two endpoints always exist, "anthropic" and
// "openai" (FromEnv fills them from ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL and
// OPENAI_API_KEY / OPENAI_BASE_URL); more can be configured, each speaking one
// of the APIs, so that one Harvest can use Anthropic, OpenAI and a local Ollama
// side by side:
//
//	cfg := providers.FromEnv()
//	cfg.Endpoints["ollama"] = providers.Endpoint{API: "openai", BaseURL: "http://localhost:11434/v1"}
//	c, err := providers.Open(cfg, "ollama/qwen3-coder")
//
// It is a package of its own because it imports every provider, and the
// providers import llm.
package providers

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/llm/anthropic"
	"github.com/harvest-dev/harvest/llm/openai"
)

// Endpoint is one place models are served from.
type Endpoint struct {
	// API is the wire protocol, a name in APIs: "anthropic" or "openai". Empty
	// means the endpoint's own name (for the "anthropic" and "openai" endpoints).
	API string `json:"api,omitempty" yaml:"api,omitempty"`
	// BaseURL overrides the API's default (for OpenAI-compatible servers it
	// includes /v1).
	BaseURL string `json:"base_url,omitempty" yaml:"base_url,omitempty"`
	// APIKey authenticates; see each API for when it is required.
	APIKey string `json:"api_key,omitempty" yaml:"api_key,omitempty"`
}

// Config says where models are served and how clients behave.
type Config struct {
	// Endpoints by name, the prefix of model names.
	Endpoints map[string]Endpoint
	// Retry is every client's retry policy.
	Retry llm.RetryPolicy
	// HTTPClient sends every request; nil gives each provider its own default.
	HTTPClient *http.Client
	// Prices prices responses (Client.Cost); nil means llm.DefaultPrices.
	Prices *llm.PriceTable
}

// API is one wire protocol and the package that speaks it.
type API struct {
	Name string
	// KeyEnv and BaseURLEnv are what FromEnv reads for the endpoint of the same
	// name.
	KeyEnv, BaseURLEnv string
	// New returns a provider for an endpoint.
	New func(name string, e Endpoint, hc *http.Client) (llm.Provider, error)
}

// APIs lists every API Harvest speaks.
var APIs = []API{
	{
		Name: anthropic.Name, KeyEnv: "ANTHROPIC_API_KEY", BaseURLEnv: "ANTHROPIC_BASE_URL",
		New: func(name string, e Endpoint, hc *http.Client) (llm.Provider, error) {
			return anthropic.New(anthropic.Config{Name: name, APIKey: e.APIKey, BaseURL: e.BaseURL, HTTPClient: hc})
		},
	},
	{
		Name: openai.Name, KeyEnv: "OPENAI_API_KEY", BaseURLEnv: "OPENAI_BASE_URL",
		New: func(name string, e Endpoint, hc *http.Client) (llm.Provider, error) {
			return openai.New(openai.Config{Name: name, APIKey: e.APIKey, BaseURL: e.BaseURL, HTTPClient: hc})
		},
	},
}

// FromEnv returns a Config with an endpoint per API, named after it, whose key
// and base URL come from the environment (unset variables leave them empty:
// Open then says which variable to set).
func FromEnv() Config {
	cfg := Config{Endpoints: map[string]Endpoint{}}
	for _, api := range APIs {
		cfg.Endpoints[api.Name] = Endpoint{
			API:     api.Name,
			APIKey:  strings.TrimSpace(os.Getenv(api.KeyEnv)),
			BaseURL: strings.TrimSpace(os.Getenv(api.BaseURLEnv)),
		}
	}
	return cfg
}

// Open returns a client for a model name "endpoint/model".
func Open(cfg Config, name string) (*llm.Client, error) {
	endpoint, model, err := llm.ParseModel(name)
	if err != nil {
		return nil, err
	}
	e, ok := cfg.Endpoints[endpoint]
	if !ok {
		return nil, fmt.Errorf("model %q: unknown provider %q; configured: %s (another OpenAI-compatible server needs an endpoint in the config: api openai, its base URL and key)",
			name, endpoint, strings.Join(names(cfg), ", "))
	}
	apiName := e.API
	if apiName == "" {
		apiName = endpoint
	}
	i := slices.IndexFunc(APIs, func(a API) bool { return a.Name == apiName })
	if i < 0 {
		var known []string
		for _, a := range APIs {
			known = append(known, a.Name)
		}
		return nil, fmt.Errorf("model %q: endpoint %q has API %q; want one of %s", name, endpoint, apiName, strings.Join(known, ", "))
	}
	p, err := APIs[i].New(endpoint, e, cfg.HTTPClient)
	if err != nil {
		return nil, fmt.Errorf("model %q: %w", name, err)
	}
	return &llm.Client{Provider: p, Model: model, Retry: cfg.Retry, Prices: cfg.Prices}, nil
}

func names(cfg Config) []string {
	var out []string
	for n := range cfg.Endpoints {
		out = append(out, n)
	}
	slices.Sort(out)
	if len(out) == 0 {
		out = []string{"none"}
	}
	return out
}
