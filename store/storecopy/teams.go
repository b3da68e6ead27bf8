package storecopy

import (
	"context"
	"fmt"

	"github.com/harvest-dev/harvest/store"
)

// Teams (store/teams.go) are copied after the users they hold: each team
// (CreateTeam keeps its creation time), then its members
// (AddTeamMember).

func copyTeams(ctx context.Context, from, to store.Store) (int, error) {
	ts, err := from.ListTeams(ctx)
	if err != nil {
		return 0, err
	}
	for _, t := range ts {
		c := *t
		if err := to.CreateTeam(ctx, &c); err != nil {
			return 0, err
		}
		ms, err := from.TeamMembers(ctx, t.Name)
		if err != nil {
			return 0, err
		}
		for _, u := range ms {
			if err := to.AddTeamMember(ctx, t.Name, u); err != nil {
				return 0, fmt.Errorf("team %s: %w", t.Name, err)
			}
		}
	}
	return len(ts), nil
}

// takeTeams tallies the teams (by name) and their memberships.
func takeTeams(ctx context.Context, st store.Store, teams, members *tally) error {
	ts, err := st.ListTeams(ctx)
	if err != nil {
		return fmt.Errorf("teams: %w", err)
	}
	for _, t := range ts {
		c := *t
		c.CreatedAt = us(c.CreatedAt)
		if err := teams.add(c); err != nil {
			return err
		}
		ms, err := st.TeamMembers(ctx, t.Name)
		if err != nil {
			return fmt.Errorf("members of team %s: %w", t.Name, err)
		}
		for _, u := range ms {
			if err := members.add([2]string{t.Name, u}); err != nil {
				return err
			}
		}
	}
	return nil
}
