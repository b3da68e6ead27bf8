package storetest

import (
	"cmp"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// testCountSessions: the counts by state and the promised disk follow
// creates, state changes and deletes; states with no session are left out.
func testCountSessions(t *testing.T, open func(*testing.T) store.Store) {
	s := open(t)
	ctx := context.Background()
	got, err := s.CountSessions(ctx)
	if err != nil || len(got) != 0 {
		t.Fatalf("CountSessions of an empty store = %v, %v; want none", got, err)
	}
	mk := func(id string, st store.State, disk int64) {
		t.Helper()
		sess := &store.Session{ID: id, Owner: "tok-1", State: st, Agent: "builtin", Backend: "local",
			Limits: store.Limits{DiskBytes: disk, IdleTimeout: time.Minute}, CreatedAt: base, UpdatedAt: base}
		if err := s.CreateSession(ctx, sess, nil); err != nil {
			t.Fatal(err)
		}
	}
	mk("s-a", store.StateIdle, 1<<30)
	mk("s-b", store.StateIdle, 2<<30)
	mk("s-c", store.StateSuspended, 20<<30)
	mk("s-d", store.StateFailed, 0) // no disk limit: counts for nothing
	want := []store.StateCount{
		{State: store.StateFailed, Sessions: 1},
		{State: store.StateIdle, Sessions: 2, DiskBytes: 3 << 30},
		{State: store.StateSuspended, Sessions: 1, DiskBytes: 20 << 30},
	}
	check := func(want []store.StateCount) {
		t.Helper()
		got, err := s.CountSessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(got, func(a, b store.StateCount) int { return cmp.Compare(a.State, b.State) })
		if !slices.Equal(got, want) {
			t.Fatalf("CountSessions = %+v, want %+v", got, want)
		}
	}
	check(want)
	if _, err := s.UpdateSession(ctx, "s-c", func(x *store.Session) error { x.State = store.StateIdle; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSession(ctx, "s-d"); err != nil {
		t.Fatal(err)
	}
	check([]store.StateCount{{State: store.StateIdle, Sessions: 3, DiskBytes: 23 << 30}})
}
