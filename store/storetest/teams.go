package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/harvest-dev/harvest/store"
)

// testTeams: teams are made once (a bad name refused), listed by name,
// given members (a missing team or user ErrNotFound, twice ErrConflict)
// and lose them; a team's deletion takes its memberships; each change
// records the context's audit entry with it, a refused one none.
func testTeams(t *testing.T, open func(t *testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	for _, u := range []*store.User{{ID: "usr-ann", Name: "Ann", Role: store.RoleMember}, {ID: "usr-bob", Name: "Bob", Role: store.RoleViewer}} {
		if err := st.CreateUser(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	audited := func(action string) context.Context {
		return store.WithAudit(ctx, &store.AuditEntry{Action: action, Channel: store.ChannelAPI, User: "usr-admin"})
	}
	if err := st.CreateTeam(audited("team.create"), &store.Team{Name: "qa", CreatedAt: base}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateTeam(ctx, &store.Team{Name: "backend"}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateTeam(ctx, &store.Team{Name: "qa"}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateTeam of a name that exists: %v, want ErrConflict", err)
	}
	for _, bad := range []string{"", "QA", "1st", "a b", "team:qa", "x2345678901234567890123456789012345678901"} {
		if err := st.CreateTeam(ctx, &store.Team{Name: bad}); err == nil {
			t.Errorf("CreateTeam(%q) stored a team whose name is not valid", bad)
		}
	}
	ts, err := st.ListTeams(ctx)
	if err != nil || len(ts) != 2 || ts[0].Name != "backend" || ts[1].Name != "qa" || !ts[1].CreatedAt.Equal(base) || ts[0].CreatedAt.IsZero() {
		t.Fatalf("ListTeams = %+v, %v; want backend, qa", ts, err)
	}

	if err := st.AddTeamMember(audited("team.add_member"), "qa", "usr-ann"); err != nil {
		t.Fatal(err)
	}
	for _, x := range [][2]string{{"qa", "usr-bob"}, {"backend", "usr-ann"}} {
		if err := st.AddTeamMember(ctx, x[0], x[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.AddTeamMember(ctx, "qa", "usr-ann"); !errors.Is(err, store.ErrConflict) {
		t.Errorf("AddTeamMember twice: %v, want ErrConflict", err)
	}
	if err := st.AddTeamMember(ctx, "nope", "usr-ann"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AddTeamMember to a missing team: %v, want ErrNotFound", err)
	}
	if err := st.AddTeamMember(audited("team.add_member"), "qa", "usr-ghost"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AddTeamMember of a missing user: %v, want ErrNotFound", err)
	}
	if m, err := st.TeamMembers(ctx, "qa"); err != nil || !slices.Equal(m, []string{"usr-ann", "usr-bob"}) {
		t.Errorf("TeamMembers(qa) = %v, %v", m, err)
	}
	if _, err := st.TeamMembers(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("TeamMembers of a missing team: %v, want ErrNotFound", err)
	}
	if m, err := st.UserTeams(ctx, "usr-ann"); err != nil || !slices.Equal(m, []string{"backend", "qa"}) {
		t.Errorf("UserTeams(ann) = %v, %v", m, err)
	}
	if m, err := st.UserTeams(ctx, "usr-ghost"); err != nil || len(m) != 0 {
		t.Errorf("UserTeams of no one = %v, %v; want none", m, err)
	}

	if err := st.RemoveTeamMember(audited("team.remove_member"), "qa", "usr-bob"); err != nil {
		t.Fatal(err)
	}
	if err := st.RemoveTeamMember(ctx, "qa", "usr-bob"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RemoveTeamMember of one not in it: %v, want ErrNotFound", err)
	}
	if m, err := st.UserTeams(ctx, "usr-bob"); err != nil || len(m) != 0 {
		t.Errorf("UserTeams(bob) after the removal = %v, %v", m, err)
	}

	if err := st.DeleteTeam(audited("team.delete"), "qa"); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteTeam(ctx, "qa"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteTeam twice: %v, want ErrNotFound", err)
	}
	if m, err := st.UserTeams(ctx, "usr-ann"); err != nil || !slices.Equal(m, []string{"backend"}) {
		t.Errorf("UserTeams(ann) after qa's deletion = %v, %v; want backend", m, err)
	}
	// A team made again with the name starts empty.
	if err := st.CreateTeam(ctx, &store.Team{Name: "qa"}); err != nil {
		t.Fatal(err)
	}
	if m, err := st.TeamMembers(ctx, "qa"); err != nil || len(m) != 0 {
		t.Errorf("a team made again with a deleted one's name has members %v, %v", m, err)
	}

	es, err := st.ListAudit(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Action)
	}
	if want := []string{"team.delete", "team.remove_member", "team.add_member", "team.create"}; !slices.Equal(got, want) {
		t.Errorf("audit log = %v, want %v (the changes', newest first; nothing of the refused one)", got, want)
	}
}
