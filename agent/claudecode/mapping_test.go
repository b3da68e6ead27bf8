package claudecode

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/llm"
)

// replay feeds a recorded stream-json file (Claude Code 2.1.197 against
// harvest sim, --include-partial-messages) through a mapper, the result
// line as the turn loop does, and returns the events.
func replay(t *testing.T, name string) ([]event.Payload, *line) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "stream-json", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var evs []event.Payload
	m := newMapper(func(p event.Payload) { evs = append(evs, p) }, slog.New(slog.DiscardHandler), llm.DefaultPrices)
	var res *line
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, maxLine)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		switch l.Type {
		case "result":
			res = &l
			m.result(l.TotalCostUSD, "ended")
		case "control_response", "control_request":
		default:
			m.handle(&l)
		}
	}
	return evs, res
}

// TestMappingToolTurn: a turn with a Bash call, as 2.1.197 prints it, maps
// to deltas, the assistant's text, the call and its result, and one step
// per model call with the reply's final usage (message_delta), the steps'
// costs adding up to the turn's.
func TestMappingToolTurn(t *testing.T) {
	evs, res := replay(t, "tool-turn.jsonl")
	var kinds []string
	for _, p := range evs {
		kinds = append(kinds, string(p.EventType()))
	}
	want := "assistant.delta assistant.message tool.input.delta tool.input.delta tool.input.delta tool.input.delta tool.input.delta tool.input.delta tool.started " +
		"tool.finished step.finished assistant.delta assistant.message step.finished"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("events\n %s\nwant\n %s", got, want)
	}
	var input strings.Builder
	var cost float64
	for _, p := range evs {
		switch p := p.(type) {
		case event.ToolInputDelta:
			input.WriteString(p.PartialJSON)
		case event.ToolStarted:
			var a, b any
			_ = json.Unmarshal(p.Input, &a)
			_ = json.Unmarshal([]byte(input.String()), &b)
			if p.Tool != "Bash" || p.Summary != "Bash: echo hi > a.txt && cat a.txt" || fmt.Sprint(a) != fmt.Sprint(b) || a == nil {
				t.Errorf("tool.started %+v; streamed input %s", p, input.String())
			}
		case event.ToolFinished:
			if p.Tool != "Bash" || p.Output != "hi" || p.IsError {
				t.Errorf("tool.finished %+v", p)
			}
		case event.StepFinished:
			cost += p.CostUSD
			if p.Step == 1 && (p.Usage != event.Usage{InputTokens: 100, OutputTokens: 10} || p.StopReason != "tool_use") {
				t.Errorf("step 1 %+v: want the final usage of the first reply", p)
			}
			if p.Step == 2 && (p.Usage != event.Usage{InputTokens: 200, OutputTokens: 20} || p.StopReason != "end_turn") {
				t.Errorf("step 2 %+v", p)
			}
		}
	}
	if d := cost - res.TotalCostUSD; d > 1e-12 || d < -1e-12 {
		t.Errorf("steps cost $%f, the turn $%f", cost, res.TotalCostUSD)
	}
}

// TestMappingInterrupted: a Bash call interrupted by the control request
// ends with an error result for the call, and Claude Code's result is
// error_during_execution.
func TestMappingInterrupted(t *testing.T) {
	evs, res := replay(t, "interrupted.jsonl")
	var fin *event.ToolFinished
	for _, p := range evs {
		if f, ok := p.(event.ToolFinished); ok {
			fin = &f
		}
	}
	if fin == nil || !fin.IsError || !strings.Contains(fin.Output, "doesn't want to proceed") {
		t.Errorf("the interrupted call's result: %+v", fin)
	}
	if res == nil || res.Subtype != "error_during_execution" || !res.IsError {
		t.Errorf("result %+v", res)
	}
}

// TestMappingEndClosesCalls: a turn that ends without a result (crash,
// kill) still finishes every tool call it started, as errors.
func TestMappingEndClosesCalls(t *testing.T) {
	var evs []event.Payload
	m := newMapper(func(p event.Payload) { evs = append(evs, p) }, slog.New(slog.DiscardHandler), llm.DefaultPrices)
	var l line
	if err := json.Unmarshal([]byte(`{"type":"assistant","message":{"id":"m1","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"make"}}]},"parent_tool_use_id":null}`), &l); err != nil {
		t.Fatal(err)
	}
	m.handle(&l)
	m.end("killed")
	if len(evs) != 3 {
		t.Fatalf("events %s", types(evs))
	}
	if f, ok := evs[1].(event.ToolFinished); !ok || f.CallID != "t1" || !f.IsError || f.Output != "killed" {
		t.Errorf("%#v", evs[1])
	}
	if _, ok := evs[2].(event.StepFinished); !ok {
		t.Errorf("%#v", evs[2])
	}
}

// TestProjectDirName: where 2.1.197 files a working directory's sessions
// (the long one seen from the real CLI).
func TestProjectDirName(t *testing.T) {
	long := "/tmp/cc/exp/" + strings.Repeat("very-long.directory_name", 9) + "/ünï"
	for cwd, want := range map[string]string{
		"/workspace/repo":  "-workspace-repo",
		"/tmp/cc/exp/ws":   "-tmp-cc-exp-ws",
		"/workspace/a.b_c": "-workspace-a-b-c",
		long:               "-tmp-cc-exp-very-long-directory-namevery-long-directory-namevery-long-directory-namevery-long-directory-namevery-long-directory-namevery-long-directory-namevery-long-directory-namevery-long-directory--fl2pgg",
	} {
		if got := projectDirName(cwd); got != want {
			t.Errorf("projectDirName(%q) = %q, want %q", cwd, got, want)
		}
	}
}

// TestStateRoundTrip: the state keeps the session id and files, and refuses
// files of another session and other versions.
func TestStateRoundTrip(t *testing.T) {
	id := newUUID()
	if _, err := uuidOK(id); err != nil {
		t.Fatal(err)
	}
	sf := &files{byName: map[string]*file{
		id + ".jsonl":                   {data: []byte(`{"uuid":"u1"}` + "\n")},
		id + "/tool-results/x.txt":      {data: []byte("big output")},
		id + "/subagents/agent-a.jsonl": {data: []byte("{}\n")},
	}}
	b, err := sf.pack(id, "-workspace-repo")
	if err != nil {
		t.Fatal(err)
	}
	got, project, back, err := unpack(b, DefaultMaxStateBytes)
	if err != nil || got != id || project != "-workspace-repo" || len(back.byName) != 3 || string(back.byName[id+"/tool-results/x.txt"].data) != "big output" {
		t.Fatalf("unpack: %v %s %+v", err, got, back)
	}
	if !back.holds(id+".jsonl", "u1") || back.holds(id+".jsonl", "u2") {
		t.Error("holds")
	}
	if _, _, _, err := unpack(b, 5); err == nil {
		t.Error("a state over MaxStateBytes was accepted")
	}
	other := &files{byName: map[string]*file{"../../.bashrc": {data: []byte("x")}}}
	b, _ = other.pack(id, "-workspace-repo")
	if _, _, _, err := unpack(b, DefaultMaxStateBytes); err == nil {
		t.Error("a state with a file outside the session was accepted")
	}
	b, _ = (&files{}).pack(id, "../etc")
	if _, _, _, err := unpack(b, DefaultMaxStateBytes); err == nil {
		t.Error("a state with a project directory outside projects/ was accepted")
	}
	if _, _, _, err := unpack([]byte(`{"version":9,"claude_session":"`+id+`"}`), DefaultMaxStateBytes); err == nil || !strings.Contains(err.Error(), "version 9") {
		t.Errorf("version check: %v", err)
	}
}
