package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// The input schemas are built from field lists rather than written as JSON by
// hand, and decodeInput checks the model's input against the same schema, so
// what the model is told and what is enforced cannot drift apart. The checks
// cover the subset of JSON Schema the tools use: an object with typed
// properties, required fields, enums and integer bounds; no additional
// properties.

type field struct {
	name     string
	typ      string // string | integer | boolean | array
	desc     string
	required bool
	enum     []string
	min, max *int
	items    map[string]any // schema of array items
}

func ptr(i int) *int { return &i }

func schema(fields ...field) json.RawMessage {
	props := map[string]any{}
	var required []string
	for _, f := range fields {
		p := map[string]any{"type": f.typ, "description": f.desc}
		if len(f.enum) > 0 {
			p["enum"] = f.enum
		}
		if f.min != nil {
			p["minimum"] = *f.min
		}
		if f.max != nil {
			p["maximum"] = *f.max
		}
		if f.items != nil {
			p["items"] = f.items
		}
		props[f.name] = p
		if f.required {
			required = append(required, f.name)
		}
	}
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return b
}

type schemaProp struct {
	Type    string   `json:"type"`
	Enum    []string `json:"enum"`
	Minimum *float64 `json:"minimum"`
	Maximum *float64 `json:"maximum"`
}

type schemaDoc struct {
	Properties map[string]schemaProp `json:"properties"`
	Required   []string              `json:"required"`
}

// decodeInput checks raw against the tool's schema and decodes it into out.
// It returns "" on success, else the message for the model.
func decodeInput(tool string, sch json.RawMessage, raw json.RawMessage, out any) string {
	var doc schemaDoc
	if err := json.Unmarshal(sch, &doc); err != nil {
		return fmt.Sprintf("internal error: the schema of %s is invalid: %v", tool, err)
	}
	fail := func(format string, args ...any) string {
		return fmt.Sprintf("invalid input for %s: %s. Expected a JSON object with: %s.", tool, fmt.Sprintf(format, args...), describeFields(doc))
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}") // providers send nothing for a call without arguments
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return fail("the input is %s, not an object", jsonKind(raw))
		}
		return fail("the input is not valid JSON (%v)", err)
	}
	var names []string
	for k := range obj {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if _, ok := doc.Properties[k]; !ok {
			return fail("unknown field %q", k)
		}
	}
	for _, k := range doc.Required {
		if v, ok := obj[k]; !ok || string(v) == "null" {
			return fail("the required field %q is missing", k)
		}
	}
	for _, k := range names {
		v, p := obj[k], doc.Properties[k]
		if string(v) == "null" {
			continue // null is "not given"
		}
		got := jsonKind(v)
		want := p.Type
		switch want {
		case "integer":
			var f float64
			if got != "a number" || json.Unmarshal(v, &f) != nil || f != math.Trunc(f) {
				return fail("field %q must be an integer, got %s", k, describeValue(v))
			}
			if p.Minimum != nil && f < *p.Minimum {
				return fail("field %q must be at least %v, got %v", k, *p.Minimum, f)
			}
			if p.Maximum != nil && f > *p.Maximum {
				return fail("field %q must be at most %v, got %v", k, *p.Maximum, f)
			}
		case "string", "boolean", "array", "object":
			if got != "a "+want && got != "an "+want {
				return fail("field %q must be a%s %s, got %s", k, article(want), want, describeValue(v))
			}
			if want == "string" && len(p.Enum) > 0 {
				var s string
				_ = json.Unmarshal(v, &s)
				if !slices.Contains(p.Enum, s) {
					return fail("field %q must be one of %s, got %q", k, quoteList(p.Enum), s)
				}
			}
		}
	}
	if err := json.Unmarshal(raw, out); err != nil { // null leaves a field at its zero value

		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return fail("field %q has the wrong type: want %s, got a JSON %s", ute.Field, goKind(ute.Type.Kind().String()), ute.Value)
		}
		return fail("%v", err)
	}
	return ""
}

func article(s string) string {
	if strings.ContainsRune("aeiou", rune(s[0])) {
		return "n"
	}
	return ""
}

func goKind(k string) string {
	switch k {
	case "int", "int64", "int32":
		return "an integer"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	}
	return k
}

func jsonKind(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "empty"
	}
	switch v[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

func describeValue(v json.RawMessage) string {
	s := string(v)
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return fmt.Sprintf("%s (%s)", s, jsonKind(v))
}

func describeFields(doc schemaDoc) string {
	var names []string
	for k := range doc.Properties {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int {
		ra, rb := slices.Contains(doc.Required, a), slices.Contains(doc.Required, b)
		if ra != rb {
			if ra {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, n := range names {
		p := doc.Properties[n]
		s := n + " (" + p.Type
		if slices.Contains(doc.Required, n) {
			s += ", required"
		}
		parts = append(parts, s+")")
	}
	if len(parts) == 0 {
		return "no fields"
	}
	return strings.Join(parts, ", ")
}

func quoteList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return strings.Join(q, ", ")
}
