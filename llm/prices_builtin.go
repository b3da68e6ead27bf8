package llm

// builtinPrices are list prices in USD per million tokens (standard tier, no
// batch discount), as read on 2026-11-22. They change: users override or add
// entries with SetPrice or LoadPrices (a JSON/YAML file), and an unpriced model
// costs nothing rather than something wrong (Cost reports ok=false).
//
// Sources:
//   - Anthropic: https://platform.claude.com/docs/en/about-claude/pricing
//     ("Model pricing", "Long context pricing") and the model overview pages
//     (https://platform.claude.com/docs/en/models/...), for Opus 5.5 / Sonnet
//     5.5 / Haiku 5.5 cross-checked against release notes of pricing tools that
//     track that page: Sonnet 5.5 cache reads were cut to $0.10 on 2026-10-07;
//     Haiku 5.5 charges a higher tier above 100k prompt tokens.
//     CacheWrite is the 5-minute cache write rate (1.25x input).
//   - OpenAI: https://developers.openai.com/api/docs/pricing ("Text tokens").
//     CacheRead is "cached input". OpenAI bills cache writes at the input rate,
//     except where a cache-write price is published (GPT-5.6 and later: 1.25x
//     input). GPT-6 charges more above 272k prompt tokens.
var builtinPrices = map[string]Price{
	// Anthropic.
	"claude-fable-5-1":  {Input: 10, Output: 50, CacheRead: 0.25, CacheWrite: 12.50},
	"claude-mythos-5-1": {Input: 10, Output: 50, CacheRead: 0.25, CacheWrite: 12.50},
	"claude-fable-5":    {Input: 10, Output: 50, CacheRead: 1, CacheWrite: 12.50},
	"claude-mythos-5":   {Input: 10, Output: 50, CacheRead: 1, CacheWrite: 12.50},
	"claude-opus-5-5":   {Input: 4, Output: 20, CacheRead: 0.20, CacheWrite: 5},
	"claude-opus-5":     {Input: 5, Output: 25, CacheRead: 0.50, CacheWrite: 6.25},
	"claude-opus-4-8":   {Input: 5, Output: 25, CacheRead: 0.50, CacheWrite: 6.25},
	"claude-opus-4-7":   {Input: 5, Output: 25, CacheRead: 0.50, CacheWrite: 6.25},
	"claude-opus-4-6":   {Input: 5, Output: 25, CacheRead: 0.50, CacheWrite: 6.25},
	"claude-opus-4-5":   {Input: 5, Output: 25, CacheRead: 0.50, CacheWrite: 6.25},
	"claude-opus-4-1":   {Input: 15, Output: 75, CacheRead: 1.50, CacheWrite: 18.75},
	"claude-opus-4-0":   {Input: 15, Output: 75, CacheRead: 1.50, CacheWrite: 18.75},
	"claude-opus-4":     {Input: 15, Output: 75, CacheRead: 1.50, CacheWrite: 18.75},
	"claude-sonnet-5-5": {Input: 2, Output: 10, CacheRead: 0.10, CacheWrite: 2.50},
	"claude-sonnet-5":   {Input: 2, Output: 10, CacheRead: 0.20, CacheWrite: 2.50},
	"claude-sonnet-4-6": {Input: 3, Output: 15, CacheRead: 0.30, CacheWrite: 3.75},
	"claude-sonnet-4-5": {Input: 3, Output: 15, CacheRead: 0.30, CacheWrite: 3.75, LongPrompt: sonnet4Long},
	"claude-sonnet-4-0": {Input: 3, Output: 15, CacheRead: 0.30, CacheWrite: 3.75, LongPrompt: sonnet4Long},
	"claude-sonnet-4":   {Input: 3, Output: 15, CacheRead: 0.30, CacheWrite: 3.75, LongPrompt: sonnet4Long},
	"claude-3-7-sonnet": {Input: 3, Output: 15, CacheRead: 0.30, CacheWrite: 3.75},
	"claude-haiku-5-5": {Input: 0.10, Output: 0.50, CacheRead: 0.01, CacheWrite: 0.125,
		LongPrompt: &LongPromptPrice{Above: 100_000, Input: 0.50, Output: 2.50, CacheRead: 0.05, CacheWrite: 0.625}},
	"claude-haiku-4-5": {Input: 1, Output: 5, CacheRead: 0.10, CacheWrite: 1.25},
	"claude-3-5-haiku": {Input: 0.80, Output: 4, CacheRead: 0.08, CacheWrite: 1},
	"claude-3-haiku":   {Input: 0.25, Output: 1.25, CacheRead: 0.03, CacheWrite: 0.30},

	// OpenAI.
	"gpt-6-sol": {Input: 2, Output: 10, CacheRead: 0.20, CacheWrite: 2.50,
		LongPrompt: &LongPromptPrice{Above: 272_000, Input: 4, Output: 15, CacheRead: 0.40, CacheWrite: 5}},
	"gpt-6-luna": {Input: 0.10, Output: 0.50, CacheRead: 0.01, CacheWrite: 0.125,
		LongPrompt: &LongPromptPrice{Above: 272_000, Input: 0.20, Output: 0.75, CacheRead: 0.02, CacheWrite: 0.25}},
	"gpt-5.6-sol":  {Input: 4, Output: 20, CacheRead: 0.40, CacheWrite: 5},
	"gpt-5.6-luna": {Input: 0.20, Output: 1.20, CacheRead: 0.02, CacheWrite: 0.25},
	"gpt-5.5":      {Input: 5, Output: 30, CacheRead: 0.50, CacheWrite: 5},
	"gpt-5.4":      {Input: 2.50, Output: 15, CacheRead: 0.25, CacheWrite: 2.50},
	"gpt-5.4-mini": {Input: 0.75, Output: 4.50, CacheRead: 0.075, CacheWrite: 0.75},
	"gpt-5.4-nano": {Input: 0.20, Output: 1.25, CacheRead: 0.02, CacheWrite: 0.20},
	"gpt-5.2":      {Input: 1.75, Output: 14, CacheRead: 0.175, CacheWrite: 1.75},
	"gpt-5.1":      {Input: 1.25, Output: 10, CacheRead: 0.125, CacheWrite: 1.25},
	"gpt-5":        {Input: 1.25, Output: 10, CacheRead: 0.125, CacheWrite: 1.25},
	"gpt-5-mini":   {Input: 0.25, Output: 2, CacheRead: 0.025, CacheWrite: 0.25},
	"gpt-5-nano":   {Input: 0.05, Output: 0.40, CacheRead: 0.005, CacheWrite: 0.05},
	"gpt-4.1":      {Input: 2, Output: 8, CacheRead: 0.50, CacheWrite: 2},
	"gpt-4.1-mini": {Input: 0.40, Output: 1.60, CacheRead: 0.10, CacheWrite: 0.40},
	"gpt-4.1-nano": {Input: 0.10, Output: 0.40, CacheRead: 0.025, CacheWrite: 0.10},
	"gpt-4o":       {Input: 2.50, Output: 10, CacheRead: 1.25, CacheWrite: 2.50},
	"gpt-4o-mini":  {Input: 0.15, Output: 0.60, CacheRead: 0.075, CacheWrite: 0.15},
	"o3":           {Input: 2, Output: 8, CacheRead: 0.50, CacheWrite: 2},
	"o3-mini":      {Input: 1.10, Output: 4.40, CacheRead: 0.55, CacheWrite: 1.10},
	"o4-mini":      {Input: 1.10, Output: 4.40, CacheRead: 0.275, CacheWrite: 1.10},
}

// sonnet4Long is Claude Sonnet 4 / 4.5 above 200k prompt tokens (1M context).
var sonnet4Long = &LongPromptPrice{Above: 200_000, Input: 6, Output: 22.50, CacheRead: 0.60, CacheWrite: 7.50}
