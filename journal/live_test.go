package journal_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/journal"
)

// reply is what an agent emits for one long reply: thinking, text, a tool
// call's input, its output, its end and the complete message; deltas of a
// few bytes each, as the models stream them.
func reply(session string, words int) []event.Event {
	var out []event.Event
	add := func(p event.Payload) {
		out = append(out, event.Event{Session: session, Turn: "t1", Agent: "a", Data: p})
	}
	for i := range words / 10 {
		add(event.ThinkingDelta{Text: fmt.Sprintf("hmm%d ", i)})
	}
	var text strings.Builder
	for i := range words {
		w := fmt.Sprintf("word%d ", i)
		text.WriteString(w)
		add(event.AssistantDelta{Text: w})
	}
	for i := range 20 {
		add(event.ToolInputDelta{Index: 1, PartialJSON: fmt.Sprintf(`"%d`, i)})
	}
	add(event.ToolStarted{CallID: "c1", Tool: "bash"})
	for i := range words / 5 {
		add(event.ToolOutput{CallID: "c1", Stream: []string{"stdout", "stderr"}[i%7/6], Text: fmt.Sprintf("line %d\n", i)})
	}
	add(event.ToolFinished{CallID: "c1", Tool: "bash"})
	add(event.AssistantMessage{Text: text.String()})
	return out
}

// streams joins the content of evs per stream (type and output stream),
// as a reader shows it: through a Joiner, or, with stored, the stored
// events only.
func streams(evs []event.Event, stored bool) map[string]string {
	out := map[string]string{}
	var j event.Joiner
	for _, ev := range evs {
		if stored && ev.Live > 0 {
			continue
		}
		ev, ok := j.Next(ev)
		if !ok {
			continue
		}
		key := string(ev.Type())
		switch p := ev.Data.(type) {
		case event.AssistantDelta:
			out[key] += p.Text
		case event.ThinkingDelta:
			out[key] += p.Text
		case event.ToolInputDelta:
			out[key] += p.PartialJSON
		case event.ToolOutput:
			out[key+"/"+p.Stream] += p.Text
		}
	}
	return out
}

// recvStored reads sub until it gets the stored event of seq last.
func recvStored(t *testing.T, ctx context.Context, sub *journal.Subscription, last int64) []event.Event {
	t.Helper()
	var got []event.Event
	for {
		select {
		case ev, ok := <-sub.C:
			if !ok {
				t.Fatalf("subscription ended after %d events, waiting for seq %d: %v", len(got), last, sub.Err())
			}
			got = append(got, ev)
			if ev.Live == 0 && ev.Seq >= last {
				return got
			}
		case <-ctx.Done():
			t.Fatalf("waiting for seq %d: got %d events: %v", last, len(got), ctx.Err())
		}
	}
}

// checkLive checks what a subscriber got: its stored events are the
// store's from seq from on, with no gap; each live piece carries the seq
// of the stored event before it and the next number of its run.
func checkLive(t *testing.T, what string, got, store []event.Event, from int64) {
	t.Helper()
	var stored []event.Event
	last, next := from-1, 1
	for i, ev := range got {
		if ev.Live == 0 {
			stored = append(stored, ev)
			last, next = ev.Seq, 1
			continue
		}
		if ev.Seq != last || ev.Live != next {
			t.Fatalf("%s: event %d is live piece %d at seq %d, want piece %d at seq %d", what, i, ev.Live, ev.Seq, next, last)
		}
		next++
	}
	gapless(t, what, stored, from)
	want := store[from-1:]
	if len(stored) != len(want) {
		t.Fatalf("%s: %d stored events delivered, the store has %d after seq %d", what, len(stored), len(want), from-1)
	}
	for i := range stored {
		if stored[i].Type() != want[i].Type() || fmt.Sprint(stored[i].Data) != fmt.Sprint(want[i].Data) {
			t.Fatalf("%s: seq %d delivered as %s %v, stored as %s %v", what, stored[i].Seq, stored[i].Type(), stored[i].Data, want[i].Type(), want[i].Data)
		}
	}
}

// TestLivePieces: a long reply's deltas reach a subscriber one by one,
// live, while the store gets one event per stream; stored seqs have no
// gap; a reader through a Joiner shows each stream's text once, whether
// it followed from the start or joined in the middle.
func TestLivePieces(t *testing.T) {
	ctx := testCtx(t)
	st := newStore(t, "s")
	j := newJournal(t, st, journal.Options{StoreEvery: time.Hour})
	early, err := j.Subscribe(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	if err := journal.WaitLive(ctx, early); err != nil {
		t.Fatal(err)
	}

	evs := reply("s", 500)
	for _, ev := range evs {
		if _, err := j.Append(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Flush(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	stored, err := st.Events(ctx, "s", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// thinking, text, tool input, tool.started, stdout, stderr, stdout,
	// ... (one run per switch of stream), tool.finished, message.
	gapless(t, "the store", stored, 1)
	if len(stored) > 40 {
		t.Fatalf("%d events stored for %d appended: the pieces were not coalesced", len(stored), len(evs))
	}
	want := streams(evs, false)
	if got := streams(stored, true); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the stored events' content differs from the pieces':\n got %q\nwant %q", got, want)
	}
	all := recvStored(t, ctx, early, int64(len(stored)))
	checkLive(t, "subscriber from the start", all, stored, 1)
	if live := len(all) - len(stored); live < len(evs)-10 {
		t.Fatalf("%d live pieces delivered, want about %d (every piece)", live, len(evs)-3)
	}
	if got := streams(all, false); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("a Joiner over the live pieces and stored events shows:\n%q\nwant\n%q", got, want)
	}
	s := j.Stats()
	if s.Stored != uint64(len(stored)) || s.Live != uint64(len(all)-len(stored)) {
		t.Fatalf("Stats = %+v: want %d stored, %d live", s, len(stored), len(all)-len(stored))
	}
	t.Logf("%d events appended: %d stored, %d live pieces", len(evs), len(stored), s.Live)

	// A subscriber resuming from the middle gets the rest, once.
	mid := int64(len(stored) / 2)
	late, err := j.Subscribe(ctx, "s", mid)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	rest := recvStored(t, ctx, late, int64(len(stored)))
	checkLive(t, "subscriber from the middle", rest, stored, mid+1)
	if got, want := streams(rest, false), streams(stored[mid:], true); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("resumed at %d: %q, want %q", mid, got, want)
	}
}

// TestLivePiecesJoinedMidRun: a subscriber that comes while a run is
// under way gets none of its pieces (it would see a text without its
// start), then the run's stored event whole.
func TestLivePiecesJoinedMidRun(t *testing.T) {
	ctx := testCtx(t)
	st := newStore(t, "s")
	j := newJournal(t, st, journal.Options{StoreEvery: time.Hour})
	if _, err := j.AppendSync(ctx, msg("s", 0)); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"a", "b"} {
		if _, err := j.Append(delta("s", w)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Flush(ctx, "s"); err != nil { // stores the run: seq 2 "ab"
		t.Fatal(err)
	}
	watch, err := j.Subscribe(ctx, "s", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	for _, w := range []string{"c", "d"} { // a new run, at seq 2
		if _, err := j.Append(delta("s", w)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // c and d are fanned out
		select {
		case <-watch.C:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	sub, err := j.Subscribe(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := journal.WaitLive(ctx, sub); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"e", "f"} {
		if _, err := j.Append(delta("s", w)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := j.Append(msg("s", 1)); err != nil {
		t.Fatal(err)
	}
	got := recvStored(t, ctx, sub, 4)
	var types []string
	for _, ev := range got {
		types = append(types, fmt.Sprintf("%d.%d:%s", ev.Seq, ev.Live, ev.Type()))
	}
	if fmt.Sprint(types) != "[1.0:assistant.message 2.0:assistant.delta 3.0:assistant.delta 4.0:assistant.message]" {
		t.Fatalf("delivered %v", types)
	}
	if d := got[2].Data.(event.AssistantDelta).Text; d != "cdef" {
		t.Fatalf("run stored as %q, want cdef", d)
	}
}

// TestLivePiecesStoredInTime: a run nothing else ends is stored by the
// writer's timer, StoreEvery after its first piece; one that reaches
// StoreBytes at once.
func TestLivePiecesStoredInTime(t *testing.T) {
	ctx := testCtx(t)
	st := newStore(t, "s", "b")
	j := newJournal(t, st, journal.Options{StoreEvery: 20 * time.Millisecond, StoreBytes: 10})
	sub, err := j.Subscribe(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := journal.WaitLive(ctx, sub); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"a", "b", "c"} {
		if _, err := j.Append(delta("s", w)); err != nil {
			t.Fatal(err)
		}
	}
	got := recvStored(t, ctx, sub, 1) // no Flush, no other event: the timer
	if n := len(got); n != 4 || got[3].Data.(event.AssistantDelta).Text != "abc" {
		t.Fatalf("got %+v, want 3 pieces then abc stored", got)
	}
	// StoreBytes: 4-byte pieces, stored at the third (12 bytes), in order
	// before the fourth.
	for _, w := range []string{"1234", "5678", "9abc", "defg"} {
		if _, err := j.Append(delta("b", w)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(ctx); err != nil { // Close stores the open run
		t.Fatal(err)
	}
	stored, err := st.Events(ctx, "b", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 2 || stored[0].Data.(event.AssistantDelta).Text != "12345678"+"9abc" || stored[1].Data.(event.AssistantDelta).Text != "defg" {
		t.Fatalf("stored %+v, want 123456789abc then defg", stored)
	}
}

// TestLivePiecesSlowSubscriber: a subscriber far behind loses live pieces
// only: it gets every stored event (no seq skipped), is not cut off, and
// a Joiner over what it got shows every stream's text exactly.
func TestLivePiecesSlowSubscriber(t *testing.T) {
	ctx := testCtx(t)
	st := newStore(t, "s")
	// Its queue holds more than the 40 stored events (so it is never cut
	// off), far fewer than the 2000 appended.
	j := newJournal(t, st, journal.Options{Buffer: 64, MaxBatch: 16, StoreEvery: time.Hour})
	sub, err := j.Subscribe(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := journal.WaitLive(ctx, sub); err != nil {
		t.Fatal(err)
	}
	var evs []event.Event
	for i := range 2000 {
		ev := delta("s", fmt.Sprintf("%d,", i))
		if i%100 == 99 {
			ev = msg("s", i)
		}
		evs = append(evs, ev)
		if _, err := j.Append(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Flush(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	stored, err := st.Events(ctx, "s", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 40 {
		t.Fatalf("%d events stored, want 40 (20 runs, 20 messages)", len(stored))
	}
	got := recvStored(t, ctx, sub, 40)
	checkLive(t, "slow subscriber", got, stored, 1)
	if sub.Dropped() == 0 {
		t.Fatalf("the subscriber kept up: the test did not make it fall behind")
	}
	if g, w := streams(got, false), streams(evs, false); fmt.Sprint(g) != fmt.Sprint(w) {
		t.Fatalf("a Joiner over what the slow subscriber got shows %q, want %q", g, w)
	}
	t.Logf("%d delivered, %d live pieces dropped", len(got), sub.Dropped())
}
