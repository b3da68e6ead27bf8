package sqlstore

import (
	"context"
	"fmt"

	"github.com/harvest-dev/harvest/store"
)

// Teams (store/teams.go): two tables, teams and team_members, whose rows
// go with their team or user (ON DELETE CASCADE).

func scanTeam(r Row) (*store.Team, error) {
	var (
		t       store.Team
		created Time
	)
	if err := r.Scan(&t.Name, &created); err != nil {
		return nil, err
	}
	t.CreatedAt = created.T
	return &t, nil
}

// CreateTeam stores t, with the context's audit entry.
func (s *Store) CreateTeam(ctx context.Context, t *store.Team) error {
	if err := store.CheckTeamName(t.Name); err != nil {
		return s.errorf("create team: %w", err)
	}
	c := *t
	if c.CreatedAt.IsZero() {
		c.CreatedAt = s.now()
	}
	err := s.write(ctx, "create team "+t.Name, func(tx Querier) error {
		_, err := tx.Exec(ctx, `INSERT INTO teams (name, created_at) VALUES (?, ?)`, c.Name, s.d.Time(c.CreatedAt))
		if s.d.IsDuplicate(err) {
			return fmt.Errorf("team %s exists: %w", c.Name, store.ErrConflict)
		}
		if err != nil {
			return s.errorf("create team %s: %w", c.Name, err)
		}
		return s.auditIn(ctx, tx)
	})
	if err == nil {
		*t = c
	}
	return err
}

// ListTeams lists every team, by name.
func (s *Store) ListTeams(ctx context.Context) ([]*store.Team, error) {
	rows, err := s.reader().Query(ctx, `SELECT name, created_at FROM teams ORDER BY name`)
	out, err := collect(rows, err, scanTeam)
	if err != nil {
		return nil, s.errorf("list teams: %w", err)
	}
	return out, nil
}

// DeleteTeam removes a team; its memberships go with it.
func (s *Store) DeleteTeam(ctx context.Context, name string) error {
	return s.write(ctx, "delete team "+name, func(tx Querier) error {
		// Explicitly, not only by the cascade: SQLite enforces foreign
		// keys per connection, and the memberships must go whatever the
		// connection's setting.
		if _, err := tx.Exec(ctx, `DELETE FROM team_members WHERE team = ?`, name); err != nil {
			return s.errorf("delete team %s: its members: %w", name, err)
		}
		n, err := tx.Exec(ctx, `DELETE FROM teams WHERE name = ?`, name)
		if err != nil {
			return s.errorf("delete team %s: %w", name, err)
		}
		if n == 0 {
			return fmt.Errorf("team %s: %w", name, store.ErrNotFound)
		}
		return s.auditIn(ctx, tx)
	})
}

// exists says whether query (SELECT 1 ... WHERE key = ?) finds a row.
func exists(ctx context.Context, tx Querier, query, key string) (bool, error) {
	var one int
	err := tx.QueryRow(ctx, query, key).Scan(&one)
	if isNoRows(err) {
		return false, nil
	}
	return err == nil, err
}

// AddTeamMember puts user in team.
func (s *Store) AddTeamMember(ctx context.Context, team, user string) error {
	return s.write(ctx, "add "+user+" to team "+team, func(tx Querier) error {
		// Each parent looked for, so the error says which is missing.
		for _, p := range []struct{ what, query, key string }{
			{"team", `SELECT 1 FROM teams WHERE name = ?`, team},
			{"user", `SELECT 1 FROM users WHERE id = ?`, user},
		} {
			ok, err := exists(ctx, tx, p.query+s.d.Lock(LockShare), p.key)
			if err != nil {
				return s.errorf("add %s to team %s: %w", user, team, err)
			}
			if !ok {
				return fmt.Errorf("%s %s: %w", p.what, p.key, store.ErrNotFound)
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO team_members (team, user_id) VALUES (?, ?)`, team, user)
		switch {
		case s.d.IsDuplicate(err):
			return fmt.Errorf("user %s is in team %s already: %w", user, team, store.ErrConflict)
		case s.d.IsMissingParent(err):
			return fmt.Errorf("team %s or user %s: %w", team, user, store.ErrNotFound)
		case err != nil:
			return s.errorf("add %s to team %s: %w", user, team, err)
		}
		return s.auditIn(ctx, tx)
	})
}

// RemoveTeamMember takes user out of team.
func (s *Store) RemoveTeamMember(ctx context.Context, team, user string) error {
	return s.write(ctx, "remove "+user+" from team "+team, func(tx Querier) error {
		n, err := tx.Exec(ctx, `DELETE FROM team_members WHERE team = ? AND user_id = ?`, team, user)
		if err != nil {
			return s.errorf("remove %s from team %s: %w", user, team, err)
		}
		if n == 0 {
			return fmt.Errorf("user %s is not in team %s: %w", user, team, store.ErrNotFound)
		}
		return s.auditIn(ctx, tx)
	})
}

func scanString(r Row) (*string, error) {
	var v string
	if err := r.Scan(&v); err != nil {
		return nil, err
	}
	return &v, nil
}

func deref(in []*string) []string {
	out := make([]string, len(in))
	for i, p := range in {
		out[i] = *p
	}
	return out
}

// TeamMembers lists the ids of a team's users.
func (s *Store) TeamMembers(ctx context.Context, team string) ([]string, error) {
	q := s.reader()
	ok, err := exists(ctx, q, `SELECT 1 FROM teams WHERE name = ?`, team)
	if err != nil {
		return nil, s.errorf("members of team %s: %w", team, err)
	}
	if !ok {
		return nil, fmt.Errorf("team %s: %w", team, store.ErrNotFound)
	}
	rows, err := q.Query(ctx, `SELECT user_id FROM team_members WHERE team = ? ORDER BY user_id`, team)
	out, err := collect(rows, err, scanString)
	if err != nil {
		return nil, s.errorf("members of team %s: %w", team, err)
	}
	return deref(out), nil
}

// UserTeams lists the names of a user's teams.
func (s *Store) UserTeams(ctx context.Context, user string) ([]string, error) {
	rows, err := s.reader().Query(ctx, `SELECT team FROM team_members WHERE user_id = ? ORDER BY team`, user)
	out, err := collect(rows, err, scanString)
	if err != nil {
		return nil, s.errorf("teams of %s: %w", user, err)
	}
	return deref(out), nil
}
