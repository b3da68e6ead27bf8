package opencode

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/event"
)

// The testdata/*.sse files are GET /event streams of OpenCode 1.18.33,
// recorded with curl while it ran against `harvest sim`: task.sse the
// scripted task (sim/examples/opencode.yaml), abort.sse a bash tool
// aborted mid-run (POST /session/{id}/abort), reasoning.sse an Anthropic
// provider's reply with a thinking block. These tests need neither a box
// nor the CLI.

// replay maps a recorded stream for session and returns the payloads
// (rendered compactly) and the mapper.
func replay(t *testing.T, file, session string) ([]string, []event.Payload, *mapper) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := newMapper(session, "fallback-model")
	var all []event.Payload
	err = readSSE(f, func(e ocEvent) bool {
		out, _, _, err := m.handle(e)
		if err != nil {
			t.Errorf("event %s: %v", e.Type, err)
		}
		all = append(all, out...)
		return true
	})
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	var lines []string
	for _, p := range all {
		switch v := p.(type) {
		case event.AssistantDelta, event.ThinkingDelta:
			continue
		case event.AssistantMessage:
			lines = append(lines, "message: "+v.Text)
		case event.Thinking:
			lines = append(lines, "thinking: "+v.Text)
		case event.ToolStarted:
			lines = append(lines, "started: "+v.Summary)
		case event.ToolOutput:
			lines = append(lines, fmt.Sprintf("output: %q", v.Text))
		case event.ToolFinished:
			lines = append(lines, fmt.Sprintf("finished: %s error=%v", v.Tool, v.IsError))
		case event.StepFinished:
			lines = append(lines, fmt.Sprintf("step %d: %s %s in=%d out=%d read=%d $%g", v.Step, v.StopReason, v.Model, v.Usage.InputTokens, v.Usage.OutputTokens, v.Usage.CacheReadTokens, v.CostUSD))
		default:
			lines = append(lines, string(p.EventType()))
		}
	}
	return lines, all, m
}

func TestMapTask(t *testing.T) {
	got, all, m := replay(t, "task.sse", "ses_dfe23ff64ffeKJtoU04vhadQ0c")
	want := []string{
		"message: I'll write the script first.",
		"started: write: greet.sh",
		"finished: write error=false",
		"step 1: tool-calls sim-coder in=9800 out=70 read=0 $0",
		"started: bash: sh greet.sh harvest | tee out.txt",
		`output: "hello, harvest\n"`,
		"finished: bash error=false",
		"step 2: tool-calls sim-coder in=9900 out=45 read=9800 $0",
		"started: read: out.txt",
		"finished: read error=false",
		"step 3: tool-calls sim-coder in=10000 out=30 read=9900 $0",
		`message: Done: greet.sh prints "hello, harvest", and out.txt holds the same line.`,
		"step 4: stop sim-coder in=10100 out=25 read=10000 $0",
	}
	if !slices.Equal(got, want) {
		t.Errorf("payloads:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var deltas strings.Builder
	for _, p := range all {
		if d, ok := p.(event.AssistantDelta); ok {
			deltas.WriteString(d.Text)
		}
		if f, ok := p.(event.ToolFinished); ok && f.Tool == "bash" && (f.DurationMS <= 0 || !strings.Contains(f.Output, "hello, harvest")) {
			t.Errorf("bash finished %+v", f)
		}
		if s, ok := p.(event.ToolStarted); ok && (s.CallID == "" || !json.Valid(s.Input)) {
			t.Errorf("tool started %+v", s)
		}
	}
	if !strings.HasPrefix(deltas.String(), "I'll write the script first.Done: greet.sh") {
		t.Errorf("deltas %q", deltas.String())
	}
	if !m.idle || m.err != nil || m.steps != 4 || m.result != `Done: greet.sh prints "hello, harvest", and out.txt holds the same line.` {
		t.Errorf("mapper at the end: idle %v err %v steps %d result %q", m.idle, m.err, m.steps, m.result)
	}
	if want := (event.Usage{InputTokens: 39800, OutputTokens: 170, CacheReadTokens: 29700}); m.usage != want {
		t.Errorf("usage %+v, want %+v", m.usage, want)
	}
}

// TestMapAbort: an aborted session reports MessageAbortedError and goes
// idle before the killed tool's result arrives; the mapper finishes the
// open call itself.
func TestMapAbort(t *testing.T) {
	got, _, m := replay(t, "abort.sse", "ses_dfe23ff64ffeKJtoU04vhadQ0c")
	want := []string{"started: bash: sh -c 'sleep 31337' & sleep 31338; echo never"}
	// The tool's late "completed" after the idle is mapped too (a turn
	// that waits for the idle stops reading before it).
	if len(got) < 1 || got[0] != want[0] {
		t.Errorf("payloads %q, want first %q", got, want)
	}
	if m.err == nil || m.err.Name != "MessageAbortedError" || !m.anyIdle {
		t.Errorf("after the abort: err %v idle %v", m.err, m.anyIdle)
	}
	m2 := newMapper("ses_dfe23ff64ffeKJtoU04vhadQ0c", "")
	m2.roles["msg_x"] = "assistant"
	m2.parts["prt_x"] = &partState{typ: "tool", messageID: "msg_x", callID: "call_x", tool: "bash", started: true}
	m2.tools = append(m2.tools, m2.parts["prt_x"])
	out := m2.openTools("interrupted")
	if len(out) != 1 || out[0].(event.ToolFinished).CallID != "call_x" || !out[0].(event.ToolFinished).IsError {
		t.Errorf("openTools: %#v", out)
	}
	if len(m2.openTools("again")) != 0 {
		t.Error("openTools finished a call twice")
	}
}

// TestMapStaleIdle: an idle that arrives before the session went busy (the
// second idle of an earlier aborted turn) does not end a turn; nor do the
// late parts of a message this turn never saw.
func TestMapStaleIdle(t *testing.T) {
	m := newMapper("ses_a", "")
	ev := func(typ, props string) ocEvent { return ocEvent{Type: typ, Properties: json.RawMessage(props)} }
	out, _, _, _ := m.handle(ev("message.part.updated", `{"sessionID":"ses_a","part":{"id":"prt_1","messageID":"msg_old","sessionID":"ses_a","type":"tool","tool":"bash","callID":"c1","state":{"status":"completed","input":{},"output":"x","title":"","metadata":{},"time":{"start":1,"end":2}}}}`))
	m.handle(ev("session.idle", `{"sessionID":"ses_a"}`))
	if len(out) != 0 || m.idle || !m.anyIdle {
		t.Errorf("stale events: %v, idle %v", out, m.idle)
	}
	m.handle(ev("session.status", `{"sessionID":"ses_a","status":{"type":"busy"}}`))
	m.handle(ev("session.status", `{"sessionID":"ses_b","status":{"type":"idle"}}`))
	if m.idle {
		t.Error("another session's idle ended the turn")
	}
	_, ours, _, _ := m.handle(ev("session.idle", `{"sessionID":"ses_a"}`))
	if !m.idle || !ours {
		t.Error("the session's idle after busy did not end the turn")
	}
}

func TestMapReasoning(t *testing.T) {
	got, _, m := replay(t, "reasoning.sse", "ses_dfe21671fffeMJjLNQGQuc27Ty")
	want := []string{
		"thinking: The user wants me to remember.",
		"message: I will remember pineapple.",
		"step 1: stop claude-sonnet-4-5 in=100 out=10 read=0 $0.00045",
	}
	if !slices.Equal(got, want) {
		t.Errorf("payloads:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if m.cost != 0.00045 {
		t.Errorf("cost %g", m.cost)
	}
}

// TestCheckAPI: the recorded OpenAPI document of 1.18.33 passes; one
// without an operation, an event type or a field the agent relies on
// fails, naming each of them and the version.
func TestCheckAPI(t *testing.T) {
	doc := testDoc(t)
	if err := CheckAPI(doc, "1.18.33"); err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	paths := d["paths"].(map[string]any)
	delete(paths, "/session/{sessionID}/prompt_async")
	delete(paths["/session/{sessionID}/abort"].(map[string]any), "post")
	schemas := d["components"].(map[string]any)["schemas"].(map[string]any)
	delete(schemas["StepFinishPart"].(map[string]any)["properties"].(map[string]any), "tokens")
	ev := schemas["Event"].(map[string]any)
	var keep []any
	for _, alt := range ev["anyOf"].([]any) {
		if !strings.HasSuffix(alt.(map[string]any)["$ref"].(string), "/EventMessagePartDelta") {
			keep = append(keep, alt)
		}
	}
	ev["anyOf"] = keep
	broken, _ := json.Marshal(d)
	err := CheckAPI(broken, "9.9.9")
	var ie *IncompatibleError
	if !errors.As(err, &ie) {
		t.Fatalf("CheckAPI of a broken document: %v", err)
	}
	for _, s := range []string{
		"opencode 9.9.9",
		"POST /session/{sessionID}/prompt_async (session.prompt_async)",
		"POST /session/{sessionID}/abort (session.abort)",
		"event message.part.delta",
		`the "tokens" field of message part step-finish`,
		"install opencode-ai@1.18.33",
	} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the error does not say %q: %v", s, err)
		}
	}
	if len(ie.Missing) != 4 {
		t.Errorf("missing %q, want 4 items", ie.Missing)
	}
	if err := CheckAPI([]byte("<html>"), "1.0"); err == nil || !strings.Contains(err.Error(), "not an OpenAPI document") {
		t.Errorf("CheckAPI of HTML: %v", err)
	}
}

func testDoc(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "openapi-1.18.33.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestReadSSE: multi-line data, comments, CRLF, events without data, and
// a last event without its blank line.
func TestReadSSE(t *testing.T) {
	in := ": comment\r\nevent: x\r\ndata: {\"type\":\"a\",\r\ndata: \"properties\":{}}\r\n\r\nid: 1\n\ndata: not json\n\ndata: {\"type\":\"b\"}\n\n"
	var got []string
	err := readSSE(strings.NewReader(in), func(e ocEvent) bool { got = append(got, e.Type); return true })
	if !errors.Is(err, io.EOF) || !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("events %q, end %v", got, err)
	}
}
