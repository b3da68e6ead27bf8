package storetest

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// testQuotas: budgets are set (replaced when set again), read and
// deleted for users and teams that exist, refused for caps out of range
// and subjects that do not; a user's are their own and their teams';
// spend adds up per user and day, a team's is its members'; live
// sessions are counted by user and team (suspended and ended ones not);
// each change records the context's audit entry with it.
func testQuotas(t *testing.T, open func(t *testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	for _, u := range []*store.User{{ID: "usr-ann", Name: "Ann", Role: store.RoleMember}, {ID: "usr-bob", Name: "Bob", Role: store.RoleMember}, {ID: "usr-cy", Name: "Cy", Role: store.RoleMember}} {
		if err := st.CreateUser(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CreateTeam(ctx, &store.Team{Name: "qa"}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"usr-ann", "usr-bob"} {
		if err := st.AddTeamMember(ctx, "qa", u); err != nil {
			t.Fatal(err)
		}
	}
	audited := func(action string) context.Context {
		return store.WithAudit(ctx, &store.AuditEntry{Action: action, Channel: store.ChannelAPI, User: "usr-admin"})
	}

	ann := &store.Quota{Scope: store.QuotaUser, Subject: "usr-ann", DailyUSD: 2.5, MaxSessions: 3, UpdatedAt: base}
	if err := st.SetQuota(audited("budget.set"), ann); err != nil {
		t.Fatal(err)
	}
	if err := st.SetQuota(ctx, &store.Quota{Scope: store.QuotaTeam, Subject: "qa", DailyUSD: 10}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []store.Quota{
		{Scope: "org", Subject: "usr-ann"},
		{Scope: store.QuotaUser},
		{Scope: store.QuotaUser, Subject: "usr-ann", DailyUSD: -1},
		{Scope: store.QuotaUser, Subject: "usr-ann", DailyUSD: math.NaN()},
		{Scope: store.QuotaUser, Subject: "usr-ann", DailyUSD: 2 * store.MaxDailyUSD},
		{Scope: store.QuotaUser, Subject: "usr-ann", MaxSessions: -2},
	} {
		if err := st.SetQuota(audited("budget.set"), &bad); err == nil || errors.Is(err, store.ErrNotFound) {
			t.Errorf("SetQuota(%+v) = %v, want an error saying what is wrong", bad, err)
		}
	}
	for _, q := range []store.Quota{{Scope: store.QuotaUser, Subject: "usr-ghost", DailyUSD: 1}, {Scope: store.QuotaTeam, Subject: "nope", DailyUSD: 1}} {
		if err := st.SetQuota(audited("budget.set"), &q); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("SetQuota of a missing %s: %v, want ErrNotFound", q.Scope, err)
		}
	}
	got, err := st.GetQuota(ctx, store.QuotaUser, "usr-ann")
	if err != nil || got.DailyUSD != 2.5 || got.MaxSessions != 3 || !got.UpdatedAt.Equal(base) {
		t.Errorf("GetQuota(ann) = %+v, %v; want 2.5 and 3 of %v", got, err, base)
	}
	if _, err := st.GetQuota(ctx, store.QuotaUser, "usr-bob"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetQuota of a user with none: %v, want ErrNotFound", err)
	}
	// Set again: replaced.
	later := base.Add(time.Hour)
	if err := st.SetQuota(audited("budget.set"), &store.Quota{Scope: store.QuotaUser, Subject: "usr-ann", DailyUSD: 5, UpdatedAt: later}); err != nil {
		t.Fatal(err)
	}
	if got, err := st.GetQuota(ctx, store.QuotaUser, "usr-ann"); err != nil || got.DailyUSD != 5 || got.MaxSessions != 0 || !got.UpdatedAt.Equal(later) {
		t.Errorf("GetQuota(ann) after a second set = %+v, %v; want 5, no session cap", got, err)
	}
	qs, err := st.QuotasOf(ctx, "usr-ann")
	if err != nil || len(qs) != 2 || qs[0].Scope != store.QuotaUser || qs[1].Scope != store.QuotaTeam || qs[1].Subject != "qa" || qs[1].DailyUSD != 10 {
		t.Errorf("QuotasOf(ann) = %+v, %v; want hers, then qa's", qs, err)
	}
	if qs, err := st.QuotasOf(ctx, "usr-cy"); err != nil || len(qs) != 0 {
		t.Errorf("QuotasOf(cy) = %+v, %v; want none", qs, err)
	}

	day, next := store.Day(base), store.Day(base.Add(24*time.Hour))
	for _, s := range []struct {
		user, day string
		usd       float64
	}{{"usr-ann", day, 0.25}, {"usr-ann", day, 0.5}, {"usr-bob", day, 1}, {"usr-cy", day, 4}, {"usr-ann", next, 3}, {"usr-ann", day, 0}} {
		if err := st.AddSpend(ctx, s.user, s.day, s.usd); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.AddSpend(ctx, "usr-ann", day, -1); err == nil {
		t.Error("AddSpend of a negative amount was taken")
	}
	mk := func(id, user string, state store.State) {
		t.Helper()
		s := &store.Session{ID: id, Owner: "tok-1", User: user, State: state, Agent: "builtin", Backend: "local", CreatedAt: base, UpdatedAt: base}
		if err := st.CreateSession(ctx, s, nil); err != nil {
			t.Fatal(err)
		}
	}
	mk("s-q1", "usr-ann", store.StateIdle)
	mk("s-q2", "usr-ann", store.StateWorking)
	mk("s-q3", "usr-ann", store.StateSuspended)
	mk("s-q4", "usr-ann", store.StateStopped)
	mk("s-q5", "usr-bob", store.StatePending)
	mk("s-q6", "usr-cy", store.StateIdle)
	for _, c := range []struct {
		scope, subject, day string
		want                store.Use
	}{
		{store.QuotaUser, "usr-ann", day, store.Use{SpentUSD: 0.75, LiveSessions: 2}},
		{store.QuotaUser, "usr-ann", next, store.Use{SpentUSD: 3, LiveSessions: 2}},
		{store.QuotaUser, "usr-bob", day, store.Use{SpentUSD: 1, LiveSessions: 1}},
		{store.QuotaTeam, "qa", day, store.Use{SpentUSD: 1.75, LiveSessions: 3}},
		{store.QuotaUser, "usr-ghost", day, store.Use{}},
		{store.QuotaTeam, "nope", day, store.Use{}},
	} {
		if u, err := st.UseOf(ctx, c.scope, c.subject, c.day); err != nil || u != c.want {
			t.Errorf("UseOf(%s %s, %s) = %+v, %v; want %+v", c.scope, c.subject, c.day, u, err, c.want)
		}
	}

	if err := st.DeleteQuota(audited("budget.delete"), store.QuotaUser, "usr-ann"); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteQuota(ctx, store.QuotaUser, "usr-ann"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteQuota twice: %v, want ErrNotFound", err)
	}
	if qs, err := st.QuotasOf(ctx, "usr-ann"); err != nil || len(qs) != 1 || qs[0].Subject != "qa" {
		t.Errorf("QuotasOf(ann) after hers was deleted = %+v, %v; want qa's", qs, err)
	}
	es, err := st.ListAudit(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range es {
		actions = append(actions, e.Action)
	}
	if want := []string{"budget.delete", "budget.set", "budget.set"}; !slices.Equal(actions, want) {
		t.Errorf("audit log = %v, want %v (the changes', newest first; nothing of the refused ones)", actions, want)
	}
}
