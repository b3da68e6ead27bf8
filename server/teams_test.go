package server_test

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
)

// TestTeams: an admin makes teams, puts users in them and takes them out
// (GET /v1/teams shows the members); mistakes get 400, 404 or 409 saying
// what was wrong; a user token gets 403; each change, and each refused
// one, is in the audit log with the team as its target.
func TestTeams(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	alice, bob := store.UserIDForToken(e.AliceID), store.UserIDForToken(e.BobID)
	status := func(err error) int {
		var ce *client.Error
		if errors.As(err, &ce) {
			return ce.Status
		}
		return 0
	}

	if _, err := e.AdminC.CreateTeam(ctx, "backend"); err != nil {
		t.Fatal(err)
	}
	if tm, err := e.AdminC.CreateTeam(ctx, "qa"); err != nil || tm.Name != "qa" || tm.Members == nil || len(tm.Members) != 0 {
		t.Fatalf("CreateTeam(qa) = %+v, %v", tm, err)
	}
	for _, u := range []string{alice, bob} {
		if err := e.AdminC.AddTeamMember(ctx, "backend", u); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.AdminC.AddTeamMember(ctx, "qa", bob); err != nil {
		t.Fatal(err)
	}
	ts, err := e.AdminC.ListTeams(ctx)
	if err != nil || len(ts) != 2 || ts[0].Name != "backend" || !slices.Equal(ts[0].Members, sorted(alice, bob)) || !slices.Equal(ts[1].Members, []string{bob}) {
		t.Fatalf("ListTeams = %+v, %v", ts, err)
	}

	for _, c := range []struct {
		what   string
		err    error
		status int
		says   string
	}{
		{"a bad name", func() error { _, err := e.AdminC.CreateTeam(ctx, "Back End"); return err }(), 400, "lower-case"},
		{"a name that exists", func() error { _, err := e.AdminC.CreateTeam(ctx, "qa"); return err }(), 409, "exists"},
		{"a member twice", e.AdminC.AddTeamMember(ctx, "qa", bob), 409, "already"},
		{"a missing user", e.AdminC.AddTeamMember(ctx, "qa", "usr-nobody"), 404, "usr-nobody"},
		{"a missing team", e.AdminC.AddTeamMember(ctx, "ops", bob), 404, "team ops"},
		{"not a user id", e.AdminC.AddTeamMember(ctx, "qa", "bob"), 400, "user's id"},
		{"one not in the team", e.AdminC.RemoveTeamMember(ctx, "qa", alice), 404, "not in team qa"},
		{"a user token", func() error { _, err := e.AliceC.CreateTeam(ctx, "mine"); return err }(), 403, "admin token"},
		{"a user token lists", func() error { _, err := e.AliceC.ListTeams(ctx); return err }(), 403, "admin token"},
	} {
		if status(c.err) != c.status || !strings.Contains(c.err.Error(), c.says) {
			t.Errorf("%s: %v, want %d saying %q", c.what, c.err, c.status, c.says)
		}
	}
	if s, info, _ := e.doRaw(http.MethodDelete, "/v1/teams/NOPE", "Bearer "+e.Admin, "", nil); s != 404 || !strings.Contains(info.Message, "not a team's name") {
		t.Errorf("DELETE a bad team name: %d %+v", s, info)
	}

	if err := e.AdminC.RemoveTeamMember(ctx, "backend", alice); err != nil {
		t.Fatal(err)
	}
	if err := e.AdminC.DeleteTeam(ctx, "qa"); err != nil {
		t.Fatal(err)
	}
	if err := e.AdminC.DeleteTeam(ctx, "qa"); status(err) != 404 {
		t.Errorf("deleting qa twice: %v, want 404", err)
	}
	if m, err := e.Store.UserTeams(ctx, bob); err != nil || !slices.Equal(m, []string{"backend"}) {
		t.Errorf("bob's teams after qa's deletion: %v, %v", m, err)
	}

	es, err := e.Store.ListAudit(ctx, store.AuditFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, a := range es {
		if strings.HasPrefix(a.Action, "team.") {
			got[a.Action+" "+a.Target+" "+a.Result]++
		}
	}
	for k, n := range map[string]int{
		"team.create backend ok": 1, "team.create qa ok": 1, "team.create qa conflict": 1, "team.add_member backend ok": 2,
		"team.add_member qa ok": 1, "team.add_member qa conflict": 1, "team.add_member qa not_found": 1, "team.add_member ops not_found": 1,
		"team.remove_member backend ok": 1, "team.remove_member qa not_found": 1, "team.delete qa ok": 1, "team.delete qa not_found": 1,
	} {
		if got[k] != n {
			t.Errorf("audit log: %d of %q, want %d (all: %v)", got[k], k, n, got)
		}
	}
}

func sorted(s ...string) []string { slices.Sort(s); return s }
