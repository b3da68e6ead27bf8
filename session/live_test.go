package session

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/sim"
	"github.com/harvest-dev/harvest/store"
)

// longReplyScript: one reply of 1,500 words, streamed by the sim as the
// APIs do (a few words per delta), a delta every 5 ms: about 500 deltas
// over about 2.5 s.
func longReplyScript(words int) string {
	var b strings.Builder
	for i := range words {
		fmt.Fprintf(&b, "word%d ", i)
	}
	return `
rules:
  - name: long
    when: {last_user: "Long reply"}
    reply: {text: "` + b.String() + `", chunk_delay: 5ms, usage: {input_tokens: 100, output_tokens: 2000}}
`
}

// TestLongReplyStored: the events of a long reply as a session stores
// and streams them. With live pieces (the default) a watcher gets every
// delta as it comes while the store keeps one delta event per StoreEvery;
// storing every piece (StoreEvery < 0) stores them all. Both stores have
// seqs 1, 2, 3, ... with no gap and the same text. The counts are
// BENCHMARKS.md's "events stored per long reply".
func TestLongReplyStored(t *testing.T) {
	const words = 1500
	script, err := sim.ParseScript("long.yaml", []byte(longReplyScript(words)))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		every time.Duration
	}{{"every piece stored", -1}, {"live pieces", 0}} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, withJournal(journal.Options{StoreEvery: c.every}))
			e.Sim.Store(sim.New(script))
			v := e.create("Long reply")
			w := e.watch(v.ID)
			msg := w.Until("the reply", func(ev event.Event) bool { return ev.Type() == event.TypeAssistantMessage })
			w.State(store.StateIdle)
			evs, err := e.st.Events(testbin.Context(t), v.ID, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			var stored, deltas, live int
			var text strings.Builder
			var j event.Joiner
			for i, ev := range evs {
				if ev.Seq != int64(i+1) {
					t.Fatalf("stored event %d has seq %d: a gap", i, ev.Seq)
				}
				if ev.Turn == msg.Turn {
					stored++
				}
				if d, ok := ev.Data.(event.AssistantDelta); ok {
					deltas++
					text.WriteString(d.Text)
				}
			}
			var shown strings.Builder
			for _, ev := range w.Seen {
				if ev.Live > 0 {
					live++
				}
				if ev, ok := j.Next(ev); ok {
					if d, ok := ev.Data.(event.AssistantDelta); ok {
						shown.WriteString(d.Text)
					}
				}
			}
			full := msg.Data.(event.AssistantMessage).Text
			if strings.TrimSpace(text.String()) != full || strings.TrimSpace(shown.String()) != full {
				t.Fatalf("the deltas do not make the reply: stored %d bytes, shown %d, the message %d", text.Len(), shown.Len(), len(full))
			}
			t.Logf("%s: %d events stored for the turn, %d of them deltas; %d live pieces streamed", c.name, stored, deltas, live)
			if c.every == 0 && (deltas > 10 || live < 100) {
				t.Fatalf("%d delta events stored, %d live: want a handful stored, every piece live", deltas, live)
			}
		})
	}
}
