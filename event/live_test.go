package event

import (
	"fmt"
	"testing"
)

// TestJoiner: what a printing reader shows of live pieces and the stored
// events after them: each byte of a stream once, whichever pieces it got.
func TestJoiner(t *testing.T) {
	d := func(seq int64, live int, text string) Event {
		return Event{Session: "s", Seq: seq, Live: live, Turn: "t", Data: AssistantDelta{Text: text}}
	}
	show := func(evs ...Event) string {
		var j Joiner
		var out []string
		for _, ev := range evs {
			if ev, ok := j.Next(ev); ok {
				switch p := ev.Data.(type) {
				case AssistantDelta:
					out = append(out, p.Text)
				case TerminalOutput:
					out = append(out, string(p.Data))
				default:
					out = append(out, string(ev.Type()))
				}
			}
		}
		return fmt.Sprint(out)
	}
	msg := Event{Session: "s", Seq: 1, Turn: "t", Data: AssistantMessage{Text: "m"}}
	for _, c := range []struct {
		name string
		evs  []Event
		want string
	}{
		{"every piece", []Event{msg, d(1, 1, "a"), d(1, 2, "b"), d(2, 0, "ab")}, "[assistant.message a b]"},
		{"the last pieces missed", []Event{msg, d(1, 1, "a"), d(2, 0, "abc")}, "[assistant.message a bc]"},
		{"a piece missed in the middle", []Event{msg, d(1, 1, "a"), d(1, 3, "c"), d(2, 0, "abc")}, "[assistant.message a bc]"},
		{"joined mid-run", []Event{msg, d(1, 2, "b"), d(1, 3, "c"), d(2, 0, "abc")}, "[assistant.message abc]"},
		{"no pieces", []Event{msg, d(2, 0, "abc")}, "[assistant.message abc]"},
		{"the run never stored", []Event{msg, d(1, 1, "a"), {Session: "s", Seq: 2, Turn: "t2", Data: AssistantDelta{Text: "x"}}}, "[assistant.message a x]"},
		{"another stream stored next", []Event{msg, d(1, 1, "a"), {Session: "s", Seq: 2, Turn: "t", Data: ThinkingDelta{Text: "x"}}}, "[assistant.message a assistant.thinking.delta]"},
		{"a new run after", []Event{msg, d(1, 1, "a"), d(2, 0, "a"), d(2, 1, "b"), d(3, 0, "b")}, "[assistant.message a b]"},
		{"bytes", []Event{msg, {Session: "s", Seq: 1, Live: 1, Data: TerminalOutput{Data: []byte("x")}}, {Session: "s", Seq: 2, Data: TerminalOutput{Data: []byte("xy")}}}, "[assistant.message x y]"},
	} {
		if got := show(c.evs...); got != c.want {
			t.Errorf("%s: shown %s, want %s", c.name, got, c.want)
		}
	}
}
