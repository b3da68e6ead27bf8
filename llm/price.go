package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

// Price is what a model costs, in USD per million tokens.
type Price struct {
	Input  float64 `json:"input" yaml:"input"`
	Output float64 `json:"output" yaml:"output"`
	// CacheRead is the rate for prompt tokens read from the cache.
	CacheRead float64 `json:"cache_read" yaml:"cache_read"`
	// CacheWrite is the rate for prompt tokens written to the cache (Anthropic's
	// 5-minute cache, which is what Request.Cache asks for).
	CacheWrite float64 `json:"cache_write" yaml:"cache_write"`
	// LongPrompt, when set, replaces all four rates for every token of a call
	// whose prompt (Usage.PromptTokens) exceeds LongPrompt.Above.
	LongPrompt *LongPromptPrice `json:"long_prompt,omitempty" yaml:"long_prompt,omitempty"`
}

// LongPromptPrice is the rate tier of a model that charges more for long
// prompts.
type LongPromptPrice struct {
	// Above is the prompt size, in tokens, beyond which these rates apply.
	Above      int     `json:"above" yaml:"above"`
	Input      float64 `json:"input" yaml:"input"`
	Output     float64 `json:"output" yaml:"output"`
	CacheRead  float64 `json:"cache_read" yaml:"cache_read"`
	CacheWrite float64 `json:"cache_write" yaml:"cache_write"`
}

// Cost returns the USD cost of usage u at price p.
func (p Price) Cost(u Usage) float64 {
	in, out, read, write := p.Input, p.Output, p.CacheRead, p.CacheWrite
	if lp := p.LongPrompt; lp != nil && u.PromptTokens() > lp.Above {
		in, out, read, write = lp.Input, lp.Output, lp.CacheRead, lp.CacheWrite
	}
	return (float64(u.InputTokens)*in +
		float64(u.OutputTokens)*out +
		float64(u.CacheReadTokens)*read +
		float64(u.CacheWriteTokens)*write) / 1e6
}

func (p Price) validate() error {
	rates := []float64{p.Input, p.Output, p.CacheRead, p.CacheWrite}
	if lp := p.LongPrompt; lp != nil {
		if lp.Above <= 0 {
			return fmt.Errorf("long_prompt.above must be a positive token count")
		}
		rates = append(rates, lp.Input, lp.Output, lp.CacheRead, lp.CacheWrite)
	}
	for _, r := range rates {
		if r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
			return fmt.Errorf("prices must be non-negative numbers (USD per million tokens)")
		}
	}
	return nil
}

// PriceTable maps model ids to prices. It is safe for concurrent use.
//
// Lookup is by the model id as the API names it, case-insensitively; a
// "provider/" prefix is ignored, and a dated snapshot ("claude-sonnet-4-5-20250929",
// "gpt-4.1-2025-04-14") falls back to its alias when it has no entry of its
// own. Other variants ("gpt-5-pro") never borrow a base model's price.
type PriceTable struct {
	mu     sync.RWMutex
	prices map[string]Price
}

// DefaultPrices holds the built-in prices (see prices_builtin.go for sources
// and date) plus whatever SetPrice and LoadPrices added.
var DefaultPrices = NewPriceTable(builtinPrices)

// NewPriceTable returns a table holding a copy of prices.
func NewPriceTable(prices map[string]Price) *PriceTable {
	t := &PriceTable{prices: make(map[string]Price, len(prices))}
	for m, p := range prices {
		t.prices[strings.ToLower(m)] = p
	}
	return t
}

// Set adds or replaces the price of model.
func (t *PriceTable) Set(model string, p Price) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.prices[strings.ToLower(model)] = p
}

// Lookup returns the price of model (see PriceTable for how it matches).
func (t *PriceTable) Lookup(model string) (Price, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	key, ok := t.keyLocked(model)
	return t.prices[key], ok
}

// Key returns the name the table prices model under (its own lower-cased,
// or its snapshot's alias, without an endpoint prefix), and whether it
// prices it: one name for every spelling of a model, and a bounded set of
// them, as metrics' labels want.
func (t *PriceTable) Key(model string) (string, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.keyLocked(model)
}

func (t *PriceTable) keyLocked(model string) (string, bool) {
	m := strings.ToLower(strings.TrimSpace(model))
	for m != "" {
		if _, ok := t.prices[m]; ok {
			return m, true
		}
		if base, ok := snapshotAlias(m); ok {
			if _, ok := t.prices[base]; ok {
				return base, true
			}
		}
		_, rest, ok := strings.Cut(m, "/")
		if !ok {
			break
		}
		m = rest
	}
	return "", false
}

// Cost returns the USD cost of usage u on model, and whether the model is
// priced (false gives 0).
func (t *PriceTable) Cost(model string, u Usage) (usd float64, ok bool) {
	p, ok := t.Lookup(model)
	if !ok {
		return 0, false
	}
	return p.Cost(u), true
}

// Load adds the prices in a JSON (.json) or YAML (.yaml, .yml) file, replacing
// entries for the same models. The file maps model ids to prices in USD per
// million tokens:
//
//	my-finetune: {input: 1.5, output: 6}
//	claude-sonnet-4-5: {input: 3, output: 15, cache_read: 0.3, cache_write: 3.75}
//
// Unknown fields and negative prices are errors; on error nothing is added.
func (t *PriceTable) Load(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading price file: %w", err)
	}
	prices := map[string]Price{}
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".json":
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		err = dec.Decode(&prices)
	case ".yaml", ".yml":
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err = dec.Decode(&prices); errors.Is(err, io.EOF) {
			err = nil // an empty file adds nothing
		}
	default:
		return fmt.Errorf("price file %s: unknown extension %q; use .json, .yaml or .yml", path, ext)
	}
	if err != nil {
		return fmt.Errorf("price file %s: %w", path, err)
	}
	for m, p := range prices {
		if strings.TrimSpace(m) == "" {
			return fmt.Errorf("price file %s: an entry has an empty model id", path)
		}
		if err := p.validate(); err != nil {
			return fmt.Errorf("price file %s: model %q: %w", path, m, err)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for m, p := range prices {
		t.prices[strings.ToLower(m)] = p
	}
	return nil
}

// SetPrice adds or replaces a price in DefaultPrices.
func SetPrice(model string, p Price) { DefaultPrices.Set(model, p) }

// LoadPrices adds the prices in a JSON or YAML file to DefaultPrices (see
// PriceTable.Load).
func LoadPrices(path string) error { return DefaultPrices.Load(path) }

// Cost returns the USD cost of usage u on model with DefaultPrices, and
// whether the model is priced.
func Cost(model string, u Usage) (usd float64, ok bool) { return DefaultPrices.Cost(model, u) }

// snapshotAlias strips a snapshot date from a model id: "-20250929" (Anthropic)
// or "-2025-04-14" (OpenAI).
func snapshotAlias(m string) (string, bool) {
	if i := len(m) - 9; i > 0 && m[i] == '-' && allDigits(m[i+1:]) {
		return m[:i], true
	}
	if i := len(m) - 11; i > 0 && m[i] == '-' && m[i+5] == '-' && m[i+8] == '-' &&
		allDigits(m[i+1:i+5]) && allDigits(m[i+6:i+8]) && allDigits(m[i+9:]) {
		return m[:i], true
	}
	return "", false
}

func allDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}
