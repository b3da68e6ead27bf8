package opencode

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// TestedVersion is the OpenCode release this package is written and
// tested against (internal/testbin pins the same). Other versions are used
// if their API passes CheckAPI.
const TestedVersion = "1.18.33"

// IncompatibleError says that an OpenCode server lacks operations, event
// types or fields this package relies on. The agent cannot work with that
// version: install TestedVersion, or update this package.
type IncompatibleError struct {
	Version string   // what the server reported (GET /global/health)
	Missing []string // what is missing, like "POST /session/{sessionID}/prompt_async (session.prompt_async)"
}

func (e *IncompatibleError) Error() string {
	return fmt.Sprintf("opencode %s is not compatible with Harvest's opencode agent (written for %s): its API (GET /doc) lacks %s; install opencode-ai@%s or update agent/opencode",
		e.Version, TestedVersion, strings.Join(e.Missing, "; "), TestedVersion)
}

// operation is an HTTP operation the agent calls.
type operation struct {
	method, path, id string
	body             []string // request body properties it sends
}

// operations are every call the agent makes.
var operations = []operation{
	{"get", "/global/health", "global.health", nil},
	{"post", "/session", "session.create", []string{"title"}},
	{"get", "/session/{sessionID}", "session.get", nil},
	{"get", "/session/{sessionID}/message", "session.messages", nil},
	{"post", "/session/{sessionID}/prompt_async", "session.prompt_async", []string{"parts"}},
	{"post", "/session/{sessionID}/abort", "session.abort", nil},
	{"get", "/session/status", "session.status", nil},
	{"get", "/event", "event.subscribe", nil},
	{"post", "/permission/{requestID}/reply", "permission.reply", []string{"reply"}},
	{"post", "/question/{requestID}/reject", "question.reject", nil},
}

// eventTypes are the events the agent maps; partTypes the message parts,
// with the fields it reads.
var (
	eventTypes = []string{"message.updated", "message.part.updated", "message.part.delta", "session.status", "session.idle", "session.error", "permission.asked", "question.asked"}
	partFields = map[string][]string{
		"text":        {"messageID", "text", "time"},
		"reasoning":   {"messageID", "text", "time"},
		"tool":        {"messageID", "callID", "tool", "state"},
		"step-start":  {"messageID"},
		"step-finish": {"messageID", "reason", "cost", "tokens"},
	}
	toolStates = map[string][]string{
		"pending":   {"input"},
		"running":   {"input", "metadata"},
		"completed": {"input", "output", "time"},
		"error":     {"input", "error", "time"},
	}
)

// openAPI is the part of an OpenAPI 3 document CheckAPI reads.
type openAPI struct {
	Paths      map[string]map[string]apiOperation `json:"paths"`
	Components struct {
		Schemas map[string]*schema `json:"schemas"`
	} `json:"components"`
}

type apiOperation struct {
	OperationID string `json:"operationId"`
	RequestBody *struct {
		Content map[string]struct {
			Schema *schema `json:"schema"`
		} `json:"content"`
	} `json:"requestBody"`
}

type schema struct {
	Ref        string             `json:"$ref"`
	AnyOf      []*schema          `json:"anyOf"`
	OneOf      []*schema          `json:"oneOf"`
	Properties map[string]*schema `json:"properties"`
	Enum       []any              `json:"enum"`
	Const      any                `json:"const"`
}

// CheckAPI checks an OpenCode server's OpenAPI document (GET /doc) for
// everything the agent uses: the operations it calls and the body fields
// it sends, the event types it maps and, for each message part and tool
// state, the fields it reads. version is what the server reported, for the
// error. A mismatch is an *IncompatibleError listing all that is missing.
func CheckAPI(doc []byte, version string) error {
	var d openAPI
	if err := json.Unmarshal(doc, &d); err != nil {
		return fmt.Errorf("opencode %s: its API description (GET /doc) is not an OpenAPI document: %w", version, err)
	}
	var missing []string
	for _, op := range operations {
		o, ok := d.Paths[op.path][op.method]
		if !ok || o.OperationID != op.id {
			missing = append(missing, fmt.Sprintf("%s %s (%s)", strings.ToUpper(op.method), op.path, op.id))
			continue
		}
		if len(op.body) == 0 {
			continue
		}
		var body *schema
		if o.RequestBody != nil {
			body = d.resolve(o.RequestBody.Content["application/json"].Schema)
		}
		for _, f := range op.body {
			if body == nil || body.Properties[f] == nil {
				missing = append(missing, fmt.Sprintf("the %q field of %s %s", f, strings.ToUpper(op.method), op.path))
			}
		}
	}
	events := d.variants(d.Components.Schemas["Event"])
	for _, t := range eventTypes {
		if events[t] == nil {
			missing = append(missing, "event "+t)
		}
	}
	parts := d.variants(d.Components.Schemas["Part"])
	for _, t := range sortedKeys(partFields) {
		p := parts[t]
		if p == nil {
			missing = append(missing, "message part "+t)
			continue
		}
		for _, f := range partFields[t] {
			if p.Properties[f] == nil {
				missing = append(missing, fmt.Sprintf("the %q field of message part %s", f, t))
			}
		}
	}
	if tool := parts["tool"]; tool != nil && tool.Properties["state"] != nil {
		states := d.variantsBy(tool.Properties["state"], "status")
		for _, s := range sortedKeys(toolStates) {
			st := states[s]
			if st == nil {
				missing = append(missing, "tool state "+s)
				continue
			}
			for _, f := range toolStates[s] {
				if st.Properties[f] == nil {
					missing = append(missing, fmt.Sprintf("the %q field of tool state %s", f, s))
				}
			}
		}
	}
	if len(missing) > 0 {
		return &IncompatibleError{Version: version, Missing: missing}
	}
	return nil
}

// resolve follows $refs into components.schemas.
func (d *openAPI) resolve(s *schema) *schema {
	for i := 0; s != nil && s.Ref != "" && i < 16; i++ {
		s = d.Components.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")]
	}
	return s
}

// variants maps each alternative of a union schema by its "type" property.
func (d *openAPI) variants(s *schema) map[string]*schema { return d.variantsBy(s, "type") }

func (d *openAPI) variantsBy(s *schema, key string) map[string]*schema {
	out := map[string]*schema{}
	s = d.resolve(s)
	if s == nil {
		return out
	}
	for _, alt := range slices.Concat(s.AnyOf, s.OneOf) {
		alt = d.resolve(alt)
		if alt == nil {
			continue
		}
		k := d.resolve(alt.Properties[key])
		if k == nil {
			continue
		}
		vals := k.Enum
		if k.Const != nil {
			vals = append(vals, k.Const)
		}
		for _, v := range vals {
			if name, ok := v.(string); ok {
				out[name] = alt
			}
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
