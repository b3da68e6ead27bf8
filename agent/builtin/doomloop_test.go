package builtin

import (
	"encoding/json"
	"testing"
)

func TestLoopDetector(t *testing.T) {
	in := func(s string) json.RawMessage { return json.RawMessage(s) }
	type call struct {
		tool, input, err string
	}
	cases := []struct {
		name    string
		calls   []call
		msgs    []string
		pattern string // "" = none
	}{
		{"same call", []call{{"bash", `{"command":"ls"}`, ""}, {"bash", `{ "command" : "ls" }`, ""}, {"bash", `{"command":"ls"}`, ""}}, nil, "same_call"},
		{"key order does not hide it", []call{{"edit", `{"a":1,"b":2}`, ""}, {"edit", `{"b":2,"a":1}`, ""}, {"edit", `{"a":1,"b":2}`, ""}}, nil, "same_call"},
		{"two is not three", []call{{"bash", `{"command":"ls"}`, ""}, {"bash", `{"command":"ls"}`, ""}}, nil, ""},
		{"different inputs", []call{{"bash", `{"command":"ls"}`, ""}, {"bash", `{"command":"pwd"}`, ""}, {"bash", `{"command":"id"}`, ""}}, nil, ""},
		{"same error", []call{{"read", `{"path":"a"}`, "no such file"}, {"read", `{"path":"b"}`, "no such file"}, {"read", `{"path":"c"}`, "no such file"}}, nil, "same_error"},
		{"errors that differ", []call{{"read", `{"path":"a"}`, "no such file a"}, {"read", `{"path":"b"}`, "no such file b"}, {"read", `{"path":"c"}`, "no such file c"}}, nil, ""},
		{"cycle", []call{{"edit", `{"x":1}`, ""}, {"bash", `{"command":"go test"}`, ""}, {"edit", `{"x":1}`, ""}, {"bash", `{"command":"go test"}`, ""}}, nil, "cycle"},
		{"progress is not a cycle", []call{{"edit", `{"x":1}`, ""}, {"bash", `{"command":"go test"}`, ""}, {"edit", `{"x":2}`, ""}, {"bash", `{"command":"go test"}`, ""}}, nil, ""},
		{"same message", nil, []string{"Let me check.", "Let me check.", " Let me check. "}, "same_message"},
		{"empty messages do not count", nil, []string{"", "", ""}, ""},
	}
	for _, c := range cases {
		d := newLoopDetector(3)
		for _, m := range c.msgs {
			d.message(m)
		}
		for _, cl := range c.calls {
			d.call(cl.tool, in(cl.input), cl.err)
		}
		got := d.check()
		switch {
		case c.pattern == "" && got != nil:
			t.Errorf("%s: detected %s (%s)", c.name, got.pattern, got.detail)
		case c.pattern != "" && (got == nil || got.pattern != c.pattern):
			t.Errorf("%s: want %s, got %+v", c.name, c.pattern, got)
		}
	}
}

func TestLoopDetectorThreshold(t *testing.T) {
	d := newLoopDetector(5)
	for i := 0; i < 4; i++ {
		d.call("bash", json.RawMessage(`{"command":"ls"}`), "")
	}
	if got := d.check(); got != nil {
		t.Fatalf("4 repeats with threshold 5: %+v", got)
	}
	d.call("bash", json.RawMessage(`{"command":"ls"}`), "")
	if got := d.check(); got == nil || got.pattern != "same_call" {
		t.Fatalf("5 repeats: %+v", got)
	}
	d.reset()
	if got := d.check(); got != nil {
		t.Fatalf("after reset: %+v", got)
	}
}
