package server

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// The OpenAPI document as far as the tests read it.
type apiDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas    map[string]schema          `json:"schemas"`
		Responses  map[string]json.RawMessage `json:"responses"`
		Parameters map[string]json.RawMessage `json:"parameters"`
	} `json:"components"`
}

type operation struct {
	OperationID string                 `json:"operationId"`
	Security    *[]map[string][]string `json:"security"`
	RequestBody *struct {
		Content map[string]struct {
			Schema schema `json:"schema"`
		} `json:"content"`
	} `json:"requestBody"`
	Responses map[string]json.RawMessage `json:"responses"`
}

type schema struct {
	Ref        string            `json:"$ref"`
	Properties map[string]schema `json:"properties"`
	AllOf      []schema          `json:"allOf"`
	Required   []string          `json:"required"`
}

func loadDoc(t *testing.T) apiDoc {
	t.Helper()
	var d apiDoc
	if err := json.Unmarshal(openAPIDoc, &d); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if d.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q, want 3.1.0", d.OpenAPI)
	}
	return d
}

// testRoutes is the route table of a server (the handlers are not called).
func testRoutes() []route { return (&Server{}).table() }

// TestOpenAPIMatchesRoutes fails when the document and the route table
// drift apart: a route or method on one side only, an operation that does
// not document the errors its route can give, a $ref to nothing.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	d := loadDoc(t)
	documented := map[string]operation{}
	for path, item := range d.Paths {
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			var op operation
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			documented[strings.ToUpper(method)+" "+path] = op
		}
	}
	served := map[string]route{}
	for _, rt := range testRoutes() {
		key := rt.method + " " + rt.path
		if _, dup := served[key]; dup {
			t.Errorf("route %s twice in the table", key)
		}
		served[key] = rt
		if _, ok := documented[key]; !ok {
			t.Errorf("route %s is served but not in openapi.json", key)
		}
	}
	for key := range documented {
		if _, ok := served[key]; !ok {
			t.Errorf("openapi.json documents %s, which the server does not serve", key)
		}
	}
	ids := map[string]bool{}
	for key, op := range documented {
		rt, ok := served[key]
		if !ok {
			continue
		}
		if op.OperationID == "" || ids[op.OperationID] {
			t.Errorf("%s: operationId %q missing or repeated", key, op.OperationID)
		}
		ids[op.OperationID] = true
		need := []string{}
		isPublic := op.Security != nil && len(*op.Security) == 0
		if isPublic != (rt.access == public) {
			t.Errorf("%s: the document says public=%v, the table %v", key, isPublic, rt.access == public)
		}
		if rt.access != public {
			need = append(need, "401", "503", "400")
		}
		if rt.access == admin {
			need = append(need, "403")
		}
		if strings.Contains(rt.path, "{id}") {
			need = append(need, "404")
		}
		if op.RequestBody != nil {
			need = append(need, "413", "415")
		} else {
			// Routes without a body refuse one with a 400 (noBody).
			for _, code := range []string{"413", "415"} {
				if _, ok := op.Responses[code]; ok {
					t.Errorf("%s takes no body, so it cannot answer %s; openapi.json says it can", key, code)
				}
			}
		}
		for _, code := range need {
			if _, ok := op.Responses[code]; !ok {
				t.Errorf("%s can answer %s; openapi.json does not say so", key, code)
			}
		}
		ok2xx := 0
		for code := range op.Responses {
			if code[0] == '2' || code == "101" || code == "302" { // 101: a WebSocket's upgrade; 302: a sign-in's redirect
				ok2xx++
			}
		}
		if ok2xx != 1 {
			t.Errorf("%s: %d success responses documented, want 1", key, ok2xx)
		}
	}
	// Every $ref resolves.
	var refs []string
	collectRefs(openAPIDoc, &refs)
	for _, r := range refs {
		parts := strings.Split(strings.TrimPrefix(r, "#/components/"), "/")
		found := false
		if len(parts) == 2 {
			switch parts[0] {
			case "schemas":
				_, found = d.Components.Schemas[parts[1]]
			case "responses":
				_, found = d.Components.Responses[parts[1]]
			case "parameters":
				_, found = d.Components.Parameters[parts[1]]
			}
		}
		if !found {
			t.Errorf("$ref %s resolves to nothing", r)
		}
	}
}

func collectRefs(b []byte, out *[]string) {
	var v any
	json.Unmarshal(b, &v)
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, y := range x {
				if s, ok := y.(string); ok && k == "$ref" {
					*out = append(*out, s)
				}
				walk(y)
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	walk(v)
}

// TestOpenAPISchemasMatchTypes fails when a body's fields and its schema's
// properties differ: a field added to a Go type must be documented, and a
// documented property must exist.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	d := loadDoc(t)
	types := map[string]reflect.Type{
		"CreateRequest":       reflect.TypeFor[wire.CreateRequest](),
		"RepoSpec":            reflect.TypeFor[wire.RepoSpec](),
		"MCPServer":           reflect.TypeFor[wire.MCPServer](),
		"Limits":              reflect.TypeFor[store.Limits](),
		"Enforcement":         reflect.TypeFor[store.Enforcement](),
		"SendRequest":         reflect.TypeFor[SendRequest](),
		"StopRequest":         reflect.TypeFor[StopRequest](),
		"PullRequestEnd":      reflect.TypeFor[wire.PullRequestEnd](),
		"TokenRequest":        reflect.TypeFor[TokenRequest](),
		"Session":             reflect.TypeFor[store.Session](),
		"Repo":                reflect.TypeFor[store.Repo](),
		"GitHubLink":          reflect.TypeFor[store.GitHubLink](),
		"Environment":         reflect.TypeFor[store.Environment](),
		"PrepareRequest":      reflect.TypeFor[wire.PrepareRequest](),
		"EnvironmentList":     reflect.TypeFor[wire.EnvironmentList](),
		"Usage":               reflect.TypeFor[event.Usage](),
		"View":                reflect.TypeFor[wire.View](),
		"Message":             reflect.TypeFor[store.Message](),
		"SessionList":         reflect.TypeFor[SessionList](),
		"EventPage":           reflect.TypeFor[EventPage](),
		"LockInfo":            reflect.TypeFor[LockInfo](),
		"Changes":             reflect.TypeFor[wire.Changes](),
		"ShellControl":        reflect.TypeFor[ShellControl](),
		"RepoChanges":         reflect.TypeFor[wire.RepoChanges](),
		"FileChange":          reflect.TypeFor[wire.FileChange](),
		"Token":               reflect.TypeFor[store.Token](),
		"TokenCreated":        reflect.TypeFor[TokenCreated](),
		"TokenList":           reflect.TypeFor[TokenList](),
		"User":                reflect.TypeFor[wire.User](),
		"Identity":            reflect.TypeFor[wire.Identity](),
		"UserRequest":         reflect.TypeFor[wire.UserRequest](),
		"UserPatch":           reflect.TypeFor[wire.UserPatch](),
		"UserList":            reflect.TypeFor[wire.UserList](),
		"Team":                reflect.TypeFor[wire.Team](),
		"TeamList":            reflect.TypeFor[wire.TeamList](),
		"TeamRequest":         reflect.TypeFor[wire.TeamRequest](),
		"TeamMemberRequest":   reflect.TypeFor[wire.TeamMemberRequest](),
		"Me":                  reflect.TypeFor[wire.Me](),
		"AuditEntry":          reflect.TypeFor[wire.AuditEntry](),
		"AuditList":           reflect.TypeFor[wire.AuditList](),
		"SecretRequest":       reflect.TypeFor[wire.SecretRequest](),
		"Secret":              reflect.TypeFor[wire.Secret](),
		"SecretList":          reflect.TypeFor[wire.SecretList](),
		"MemoryGraph":         reflect.TypeFor[wire.MemoryGraph](),
		"MemoryEntity":        reflect.TypeFor[wire.MemoryEntity](),
		"MemoryObservation":   reflect.TypeFor[wire.MemoryObservation](),
		"MemoryRelation":      reflect.TypeFor[wire.MemoryRelation](),
		"MemoryEntityRequest": reflect.TypeFor[wire.MemoryEntityRequest](),
		"Health":              reflect.TypeFor[Health](),
		"GitHubDelivery":      reflect.TypeFor[wire.GitHubDelivery](),
		"GitHubDeliveryList":  reflect.TypeFor[wire.GitHubDeliveryList](),
		"Readiness":           reflect.TypeFor[Readiness](),
		"ReadyCheck":          reflect.TypeFor[wire.ReadyCheck](),
		"ErrorBody":           reflect.TypeFor[ErrorBody](),
		"ErrorInfo":           reflect.TypeFor[ErrorInfo](),
	}
	for name, typ := range types {
		s, ok := d.Components.Schemas[name]
		if !ok {
			t.Errorf("openapi.json has no schema %s for %s", name, typ)
			continue
		}
		doc := schemaProps(d, s)
		code := jsonFields(typ)
		slices.Sort(doc)
		if !slices.Equal(doc, code) {
			t.Errorf("schema %s documents %v; %s has %v", name, doc, typ, code)
		}
	}
	// The event envelope: its wire form has exactly the schema's properties.
	b, _ := json.Marshal(event.Event{Session: "s", Seq: 1, Turn: "t1", Agent: "a", Repo: "r", Live: 1, Data: event.TurnStarted{}})
	var m map[string]any
	json.Unmarshal(b, &m)
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if doc := schemaProps(d, d.Components.Schemas["Event"]); !slices.Equal(doc, keys) {
		t.Errorf("schema Event documents %v; the wire form has %v", doc, keys)
	}
}

// schemaProps lists a schema's properties, following $ref and allOf.
func schemaProps(d apiDoc, s schema) []string {
	if s.Ref != "" {
		return schemaProps(d, d.Components.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")])
	}
	var out []string
	for k := range s.Properties {
		out = append(out, k)
	}
	for _, a := range s.AllOf {
		out = append(out, schemaProps(d, a)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// jsonFields lists the JSON names of a type's fields, embedded ones
// flattened, "-" skipped.
func jsonFields(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		if f.Anonymous && name == "" {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
