package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
)

// TestPrintCompacted: harvest session logs says how many events the
// retention policy removed — those after the last one it printed — and
// carries on.
func TestPrintCompacted(t *testing.T) {
	var b bytes.Buffer
	p := newEventPrinter(&b, false)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, ev := range []event.Event{
		{Session: "s", Seq: 3, Time: at, Turn: "t1", Data: event.TurnStarted{Prompt: "fix it"}},
		{Session: "s", Seq: 9, Time: at, Data: event.EventsCompacted{From: 4, To: 9, Reason: event.RetentionReason}},
		{Session: "s", Seq: 10, Time: at, Turn: "t1", Data: event.TurnFinished{Result: "fixed", Steps: 2}},
		{Session: "s", Seq: 11, Time: at, Data: event.EventsCompacted{From: 11, To: 11, Reason: event.RetentionReason}},
	} {
		p.event(ev)
	}
	p.close()
	out := b.String()
	for _, want := range []string{"6 earlier events were removed by the retention policy (seqs 4–9)", "fixed", "1 earlier event was removed by the retention policy (seqs 11–11)"} {
		if !strings.Contains(out, want) {
			t.Errorf("the printed events lack %q:\n%s", want, out)
		}
	}
	// A reader that had seq 6 already: only 7 to 9 are news.
	b.Reset()
	p = newEventPrinter(&b, false)
	p.last = 6
	p.event(event.Event{Session: "s", Seq: 9, Time: at, Data: event.EventsCompacted{From: 4, To: 9}})
	p.close()
	if !strings.Contains(b.String(), "3 earlier events were removed by the retention policy (seqs 7–9)") {
		t.Errorf("after seq 6: %s", b.String())
	}
}
