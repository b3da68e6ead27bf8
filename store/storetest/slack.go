package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// testSlack: an event id is recorded once (a second is ErrConflict) and
// forgotten by a prune of its time; a session's thread is recorded once
// and read back, and goes with its session; a channel's default
// repository is replaced, per team.
func testSlack(t *testing.T, open func(t *testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	if err := st.AddSlackEvent(ctx, "Ev1", base); err != nil {
		t.Fatal(err)
	}
	if err := st.AddSlackEvent(ctx, "Ev1", base.Add(time.Minute)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("AddSlackEvent of an id seen before: %v, want ErrConflict", err)
	}
	if err := st.AddSlackEvent(ctx, "Ev2", base.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n, err := st.PruneSlackEvents(ctx, base.Add(time.Minute)); err != nil || n != 1 {
		t.Errorf("PruneSlackEvents: %d, %v; want 1 (Ev1)", n, err)
	}
	if err := st.AddSlackEvent(ctx, "Ev1", base.Add(2*time.Hour)); err != nil {
		t.Errorf("AddSlackEvent of a pruned id: %v", err)
	}
	if err := st.AddSlackEvent(ctx, "Ev2", base.Add(2*time.Hour)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("AddSlackEvent of a kept id: %v, want ErrConflict", err)
	}

	if err := st.CreateSession(ctx, &store.Session{ID: "s1", Owner: "slack", State: store.StateIdle, Agent: "builtin", Backend: "local", Repos: []store.Repo{}, CreatedAt: base, UpdatedAt: base}, nil); err != nil {
		t.Fatal(err)
	}
	want := store.SlackThread{Session: "s1", Team: "T1", Channel: "C1", ThreadTS: "1700000000.000100", User: "U1", CreatedAt: base}
	th := want
	if err := st.PutSlackThread(ctx, &th); err != nil {
		t.Fatal(err)
	}
	if err := st.PutSlackThread(ctx, &th); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutSlackThread of a session that has one: %v, want ErrConflict", err)
	}
	got, err := st.SlackThread(ctx, "s1")
	if err != nil || !got.CreatedAt.Equal(want.CreatedAt) {
		t.Fatalf("SlackThread: %+v, %v; want %+v", got, err, want)
	}
	got.CreatedAt = want.CreatedAt
	if *got != want {
		t.Errorf("SlackThread: %+v, want %+v", *got, want)
	}
	for _, seq := range []int64{7, 5} {
		if err := st.SetSlackThreadShown(ctx, "s1", seq); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := st.SlackThread(ctx, "s1"); err != nil || got.Shown != 7 {
		t.Errorf("Shown after 7 then 5: %+v, %v; want 7 (never lowered)", got, err)
	}
	if err := st.SetSlackThreadTurn(ctx, "s1", "t-1", "1700000000.000200", "1700000000.000100"); err != nil {
		t.Fatal(err)
	}
	if err := st.SetSlackThreadTurn(ctx, "s1", "t-2", "1700000000.000400", "1700000000.000300"); err != nil {
		t.Fatal(err)
	}
	if got, err := st.SlackThread(ctx, "s1"); err != nil || got.Turn != "t-2" || got.ProgressTS != "1700000000.000400" || got.TriggerTS != "1700000000.000300" || got.Shown != 7 {
		t.Errorf("SlackThread after SetSlackThreadTurn t-1 then t-2: %+v, %v; want t-2's (and Shown 7 kept)", got, err)
	}
	if err := st.SetSlackThreadTurn(ctx, "s2", "t-1", "1", "2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SetSlackThreadTurn of a session without a thread: %v, want ErrNotFound", err)
	}
	if err := st.SetSlackThreadShown(ctx, "s2", 1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SetSlackThreadShown of a session without a thread: %v, want ErrNotFound", err)
	}
	if _, err := st.SlackThread(ctx, "s2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SlackThread of a session without one: %v, want ErrNotFound", err)
	}
	if err := st.DeleteSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SlackThread(ctx, "s1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SlackThread of a deleted session: %v, want ErrNotFound", err)
	}

	if _, err := st.SlackChannel(ctx, "T1", "C1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SlackChannel never set: %v, want ErrNotFound", err)
	}
	for _, repo := range []string{"acme/widget", "acme/gadget"} {
		if err := st.SetSlackChannel(ctx, &store.SlackChannel{Team: "T1", Channel: "C1", Repo: repo, SetBy: "usr-ann"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetSlackChannel(ctx, &store.SlackChannel{Team: "T2", Channel: "C1", Repo: "other/one"}); err != nil {
		t.Fatal(err)
	}
	c, err := st.SlackChannel(ctx, "T1", "C1")
	if err != nil || c.Repo != "acme/gadget" || c.SetBy != "usr-ann" || c.UpdatedAt.IsZero() {
		t.Errorf("SlackChannel after two sets: %+v, %v; want acme/gadget by usr-ann", c, err)
	}
	if c, err := st.SlackChannel(ctx, "T2", "C1"); err != nil || c.Repo != "other/one" {
		t.Errorf("SlackChannel of another team: %+v, %v", c, err)
	}
	if err := st.SetSlackChannel(ctx, &store.SlackChannel{Team: "T1", Channel: "C1"}); err == nil {
		t.Error("SetSlackChannel without a repo stored it")
	}
	testSlackCopier(t, st)
}

// testSlackCopier: store.Copier lists what testSlack left (Ev1 again, Ev2;
// two channels) and a thread, by key, with their times; LoadSlackChannel
// keeps the time it is given and refuses a channel that has a default.
func testSlackCopier(t *testing.T, st store.Store) {
	cp, ok := st.(store.Copier)
	if !ok { // a wrapper, not the store itself
		return
	}
	ctx := context.Background()
	if err := st.CreateSession(ctx, &store.Session{ID: "s3", Owner: "slack", State: store.StateIdle, Agent: "builtin", Backend: "local", Repos: []store.Repo{}, CreatedAt: base, UpdatedAt: base}, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.PutSlackThread(ctx, &store.SlackThread{Session: "s3", Team: "T1", Channel: "C9", ThreadTS: "1.2", CreatedAt: base}); err != nil {
		t.Fatal(err)
	}
	evs, err := cp.DumpSlackEvents(ctx)
	if err != nil || len(evs) != 2 || evs[0].ID != "Ev1" || !evs[0].ReceivedAt.Equal(base.Add(2*time.Hour)) || evs[1].ID != "Ev2" || !evs[1].ReceivedAt.Equal(base.Add(time.Hour)) {
		t.Errorf("DumpSlackEvents: %+v, %v; want Ev1 at base+2h, Ev2 at base+1h", evs, err)
	}
	ths, err := cp.DumpSlackThreads(ctx)
	if err != nil || len(ths) != 1 || ths[0].Session != "s3" || ths[0].ThreadTS != "1.2" || !ths[0].CreatedAt.Equal(base) {
		t.Errorf("DumpSlackThreads: %+v, %v; want s3's", ths, err)
	}
	chs, err := cp.DumpSlackChannels(ctx)
	if err != nil || len(chs) != 2 || chs[0].Team != "T1" || chs[0].Repo != "acme/gadget" || chs[1].Team != "T2" {
		t.Errorf("DumpSlackChannels: %+v, %v; want T1's C1 then T2's", chs, err)
	}
	if err := cp.LoadSlackChannel(ctx, &store.SlackChannel{Team: "T1", Channel: "C1", Repo: "x/y", UpdatedAt: base}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("LoadSlackChannel of a channel that has a default: %v, want ErrConflict", err)
	}
	if err := cp.LoadSlackChannel(ctx, &store.SlackChannel{Team: "T3", Channel: "C3", Repo: "x/y", SetBy: "usr-ann", UpdatedAt: base}); err != nil {
		t.Fatal(err)
	}
	if c, err := st.SlackChannel(ctx, "T3", "C3"); err != nil || !c.UpdatedAt.Equal(base) || c.SetBy != "usr-ann" {
		t.Errorf("a loaded channel: %+v, %v; want its time kept", c, err)
	}
}
