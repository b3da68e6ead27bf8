package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
)

// base is a fixed time with microsecond precision.
var base = time.Date(2025, 3, 14, 15, 9, 26, 535897000, time.UTC)

func fullSession(id string) *store.Session {
	return &store.Session{
		ID: id, Owner: "tok-1", Title: "fix the flaky test", State: store.StateIdle,
		Agent: "builtin", Model: "sim", Backend: "local",
		Repos: []store.Repo{
			{Name: "api", Source: "/src/api", Ref: "main", Path: "/data/ws/api"},
			{Name: "web", Source: "https://example.com/web.git"},
			{Name: "app", Source: "acme/app", GitHub: "acme/app", Branch: "harvest/" + id, Base: "main",
				Head: "0123456789abcdef0123456789abcdef01234567", Pushed: "0123456789abcdef0123456789abcdef01234567",
				PRNumber: 42, PRURL: "https://github.com/acme/app/pull/42"},
		},
		PR: store.PRDraft, Environment: "env-abc",
		GitHub: &store.GitHubLink{Repo: "acme/app", Number: 7, IsPR: true, Requester: "ada", RequesterID: 583231,
			RequesterName: "Ada L", Progress: 99, FixAttempts: 1},
		Limits: store.Limits{IdleTimeout: 5 * time.Minute, MaxLifetime: 24 * time.Hour,
			TurnWatchdog: 30 * time.Minute, MemoryBytes: 6 << 30, MaxSteps: 50, BudgetUSD: 2.5},
		LimitsEnforced: &store.Enforcement{Memory: true, Pids: true},
		Mode:           "queue",
		Collab:         store.Collab{Workflow: "wf-1", Mode: store.Parallel, Branch: "harvest/wf-1/" + id},
		Terminal: &store.TerminalCLI{Command: []string{"python3", "-i", "-q"}, DonePattern: `(?m)^>>> $`,
			ReadyPattern: `>>> $`, IdleTimeout: 90 * time.Second},
		Egress: &[]string{"pypi.org", "*.pythonhosted.org"},
		MCPServers: []store.MCPServer{
			{Name: "docs", Command: []string{"python3", "docs.py", "--offline"}, Env: map[string]string{"DOCS_MODE": "a=b"}, Dir: "/workspace/api"},
			{Name: "github", URL: "https://api.githubcopilot.com/mcp/", Headers: map[string]string{"Authorization": "${secret:GH_MCP}"}},
		},
		Sandbox:    []byte(`{"backend":"local","id":"box-1"}`),
		AgentState: []byte("\x00binary\xffstate"),
		Turns:      3,
		Usage:      event.Usage{InputTokens: 100, OutputTokens: 20, CacheReadTokens: 5, CacheWriteTokens: 1},
		CostUSD:    0.125,
		Error:      "",
		CreatedAt:  base,
		UpdatedAt:  base.Add(time.Minute),
		ActiveAt:   base.Add(2 * time.Minute),
	}
}

// diffSession lists the fields where got differs from want.
func diffSession(got, want *store.Session) []string {
	var d []string
	g, w := *got, *want
	for _, f := range []struct {
		name string
		a, b time.Time
	}{{"CreatedAt", g.CreatedAt, w.CreatedAt}, {"UpdatedAt", g.UpdatedAt, w.UpdatedAt}, {"ActiveAt", g.ActiveAt, w.ActiveAt}} {
		if !f.a.Equal(f.b) {
			d = append(d, fmt.Sprintf("%s: got %v, want %v", f.name, f.a, f.b))
		}
	}
	g.CreatedAt, g.UpdatedAt, g.ActiveAt = w.CreatedAt, w.UpdatedAt, w.ActiveAt
	if !bytes.Equal(g.Sandbox, w.Sandbox) {
		d = append(d, fmt.Sprintf("Sandbox: got %q, want %q", g.Sandbox, w.Sandbox))
	}
	if !bytes.Equal(g.AgentState, w.AgentState) {
		d = append(d, fmt.Sprintf("AgentState: got %q, want %q", g.AgentState, w.AgentState))
	}
	g.Sandbox, g.AgentState = w.Sandbox, w.AgentState
	if len(g.Repos) == 0 && len(w.Repos) == 0 {
		g.Repos = w.Repos
	}
	if !reflect.DeepEqual(g, w) {
		d = append(d, fmt.Sprintf("got %+v\nwant %+v", g, w))
	}
	return d
}

func mustCreate(t *testing.T, st store.Store, s *store.Session) {
	t.Helper()
	if err := st.CreateSession(context.Background(), s, nil); err != nil {
		t.Fatalf("CreateSession(%s): %v", s.ID, err)
	}
}

func testSessions(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()

	want := fullSession("s1")
	first := &store.Message{ID: "m1", Text: "hello", Mode: "queue", State: store.MessageQueued, CreatedAt: base}
	if err := st.CreateSession(ctx, want, first); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	if first.Seq != 1 || first.Session != "s1" {
		t.Errorf("first message: Seq %d Session %q, want 1 and s1", first.Seq, first.Session)
	}
	got, err := st.GetSession(ctx, "s1")
	if err != nil {
		t.Fatalf("GetSession: %v", err)
	}
	if d := diffSession(got, fullSession("s1")); d != nil {
		t.Errorf("GetSession differs from what was created:\n%v", d)
	}
	msgs, err := st.Messages(ctx, "s1")
	if err != nil || len(msgs) != 1 || msgs[0].ID != "m1" || msgs[0].Seq != 1 || msgs[0].Text != "hello" || msgs[0].State != store.MessageQueued {
		t.Errorf("Messages after CreateSession with a first message = %+v, %v; want m1 seq 1 queued", msgs, err)
	}

	// A session without repos or blobs round-trips too.
	bare := &store.Session{ID: "s2", Owner: "tok-1", State: store.StatePending, CreatedAt: base, UpdatedAt: base}
	mustCreate(t, st, bare)
	got, err = st.GetSession(ctx, "s2")
	if err != nil {
		t.Fatalf("GetSession(s2): %v", err)
	}
	if d := diffSession(got, &store.Session{ID: "s2", Owner: "tok-1", State: store.StatePending, CreatedAt: base, UpdatedAt: base}); d != nil {
		t.Errorf("bare session: %v", d)
	}

	err = st.CreateSession(ctx, fullSession("s1"), nil)
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateSession with an existing id: %v, want ErrConflict", err)
	}
	// A failed create writes nothing, not even its first message.
	err = st.CreateSession(ctx, fullSession("s1"), &store.Message{ID: "m9", Text: "x", CreatedAt: base})
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateSession with an existing id and a message: %v, want ErrConflict", err)
	}
	if msgs, _ := st.Messages(ctx, "s1"); len(msgs) != 1 {
		t.Errorf("a failed CreateSession wrote its first message: %d messages", len(msgs))
	}

	if _, err := st.GetSession(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetSession(missing): %v, want ErrNotFound", err)
	}
}

func testListSessions(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	// s0..s5, created a minute apart; updated at created+30s.
	owners := []string{"a", "b", "a", "b", "a", "a"}
	states := []store.State{store.StateIdle, store.StateWorking, store.StateSuspended, store.StateIdle, store.StateStopped, store.StateWorking}
	for i := range owners {
		c := base.Add(time.Duration(i) * time.Minute)
		sess := &store.Session{ID: fmt.Sprintf("s%d", i), Owner: owners[i], State: states[i],
			CreatedAt: c, UpdatedAt: c.Add(30 * time.Second)}
		if i%2 == 1 {
			sess.Collab = store.Collab{Workflow: "wf-odd", Mode: store.Sequential}
		}
		if i >= 3 {
			sess.GitHub = &store.GitHubLink{Repo: "Acme/App", Number: 7 + i%2, Requester: "ada"}
		}
		mustCreate(t, st, sess)
	}
	ids := func(ss []*store.Session) []string {
		out := []string{}
		for _, s := range ss {
			out = append(out, s.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    store.SessionFilter
		want []string
	}{
		{"all, newest first", store.SessionFilter{}, []string{"s5", "s4", "s3", "s2", "s1", "s0"}},
		{"owner", store.SessionFilter{Owner: "a"}, []string{"s5", "s4", "s2", "s0"}},
		{"states", store.SessionFilter{States: []store.State{store.StateIdle, store.StateWorking}}, []string{"s5", "s3", "s1", "s0"}},
		{"owner and state", store.SessionFilter{Owner: "b", States: []store.State{store.StateIdle}}, []string{"s3"}},
		{"updated before", store.SessionFilter{UpdatedBefore: base.Add(2*time.Minute + 31*time.Second)}, []string{"s2", "s1", "s0"}},
		{"updated before is strict", store.SessionFilter{UpdatedBefore: base.Add(30 * time.Second)}, []string{}},
		{"limit", store.SessionFilter{Limit: 2}, []string{"s5", "s4"}},
		{"everything", store.SessionFilter{Owner: "a", States: []store.State{store.StateIdle, store.StateSuspended, store.StateWorking}, UpdatedBefore: base.Add(10 * time.Minute), Limit: 2}, []string{"s5", "s2"}},
		{"no match", store.SessionFilter{Owner: "c"}, []string{}},
		{"workflow", store.SessionFilter{Workflow: "wf-odd"}, []string{"s5", "s3", "s1"}},
		{"workflow and owner", store.SessionFilter{Workflow: "wf-odd", Owner: "a"}, []string{"s5"}},
		{"no such workflow", store.SessionFilter{Workflow: "wf-none"}, []string{}},
		{"github thread", store.SessionFilter{GitHubRepo: "acme/app", GitHubNumber: 8}, []string{"s5", "s3"}},
		{"github thread and state", store.SessionFilter{GitHubRepo: "acme/app", GitHubNumber: 7, States: []store.State{store.StateStopped}}, []string{"s4"}},
		{"no such thread", store.SessionFilter{GitHubRepo: "acme/app", GitHubNumber: 9}, []string{}},
	} {
		got, err := st.ListSessions(ctx, tc.f)
		if err != nil {
			t.Errorf("%s: ListSessions: %v", tc.name, err)
			continue
		}
		if g := ids(got); !reflect.DeepEqual(g, tc.want) {
			t.Errorf("%s: ListSessions(%+v) = %v, want %v", tc.name, tc.f, g, tc.want)
		}
	}
	// Listed sessions are complete.
	mustCreate(t, st, fullSession("full"))
	got, err := st.ListSessions(ctx, store.SessionFilter{Owner: "tok-1"})
	if err != nil || len(got) != 1 {
		t.Fatalf("ListSessions(owner tok-1) = %v, %v", got, err)
	}
	if d := diffSession(got[0], fullSession("full")); d != nil {
		t.Errorf("listed session differs: %v", d)
	}
}

func testUpdateSession(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	mustCreate(t, st, fullSession("s1"))

	before := time.Now()
	got, err := st.UpdateSession(ctx, "s1", func(s *store.Session) error {
		s.State = store.StateWorking
		s.Turns++
		s.Usage = s.Usage.Add(event.Usage{InputTokens: 1})
		s.Sandbox = nil
		s.Error = "none yet"
		s.Egress = &[]string{} // none: not the same as nil (the server's)
		s.Terminal = nil
		s.MCPServers = s.MCPServers[:1]
		s.LimitsEnforced = &store.Enforcement{Memory: true, Pids: true, Disk: true}
		return nil
	})
	if err != nil {
		t.Fatalf("UpdateSession: %v", err)
	}
	want := fullSession("s1")
	want.State, want.Turns, want.Usage.InputTokens, want.Sandbox, want.Error = store.StateWorking, 4, 101, nil, "none yet"
	want.Egress, want.Terminal = &[]string{}, nil
	want.MCPServers = want.MCPServers[:1]
	want.LimitsEnforced = &store.Enforcement{Memory: true, Pids: true, Disk: true}
	if got.UpdatedAt.Before(before.Add(-time.Millisecond)) || got.UpdatedAt.After(time.Now().Add(time.Second)) {
		t.Errorf("UpdateSession set UpdatedAt to %v, want about now (%v)", got.UpdatedAt, before)
	}
	want.UpdatedAt = got.UpdatedAt
	if d := diffSession(got, want); d != nil {
		t.Errorf("UpdateSession returned: %v", d)
	}
	stored, err := st.GetSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if stored.UpdatedAt.Sub(got.UpdatedAt).Abs() > time.Microsecond {
		t.Errorf("stored UpdatedAt %v, returned %v", stored.UpdatedAt, got.UpdatedAt)
	}
	want.UpdatedAt = stored.UpdatedAt
	if d := diffSession(stored, want); d != nil {
		t.Errorf("GetSession after UpdateSession: %v", d)
	}

	// fn may set UpdatedAt itself (a caller with its own clock).
	at := base.Add(time.Hour)
	got, err = st.UpdateSession(ctx, "s1", func(s *store.Session) error { s.UpdatedAt = at; return nil })
	if err != nil || !got.UpdatedAt.Equal(at) {
		t.Errorf("UpdateSession setting UpdatedAt: %v, %v; want %v", got, err, at)
	}
	if s, _ := st.GetSession(ctx, "s1"); s == nil || !s.UpdatedAt.Equal(at) {
		t.Errorf("UpdatedAt set by fn was not kept: %+v", s)
	}

	// An error from fn aborts: nothing is written.
	boom := errors.New("boom")
	_, err = st.UpdateSession(ctx, "s1", func(s *store.Session) error { s.Turns = 99; s.State = store.StateFailed; return boom })
	if !errors.Is(err, boom) {
		t.Errorf("UpdateSession with fn failing: %v, want fn's error", err)
	}
	if s, _ := st.GetSession(ctx, "s1"); s == nil || s.Turns != 4 || s.State != store.StateWorking {
		t.Errorf("a failed update wrote: %+v", s)
	}

	if _, err := st.UpdateSession(ctx, "nope", func(*store.Session) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateSession(missing): %v, want ErrNotFound", err)
	}
}

// testUpdateConcurrent: read-modify-write is atomic, so concurrent
// increments are never lost.
func testUpdateConcurrent(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	mustCreate(t, st, &store.Session{ID: "s1", Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base})
	const workers, each = 20, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if _, err := st.UpdateSession(ctx, "s1", func(s *store.Session) error {
					s.Turns++
					s.CostUSD += 0.5
					return nil
				}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent UpdateSession: %v", err)
	}
	s, err := st.GetSession(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if s.Turns != workers*each || s.CostUSD != workers*each*0.5 {
		t.Errorf("after %d concurrent increments: Turns %d, CostUSD %v", workers*each, s.Turns, s.CostUSD)
	}
}

func testDeleteSession(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	for _, id := range []string{"s1", "s2"} {
		mustCreate(t, st, &store.Session{ID: id, Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base})
		if err := st.AddMessage(ctx, &store.Message{ID: "m1", Session: id, Text: "hi", CreatedAt: base}); err != nil {
			t.Fatal(err)
		}
		if err := st.AppendEvents(ctx, evs(id, 1, 3)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.DeleteSession(ctx, "s1"); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	if _, err := st.GetSession(ctx, "s1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetSession after delete: %v, want ErrNotFound", err)
	}
	if m, err := st.Messages(ctx, "s1"); err != nil || len(m) != 0 {
		t.Errorf("Messages after delete: %v, %v; want none", m, err)
	}
	if e, err := st.Events(ctx, "s1", 0, 0); err != nil || len(e) != 0 {
		t.Errorf("Events after delete: %v, %v; want none", e, err)
	}
	if n, err := st.LastSeq(ctx, "s1"); err != nil || n != 0 {
		t.Errorf("LastSeq after delete: %d, %v; want 0", n, err)
	}
	// Nothing can be added to a deleted session.
	if err := st.AppendEvents(ctx, evs("s1", 4, 4)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AppendEvents to a deleted session: %v, want ErrNotFound", err)
	}
	if err := st.AddMessage(ctx, &store.Message{ID: "m2", Session: "s1", Text: "hi"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AddMessage to a deleted session: %v, want ErrNotFound", err)
	}
	// The other session is untouched.
	if e, _ := st.Events(ctx, "s2", 0, 0); len(e) != 3 {
		t.Errorf("the other session has %d events, want 3", len(e))
	}
	if m, _ := st.Messages(ctx, "s2"); len(m) != 1 {
		t.Errorf("the other session has %d messages, want 1", len(m))
	}
	if err := st.DeleteSession(ctx, "s1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteSession twice: %v, want ErrNotFound", err)
	}
}

func testCancelled(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := st.CreateSession(ctx, &store.Session{ID: "s1", Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base}, nil); err == nil {
		t.Errorf("CreateSession with a cancelled context succeeded")
	}
	if _, err := st.GetSession(context.Background(), "s1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a CreateSession that failed (cancelled context) wrote the session: %v", err)
	}
	if _, err := st.GetSession(ctx, "s1"); err == nil {
		t.Errorf("GetSession with a cancelled context succeeded")
	}
}
