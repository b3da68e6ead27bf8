package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/store"
)

// Three messages sent while a turn works are delivered after it, one turn
// each, in the order they were sent; usage and the conversation are saved.
func TestQueuedMessagesDeliveredInOrder(t *testing.T) { testQueuedMessagesDeliveredInOrder(t) }

func testQueuedMessagesDeliveredInOrder(t *testing.T, opts ...envOpt) {
	e := newEnv(t, opts...)
	v := e.create("long task")
	w := e.watch(v.ID)
	stacktest.Typed[event.ToolStarted](w, "t1", nil)

	var sent []string
	for _, text := range []string{"msg one", "msg two", "msg three"} {
		sent = append(sent, e.send(v.ID, text, "").ID)
	}
	got := e.get(v.ID)
	if got.State != store.StateWorking {
		t.Fatalf("state %s while the long turn runs, want working", got.State)
	}
	var queued []string
	for _, q := range got.Queue {
		queued = append(queued, q.ID)
	}
	if !slices.Equal(queued, sent) {
		t.Fatalf("queue %v, want %v", queued, sent)
	}

	release(t, v)
	if f := w.Finished("t1"); f.Result != "long task done" {
		t.Fatalf("t1 result %q", f.Result)
	}
	for _, turn := range []string{"t2", "t3", "t4"} {
		w.Finished(turn)
	}
	w.State(store.StateIdle)
	// The source was a plain directory: the session's copy was made a git
	// repository (in the box) so the agent's git tools show its changes.
	if _, err := os.Stat(filepath.Join(v.Repos[0].Path, ".git", "HEAD")); err != nil {
		t.Errorf("the workspace of a plain-directory source is not a git repository: %v", err)
	}

	// Delivery order, and no turn started before the previous one ended.
	delivered, turns := stacktest.OfType[event.MessageDelivered](w.Seen)
	var ids []string
	for _, d := range delivered[1:] { // [0] is the prompt, in t1
		ids = append(ids, d.MessageID)
	}
	if !slices.Equal(ids, sent) || !slices.Equal(turns[1:], []string{"t2", "t3", "t4"}) {
		t.Fatalf("delivered %v in turns %v, want %v in t2..t4", ids, turns, sent)
	}
	open := ""
	for _, ev := range w.Seen {
		switch p := ev.Data.(type) {
		case event.TurnStarted:
			if open != "" {
				t.Fatalf("turn %s started while %s was running", ev.Turn, open)
			}
			open = ev.Turn
			if want := map[string]string{"t1": "long task", "t2": "msg one", "t3": "msg two", "t4": "msg three"}[ev.Turn]; p.Prompt != want {
				t.Fatalf("turn %s got prompt %q, want %q", ev.Turn, p.Prompt, want)
			}
		case event.TurnFinished:
			open = ""
		}
	}

	// The store agrees.
	msgs, err := e.st.Messages(testbin.Context(t), v.ID)
	if err != nil {
		t.Fatal(err)
	}
	for i, msg := range msgs {
		if msg.State != store.MessageDelivered || msg.Turn != turnID(i+1) {
			t.Fatalf("message %d (%q): %s in turn %q, want delivered in %s", i+1, msg.Text, msg.State, msg.Turn, turnID(i+1))
		}
	}
	s := e.get(v.ID)
	if s.Turns != 4 || len(s.Queue) != 0 {
		t.Fatalf("turns %d, queue %d; want 4 turns and an empty queue", s.Turns, len(s.Queue))
	}
	// 5 model calls (the long task takes two) of 100 input tokens.
	if s.Usage.InputTokens != 500 || s.Usage.OutputTokens != 50 {
		t.Fatalf("usage %+v, want the sum of the 5 model calls (500 in, 50 out)", s.Usage)
	}
	full, err := e.st.GetSession(testbin.Context(t), v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(full.AgentState), "msg three") {
		t.Fatalf("the saved conversation does not have the last turn: %.300s", full.AgentState)
	}
	stacktest.CheckGapless(t, e.st, v.ID)
}

// A message sent with mode "interrupt" cancels the running turn (whose
// process is killed); the queue goes on in order, the interrupting message
// after the ones queued before it.
func TestInterrupt(t *testing.T) { testInterrupt(t) }

func testInterrupt(t *testing.T, opts ...envOpt) {
	e := newEnv(t, opts...)
	v := e.create("long task")
	w := e.watch(v.ID)
	stacktest.Typed[event.ToolStarted](w, "t1", nil)
	testbin.WaitFor(t, time.Minute, "the long task's loop runs", func() bool { return len(testbin.ProcsWithArgs("sleep", "0.01")) > 0 })

	queued := e.send(v.ID, "msg queued", ModeQueue)
	urgent := e.send(v.ID, "msg urgent", ModeInterrupt)
	c := stacktest.Typed[event.TurnCancelled](w, "t1", nil)
	if !strings.Contains(c.Reason, "interrupted by message "+urgent.ID) {
		t.Fatalf("t1 cancelled with reason %q, want it to name %s", c.Reason, urgent.ID)
	}
	w.Finished("t2")
	w.Finished("t3")
	delivered, _ := stacktest.OfType[event.MessageDelivered](w.Seen)
	delivered = delivered[1:] // [0] is the prompt, in t1
	if len(delivered) != 2 || delivered[0].MessageID != queued.ID || delivered[1].MessageID != urgent.ID {
		t.Fatalf("delivered %+v, want %s then %s", delivered, queued.ID, urgent.ID)
	}
	states, _ := stacktest.OfType[event.SessionState](w.Seen)
	if !slices.ContainsFunc(states, func(s event.SessionState) bool { return s.State == string(store.StateCancelling) }) {
		t.Fatalf("no cancelling state among %+v", states)
	}
	if n := len(testbin.ProcsWithArgs("sleep", "0.01")); n != 0 {
		// The loop sleeps 10 ms at a time: a survivor would show.
		testbin.WaitFor(t, time.Second, "the interrupted turn's process is gone", func() bool { return len(testbin.ProcsWithArgs("sleep", "0.01")) == 0 })
	}
}

// Cancel during a bash tool: its whole process tree is gone within a
// second, the session is idle, and the messages queued behind the turn are
// still queued (paused) until the next message, after which all of them are
// delivered in order.
func TestCancelDuringBash(t *testing.T) { testCancelDuringBash(t) }

func testCancelDuringBash(t *testing.T, opts ...envOpt) {
	e := newEnv(t, opts...)
	v := e.create("tree task")
	w := e.watch(v.ID)
	stacktest.Typed[event.ToolStarted](w, "t1", nil)
	testbin.WaitFor(t, 10*time.Second, "the tool's process tree runs", func() bool {
		return len(testbin.ProcsWithArgs("sleep", "31337")) > 0 && len(testbin.ProcsWithArgs("sleep", "31338")) > 0
	})
	m1 := e.send(v.ID, "msg one", "")
	m2 := e.send(v.ID, "msg two", "")

	start := time.Now()
	if err := e.m.Cancel(testbin.Context(t), "owner-1", v.ID); err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, time.Second-time.Since(start), "the process tree is gone", func() bool {
		return len(testbin.ProcsWithArgs("sleep", "31337")) == 0 && len(testbin.ProcsWithArgs("sleep", "31338")) == 0
	})
	t.Logf("cancel to process tree gone: %s", time.Since(start))
	got := e.get(v.ID)
	if got.State != store.StateIdle {
		t.Fatalf("state %s after Cancel, want idle", got.State)
	}
	if len(got.Queue) != 2 || got.Queue[0].ID != m1.ID || got.Queue[1].ID != m2.ID {
		t.Fatalf("queue after cancel: %+v, want %s and %s", got.Queue, m1.ID, m2.ID)
	}
	c := stacktest.Typed[event.TurnCancelled](w, "t1", nil)
	if !strings.Contains(c.Reason, "cancelled by the user") {
		t.Fatalf("cancel reason %q", c.Reason)
	}
	w.State(store.StateIdle)
	// Cancel again: nothing runs, nothing happens.
	if err := e.m.Cancel(testbin.Context(t), "owner-1", v.ID); err != nil {
		t.Fatal(err)
	}
	if q := e.get(v.ID).Queue; len(q) != 2 {
		t.Fatalf("queue %d after a second cancel, want 2", len(q))
	}

	m3 := e.send(v.ID, "msg three", "")
	for _, turn := range []string{"t2", "t3", "t4"} {
		w.Finished(turn)
	}
	delivered, _ := stacktest.OfType[event.MessageDelivered](w.Seen)
	var ids []string
	for _, d := range delivered[1:] { // [0] is the prompt, in t1
		ids = append(ids, d.MessageID)
	}
	if !slices.Equal(ids, []string{m1.ID, m2.ID, m3.ID}) {
		t.Fatalf("delivered %v, want %s %s %s", ids, m1.ID, m2.ID, m3.ID)
	}
}

// Idle timeout suspends (box destroyed, workspace and conversation kept);
// the next message resumes in a new box, and the model is sent the whole
// earlier conversation.
func TestIdleSuspendAndResume(t *testing.T) { testIdleSuspendAndResume(t) }

func testIdleSuspendAndResume(t *testing.T, opts ...envOpt) {
	e := newEnv(t, opts...)
	v := e.create("remember this for later")
	w := e.watch(v.ID)
	w.IdleAfter("t1")
	before := e.get(v.ID)
	h1, err := decodeHandle(before.Sandbox)
	if err != nil {
		t.Fatal(err)
	}
	if h1.Spec.Limits.MemoryBytes != DefaultMemoryBytes {
		t.Fatalf("the box's memory limit is %d, want the session's %d", h1.Spec.Limits.MemoryBytes, int64(DefaultMemoryBytes))
	}
	if !slices.Contains(e.Boxes(), h1.ID) {
		t.Fatalf("box %s is not running; boxes: %v", h1.ID, e.Boxes())
	}

	e.Clock.Advance(DefaultIdleTimeout)
	w.State(store.StateSuspended)
	s := e.get(v.ID)
	if s.State != store.StateSuspended || s.Sandbox != nil {
		t.Fatalf("after the idle timeout: state %s, sandbox %s; want suspended with no box", s.State, s.Sandbox)
	}
	if boxes := e.Boxes(); len(boxes) != 0 {
		t.Fatalf("boxes still running after suspension: %v", boxes)
	}
	if _, err := os.Stat(filepath.Join(s.Repos[0].Path, "README.md")); err != nil {
		t.Fatalf("the workspace is gone after suspension: %v", err)
	}
	// The runner journals the suspension, then exits: it must go, promptly.
	testbin.WaitFor(t, 10*time.Second, "the suspended session's runner to exit", func() bool {
		e.m.mu.Lock()
		defer e.m.mu.Unlock()
		return len(e.m.runners) == 0
	})

	e.send(v.ID, "msg what was the word?", "")
	w.State(store.StateProvisioning)
	w.Finished("t2")
	s = e.get(v.ID)
	h2, err := decodeHandle(s.Sandbox)
	if err != nil {
		t.Fatal(err)
	}
	if h2.ID == h1.ID {
		t.Fatalf("resumed in the old box %s", h1.ID)
	}
	reqs := e.Sim.Load().Requests()
	last := string(reqs[len(reqs)-1].Body)
	for _, want := range []string{"remember this for later", "I will remember the word pineapple.", "msg what was the word?"} {
		if !strings.Contains(last, want) {
			t.Fatalf("the resumed turn's request lacks %q: the earlier conversation was not sent\n%.2000s", want, last)
		}
	}
}

// A turn that emits nothing for the watchdog's time is cancelled and fails
// with kind "watchdog"; the session goes on.
func TestTurnWatchdog(t *testing.T) {
	e := newEnv(t)
	v := e.create("long task")
	w := e.watch(v.ID)
	stacktest.Typed[event.ToolStarted](w, "t1", nil)
	e.Clock.Advance(DefaultTurnWatchdog)
	f := stacktest.Typed[event.TurnFailed](w, "t1", nil)
	if f.Kind != event.FailWatchdog || !strings.Contains(f.Error, "no progress") {
		t.Fatalf("t1 failed with %+v, want kind watchdog", f)
	}
	w.State(store.StateIdle)
	e.send(v.ID, "msg still there?", "")
	w.Finished("t2")
}

// At its max lifetime a session stops: box destroyed, queued messages
// dropped, further messages refused.
func TestMaxLifetime(t *testing.T) { testMaxLifetime(t) }

func testMaxLifetime(t *testing.T, opts ...envOpt) {
	e := newEnv(t, opts...)
	v := e.create("long task", func(r *CreateRequest) { r.Limits.MaxLifetime = time.Hour })
	w := e.watch(v.ID)
	stacktest.Typed[event.ToolStarted](w, "t1", nil)
	m := e.send(v.ID, "msg never", "")
	e.Clock.Advance(time.Hour)
	w.State(store.StateStopped)
	s := e.get(v.ID)
	if s.State != store.StateStopped || s.Sandbox != nil || len(s.Queue) != 0 {
		t.Fatalf("state %s, box %s, queue %d; want stopped, no box, empty queue", s.State, s.Sandbox, len(s.Queue))
	}
	msgs, err := e.st.Messages(testbin.Context(t), v.ID, store.MessageDropped)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].ID != m.ID {
		t.Fatalf("dropped messages %+v, want %s", msgs, m.ID)
	}
	if boxes := e.Boxes(); len(boxes) != 0 {
		t.Fatalf("boxes after stop: %v", boxes)
	}
	if _, err := e.m.Send(testbin.Context(t), "owner-1", v.ID, "msg hello?", ""); !errors.Is(err, ErrConflict) {
		t.Fatalf("Send to a stopped session: %v, want ErrConflict", err)
	}
}

// Sequential collaboration: while another run holds the session lock the
// message waits ("locked by run X"); an admin unlock lets it through. A
// stale lock of a dead run has expired and does not block.
func TestSessionLock(t *testing.T) { testSessionLock(t) }

func testSessionLock(t *testing.T, opts ...envOpt) {
	e := newEnv(t, opts...)
	v := e.create("")
	w := e.watch(v.ID)
	w.State(store.StateIdle)
	ctx := testbin.Context(t)
	if _, err := e.st.AcquireLock(ctx, "session/"+v.ID, "run-other", time.Hour); err != nil {
		t.Fatal(err)
	}
	msg := e.send(v.ID, "msg blocked", "")
	st := stacktest.Typed(w, "", func(p event.SessionState) bool { return strings.Contains(p.Reason, "locked by run-other") })
	if !strings.Contains(st.Reason, msg.ID) {
		t.Fatalf("the waiting reason %q does not name the message", st.Reason)
	}
	if q := e.get(v.ID).Queue; len(q) != 1 {
		t.Fatalf("queue %d while locked, want 1", len(q))
	}
	if _, err := acquireLock(ctx, e.st, lockKey(v.ID), "run-third", time.Minute, time.Now()); err == nil || !strings.Contains(err.Error(), "locked by run-other") {
		t.Fatalf("a second run got %v, want locked by run-other", err)
	}
	if err := e.m.Unlock(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	w.IdleAfter("t1")
	testbin.WaitFor(t, 10*time.Second, "the runner releases the lock once its queue is empty", func() bool {
		_, err := e.st.GetLock(ctx, "session/"+v.ID)
		return errors.Is(err, store.ErrNotFound)
	})

	// A dead run's lock, expired.
	if _, err := e.st.AcquireLock(ctx, "session/"+v.ID, "run-dead", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, time.Second, "the dead run's lock expires", func() bool {
		l, err := e.st.GetLock(ctx, "session/"+v.ID)
		return err != nil || time.Now().After(l.Expires)
	})
	e.send(v.ID, "msg after the dead run", "")
	w.Finished("t2")
}

// Delete stops the runner, destroys the box and removes the workspace and
// the rows; subscribers hear ErrDeleted.
func TestDelete(t *testing.T) { testDelete(t) }

func testDelete(t *testing.T, opts ...envOpt) {
	e := newEnv(t, opts...)
	v := e.create("long task")
	w := e.watch(v.ID)
	stacktest.Typed[event.ToolStarted](w, "t1", nil)
	e.send(v.ID, "msg queued", "")
	if err := e.m.Delete(testbin.Context(t), "someone-else", v.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another owner's Delete: %v, want ErrNotFound", err)
	}
	if err := e.m.Delete(testbin.Context(t), "owner-1", v.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Get(testbin.Context(t), "", v.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if boxes := e.Boxes(); len(boxes) != 0 {
		t.Fatalf("boxes after Delete: %v", boxes)
	}
	if _, err := os.Stat(filepath.Dir(v.Repos[0].Path)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the workspace survived Delete: %v", err)
	}
	for range w.Sub.C {
	}
	if err := w.Sub.Err(); !errors.Is(err, journal.ErrDeleted) {
		t.Fatalf("the subscription ended with %v, want ErrDeleted", err)
	}
	if _, err := e.m.Send(testbin.Context(t), "owner-1", v.ID, "msg hello", ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Send after Delete: %v", err)
	}
}

// Close loses nothing: the running turn ends as interrupted, the queue and
// the box stay, and a new Manager reattaches the box and delivers the
// queue.
func TestCloseAndRecover(t *testing.T) { testCloseAndRecover(t) }

func testCloseAndRecover(t *testing.T, opts ...envOpt) {
	e := newEnv(t, opts...)
	v := e.create("long task")
	w := e.watch(v.ID)
	stacktest.Typed[event.ToolStarted](w, "t1", nil)
	queued := e.send(v.ID, "msg after restart", "")
	box := func() string {
		s, err := e.st.GetSession(testbin.Context(t), v.ID)
		if err != nil {
			t.Fatal(err)
		}
		h, err := decodeHandle(s.Sandbox)
		if err != nil {
			t.Fatal(err)
		}
		return h.ID
	}
	b1 := box()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f := stacktest.Typed[event.TurnFailed](w, "t1", nil)
	if f.Kind != "interrupted" {
		t.Fatalf("t1 ended with %+v at shutdown, want kind interrupted", f)
	}
	if _, err := e.m.Send(ctx, "owner-1", v.ID, "msg too late", ""); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Send after Close: %v, want ErrUnavailable", err)
	}
	s, err := e.st.GetSession(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if s.State != store.StateIdle || len(s.Sandbox) == 0 {
		t.Fatalf("after Close: state %s, box %q; want idle with the box kept", s.State, s.Sandbox)
	}
	if !slices.Contains(e.Boxes(), b1) {
		t.Fatalf("Close destroyed the box %s", b1)
	}

	e.closeAndReopen()
	if err := e.m.Recover(testbin.Context(t)); err != nil {
		t.Fatal(err)
	}
	w = e.watch(v.ID)
	d := stacktest.Typed[event.MessageDelivered](w, "t2", nil)
	if d.MessageID != queued.ID {
		t.Fatalf("t2 took %s, want %s", d.MessageID, queued.ID)
	}
	w.Finished("t2")
	if b := box(); b != b1 {
		t.Fatalf("recovered into box %s, want the old box %s reattached", b, b1)
	}
	stacktest.CheckGapless(t, e.st, v.ID)
}

func TestCreateValidation(t *testing.T) {
	e := newEnv(t)
	ctx := testbin.Context(t)
	_, err := e.m.Create(ctx, "o", CreateRequest{
		Repos: []RepoSpec{{Source: "/no/such/dir"}, {Source: e.Repo, Name: "bad name"}, {Source: e.Repo, Ref: "-x"}},
		Agent: "claudecode", Model: "nope/model", Backend: "kubernetes", Mode: "inject",
		Limits: store.Limits{IdleTimeout: -time.Second, MemoryBytes: 1},
	})
	var ie *InputError
	if !errors.As(err, &ie) {
		t.Fatalf("got %v, want an InputError", err)
	}
	for _, want := range []string{"repos[0].source", "repos[1].name", "repos[2].ref", `agent "claudecode"`, "model:", "backend:", `mode "inject"`, "durations must be positive", "memory_bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not mention %s: %v", want, err)
		}
	}
	if _, err := e.m.Create(ctx, "o", CreateRequest{}); !IsInput(err) || !strings.Contains(err.Error(), "repos is empty") {
		t.Fatalf("no repos: %v", err)
	}
	v := e.create("")
	if _, err := e.m.Send(ctx, "owner-1", v.ID, "  ", ""); !IsInput(err) {
		t.Fatalf("empty message: %v", err)
	}
	if _, err := e.m.Send(ctx, "owner-1", v.ID, "hi", "shout"); !IsInput(err) {
		t.Fatalf("bad mode: %v", err)
	}
	if _, err := e.m.Get(ctx, "owner-2", v.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another owner's Get: %v", err)
	}
	if _, err := e.m.Get(ctx, "", "s-../../etc"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a malformed id: %v", err)
	}
	if l, err := e.m.List(ctx, "owner-2", store.SessionFilter{}); err != nil || len(l) != 0 {
		t.Fatalf("another owner's List: %d sessions, %v", len(l), err)
	}
	if l, err := e.m.List(ctx, "", store.SessionFilter{}); err != nil || len(l) != 1 {
		t.Fatalf("admin List: %d sessions, %v", len(l), err)
	}
	if !ValidID(v.ID) || ValidID("s-x") {
		t.Fatal("ValidID")
	}
	if v.Limits.IdleTimeout != DefaultIdleTimeout || v.Limits.MemoryBytes != DefaultMemoryBytes || v.Limits.TurnWatchdog != DefaultTurnWatchdog || v.Limits.MaxLifetime != DefaultMaxLifetime {
		t.Fatalf("default limits not applied: %+v", v.Limits)
	}
}

func TestWorkspaceDir(t *testing.T) {
	for _, c := range []struct {
		sc   Scope
		want string
	}{
		{Scope{Session: "s1", Workflow: "w", Run: "r"}, "/d/workspaces/session/s1"},
		{Scope{Workflow: "w1", Run: "r"}, "/d/workspaces/workflow/w1"},
		{Scope{Run: "r1"}, "/d/workspaces/run/r1"},
	} {
		got, err := WorkspaceDir("/d", c.sc)
		if err != nil || got != c.want {
			t.Errorf("%+v: %q %v, want %q", c.sc, got, err, c.want)
		}
	}
	for _, sc := range []Scope{{}, {Session: "../x"}, {Run: "a/b"}} {
		if _, err := WorkspaceDir("/d", sc); err == nil {
			t.Errorf("%+v: no error", sc)
		}
	}
}
