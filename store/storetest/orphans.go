package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// testOrphans: Orphans lists the sessions no node owns that need one —
// live, or suspended with a queued message — urgent first, then oldest,
// with the total whatever the limit; owned, ended and suspended sessions
// without a queued message are not in it.
func testOrphans(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Minute) }
	for i, s := range []struct {
		id    string
		state store.State
	}{
		{"idle-old", store.StateIdle},         // never leased
		{"working", store.StateWorking},       // its owner's lease ran out
		{"susp-queued", store.StateSuspended}, // a message waits for it
		{"susp", store.StateSuspended},        // nothing to do: needs no node
		{"stopped", store.StateStopped},
		{"owned", store.StateIdle},    // a live lease
		{"released", store.StateIdle}, // given up
		{"pending", store.StatePending},
		{"idle-queued", store.StateIdle}, // idle with a message: urgent
	} {
		mustCreate(t, st, &store.Session{ID: s.id, Owner: "o", State: s.state, CreatedAt: at(i), UpdatedAt: at(i)})
	}
	for _, m := range []*store.Message{
		{ID: "m1", Session: "susp-queued", Text: "hi", CreatedAt: base},
		{ID: "m2", Session: "susp-queued", Text: "again", CreatedAt: base},
		{ID: "m3", Session: "idle-queued", Text: "hi", CreatedAt: base},
		{ID: "m4", Session: "susp", Text: "done", CreatedAt: base},
	} {
		if err := st.AddMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetMessageState(ctx, "susp", "m4", store.MessageDelivered, "t1"); err != nil {
		t.Fatal(err)
	}
	expired := expire(t, st, mustAcquire(t, st, "working", "node-a", time.Hour))
	mustAcquire(t, st, "owned", "node-a", time.Hour)
	if err := st.ReleaseLease(ctx, mustAcquire(t, st, "released", "node-a", time.Hour)); err != nil {
		t.Fatal(err)
	}

	got, total, err := st.Orphans(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	ids := func(os []store.Orphan) []string {
		var out []string
		for _, o := range os {
			out = append(out, o.Lease.Session)
		}
		return out
	}
	want := []string{"working", "susp-queued", "pending", "idle-queued", "idle-old", "released"}
	if !slices.Equal(ids(got), want) || total != len(want) {
		t.Fatalf("Orphans(0) = %v (total %d), want %v (total %d): urgent first, then oldest", ids(got), total, want, len(want))
	}
	by := map[string]store.Orphan{}
	for _, o := range got {
		by[o.Lease.Session] = o
	}
	if o := by["working"]; o.Lease != expired || o.State != store.StateWorking || !o.CreatedAt.Equal(at(1)) || !o.Urgent() {
		t.Errorf("the working orphan: %+v, want its expired lease %+v, working, created %v, urgent", o, expired, at(1))
	}
	if o := by["susp-queued"]; o.Queued != 2 || !o.Urgent() {
		t.Errorf("the suspended orphan with two queued messages: %+v", o)
	}
	if o := by["idle-old"]; o.Lease.Epoch != 0 || o.Lease.Node != "" || o.Queued != 0 || o.Urgent() {
		t.Errorf("the idle orphan never leased: %+v, want epoch 0, nothing queued, not urgent", o)
	}
	if o := by["released"]; o.Lease.Epoch != 1 || o.Lease.Node != "" {
		t.Errorf("the released orphan: %+v, want epoch 1 and no node", o)
	}

	got, total, err = st.Orphans(ctx, 2)
	if err != nil || !slices.Equal(ids(got), want[:2]) || total != len(want) {
		t.Errorf("Orphans(2) = %v (total %d), %v; want %v (total %d)", ids(got), total, err, want[:2], len(want))
	}
	if _, _, err := st.Orphans(ctx, -1); err == nil {
		t.Error("Orphans(-1) succeeded")
	}
	// Taken: no longer an orphan.
	mustAcquire(t, st, "working", "node-b", time.Hour)
	if got, total, err := st.Orphans(ctx, 1); err != nil || total != len(want)-1 || len(got) != 1 || got[0].Lease.Session != "susp-queued" {
		t.Errorf("Orphans(1) after node-b took one = %v (total %d), %v", ids(got), total, err)
	}
}
