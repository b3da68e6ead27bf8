package secrets

import (
	"encoding/json"
	"sort"
	"strings"
)

// Mask replaces a secret value in redacted text.
const Mask = "[secret]"

// Redactor scrubs known secret values out of text. It is safe for
// concurrent use; a nil *Redactor changes nothing.
type Redactor struct {
	r *strings.Replacer
}

// NewRedactor scrubs values (empty ones are ignored). Every value is
// replaced by Mask, as it is and as JSON escapes it (a value with a quote
// or a newline in an event's JSON); where two values overlap, the longer
// one wins. Every value counts, however short: a one-letter secret masks
// that letter everywhere, so such a secret ruins the logs it protects.
func NewRedactor(values ...string) *Redactor {
	seen := map[string]bool{}
	var olds []string
	add := func(v string) {
		if v != "" && !seen[v] {
			seen[v] = true
			olds = append(olds, v)
		}
	}
	for _, v := range values {
		add(v)
		if b, err := json.Marshal(v); err == nil {
			add(string(b[1 : len(b)-1]))
		}
	}
	if len(olds) == 0 {
		return &Redactor{}
	}
	// strings.Replacer tries the olds in argument order at each position:
	// longest first makes the longest match win.
	sort.SliceStable(olds, func(i, j int) bool { return len(olds[i]) > len(olds[j]) })
	pairs := make([]string, 0, 2*len(olds))
	for _, o := range olds {
		pairs = append(pairs, o, Mask)
	}
	return &Redactor{r: strings.NewReplacer(pairs...)}
}

// EnvRedactor scrubs the values of KEY=VALUE lists (Resolve's).
func EnvRedactor(envs ...[]string) *Redactor {
	var values []string
	for _, env := range envs {
		for _, kv := range env {
			if _, v, ok := strings.Cut(kv, "="); ok {
				values = append(values, v)
			}
		}
	}
	return NewRedactor(values...)
}

// Redact returns s with every known value replaced by Mask.
func (r *Redactor) Redact(s string) string {
	if r == nil || r.r == nil {
		return s
	}
	return r.r.Replace(s)
}
