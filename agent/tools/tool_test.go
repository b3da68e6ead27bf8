package tools

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

func TestRegistry(t *testing.T) {
	r := Default()
	want := []string{"read", "write", "edit", "bash", "bash_output", "bash_kill", "glob", "grep", "git_status", "git_diff", "git_log", "todo"}
	if got := r.Names(); !slices.Equal(got, want) {
		t.Errorf("tools %v, want %v", got, want)
	}
	readOnly := map[string]bool{"read": true, "bash_output": true, "glob": true, "grep": true, "git_status": true, "git_diff": true, "git_log": true, "todo": true}
	for _, tl := range r.Tools() {
		if tl.ReadOnly() != readOnly[tl.Name()] {
			t.Errorf("%s: ReadOnly() = %v", tl.Name(), tl.ReadOnly())
		}
		if len(tl.Description()) < 40 {
			t.Errorf("%s: description too short for a model to use", tl.Name())
		}
	}
	if _, err := NewRegistry(readTool, readTool); err == nil || !strings.Contains(err.Error(), `two tools named "read"`) {
		t.Errorf("duplicate names: %v", err)
	}
	sel, err := r.Select("read", "bash")
	if err != nil {
		t.Fatal(err)
	}
	if got := sel.Names(); !slices.Equal(got, []string{"read", "bash", "bash_output", "bash_kill"}) {
		t.Errorf("Select: %v", got)
	}
	if _, err := r.Select("read", "memory"); err == nil || !strings.Contains(err.Error(), `unknown tool "memory"; the tools are: read, write`) {
		t.Errorf("Select of an unknown tool: %v", err)
	}
}

// TestSchemasMatchInputs: every property a schema offers is a field the tool
// decodes, and every field is offered, so the schema cannot drift from the
// code.
func TestSchemasMatchInputs(t *testing.T) {
	for _, tl := range Builtin() {
		var doc struct {
			Type                 string                     `json:"type"`
			Properties           map[string]json.RawMessage `json:"properties"`
			AdditionalProperties *bool                      `json:"additionalProperties"`
		}
		if err := json.Unmarshal(tl.Schema(), &doc); err != nil {
			t.Fatalf("%s: %v", tl.Name(), err)
		}
		if doc.Type != "object" || doc.AdditionalProperties == nil || *doc.AdditionalProperties {
			t.Errorf("%s: schema is not a closed object", tl.Name())
		}
		// The input type is the pointee of run's last parameter.
		run := reflect.ValueOf(tl).Elem().FieldByName("run").Type()
		in := run.In(run.NumIn() - 1).Elem()
		var fields []string
		for i := 0; i < in.NumField(); i++ {
			fields = append(fields, strings.Split(in.Field(i).Tag.Get("json"), ",")[0])
		}
		var props []string
		for k := range doc.Properties {
			props = append(props, k)
		}
		sort.Strings(fields)
		sort.Strings(props)
		if !slices.Equal(fields, props) {
			t.Errorf("%s: schema properties %v, input fields %v", tl.Name(), props, fields)
		}
	}
}

func TestBadInput(t *testing.T) {
	b := newBox(t, Config{})
	cases := []struct{ tool, input, want string }{
		{"read", `{"path": `, "the input is not valid JSON"},
		{"read", `[1, 2]`, "the input is an array, not an object"},
		{"read", `"main.go"`, "the input is a string, not an object"},
		{"read", `{}`, `the required field "path" is missing`},
		{"read", `{"path": null}`, `the required field "path" is missing`},
		{"read", `{"file_path": "x"}`, `unknown field "file_path"`},
		{"read", `{"path": "x", "limit": "50"}`, `field "limit" must be an integer, got "50" (a string)`},
		{"read", `{"path": "x", "limit": 1.5}`, `field "limit" must be an integer`},
		{"read", `{"path": "x", "offset": 0}`, `field "offset" must be at least 1`},
		{"edit", `{"path": "x", "old_string": "a", "new_string": "b", "replace_all": "yes"}`, `field "replace_all" must be a boolean`},
		{"bash", `{"command": ["ls"]}`, `field "command" must be a string, got ["ls"] (an array)`},
		{"todo", `{"todos": [{"content": 1, "status": "pending"}]}`, `wrong type`},
		{"todo", `{"todos": [{"content": "x", "status": "done"}]}`, `item 1 has status "done"`},
	}
	for _, c := range cases {
		r := b.call(t, c.tool, c.input)
		wantErr(t, r, c.want)
		if c.want != "wrong type" && !strings.HasPrefix(r.Output, "invalid input for "+c.tool+": ") {
			t.Errorf("%s %s: %q", c.tool, c.input, r.Output)
		}
	}
	// Field lists tell the model what to send.
	wantErr(t, b.call(t, "read", `{}`), "Expected a JSON object with: path (string, required), limit (integer), offset (integer).")
	wantErr(t, b.call(t, "nope", `{}`), `there is no tool named "nope". The tools are: read, write, edit`)
	// No input at all is an empty object.
	wantErr(t, b.call(t, "git_status", ``), "not inside a git repository")
}

func TestPanicBecomesError(t *testing.T) {
	b := newBox(t, Config{})
	p := &builtin[struct{}]{name: "boom", description: "panics", schema: schema(), readOnly: true,
		run: func(context.Context, *Env, *struct{}) Result { panic("kaboom") }}
	reg, err := NewRegistry(p)
	if err != nil {
		t.Fatal(err)
	}
	r := reg.Run(context.Background(), b.env, "boom", json.RawMessage(`{}`))
	wantErr(t, r, "internal error in tool boom (kaboom)")
}

func TestCancelledBeforeRun(t *testing.T) {
	b := newBox(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	wantErr(t, b.callCtx(ctx, t, "write", `{"path": "x", "content": "y"}`), "was not run: the turn was cancelled")
	if b.exists(t, ws+"/x") {
		t.Error("a cancelled write happened")
	}
}

func TestTodo(t *testing.T) {
	b := newBox(t, Config{})
	r := b.call(t, "todo", `{"todos": [
		{"content": "Read the failing test", "status": "completed"},
		{"content": "Fix the parser", "status": "in_progress", "activeForm": "Fixing the parser"},
		{"content": "Run go test", "status": "pending"}]}`)
	want := "Todo list updated (1 of 3 completed):\n[x] Read the failing test\n[~] Fix the parser (in progress)\n[ ] Run go test\n"
	if wantOK(t, r); r.Output != want {
		t.Errorf("got:\n%s\nwant:\n%s", r.Output, want)
	}
	got := b.env.Todos()
	if len(got) != 3 || got[1] != (TodoItem{Content: "Fix the parser", Status: TodoInProgress, ActiveForm: "Fixing the parser"}) {
		t.Errorf("Todos() = %+v", got)
	}
	// The whole list is replaced each time.
	wantOK(t, b.call(t, "todo", `{"todos": [{"content": "a", "status": "in_progress"}, {"content": "b", "status": "in_progress"}]}`), "2 items are in progress")
	if n := len(b.env.Todos()); n != 2 {
		t.Errorf("%d items", n)
	}
	wantOK(t, b.call(t, "todo", `{"todos": []}`), "now empty")
	wantErr(t, b.call(t, "todo", `{"todos": [{"content": " ", "status": "pending"}]}`), "item 1 has no content")
}
