package sqlstore

import (
	"context"
	"fmt"
	"math"

	"github.com/harvest-dev/harvest/store"
)

// Budgets (store/budgets.go): budgets, one row per subject (scope,
// subject), and spend, one row per user and day whose usd grows by
// AddSpend's upsert. A budget's subject is checked to exist when it is
// set; a user's or team's removal leaves its budget row, which nothing
// reads again (a team of the same name made later gets it back — the
// admin sees it in harvest team budget show).

const quotaCols = `scope, subject, daily_usd, max_sessions, updated_at`

func scanQuota(r Row) (*store.Quota, error) {
	var (
		b       store.Quota
		updated Time
	)
	if err := r.Scan(&b.Scope, &b.Subject, &b.DailyUSD, &b.MaxSessions, &updated); err != nil {
		return nil, err
	}
	b.UpdatedAt = updated.T
	return &b, nil
}

// SetQuota stores b, with the context's audit entry.
func (s *Store) SetQuota(ctx context.Context, b *store.Quota) error {
	if err := b.Check(); err != nil {
		return s.errorf("set budget: %w", err)
	}
	c := *b
	if c.UpdatedAt.IsZero() {
		c.UpdatedAt = s.now()
	}
	err := s.write(ctx, "set the budget of "+c.Scope+" "+c.Subject, func(tx Querier) error {
		parent := `SELECT 1 FROM users WHERE id = ?`
		if c.Scope == store.QuotaTeam {
			parent = `SELECT 1 FROM teams WHERE name = ?`
		}
		ok, err := exists(ctx, tx, parent+s.d.Lock(LockShare), c.Subject)
		if err != nil {
			return s.errorf("set the budget of %s %s: %w", c.Scope, c.Subject, err)
		}
		if !ok {
			return fmt.Errorf("%s %s: %w", c.Scope, c.Subject, store.ErrNotFound)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO quotas (`+quotaCols+`) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (scope, subject) DO UPDATE SET daily_usd = excluded.daily_usd, max_sessions = excluded.max_sessions, updated_at = excluded.updated_at`,
			c.Scope, c.Subject, c.DailyUSD, c.MaxSessions, s.d.Time(c.UpdatedAt)); err != nil {
			return s.errorf("set the budget of %s %s: %w", c.Scope, c.Subject, err)
		}
		return s.auditIn(ctx, tx)
	})
	if err == nil {
		*b = c
	}
	return err
}

// GetQuota reads a subject's budget.
func (s *Store) GetQuota(ctx context.Context, scope, subject string) (*store.Quota, error) {
	b, err := scanQuota(s.reader().QueryRow(ctx, `SELECT `+quotaCols+` FROM quotas WHERE scope = ? AND subject = ?`, scope, subject))
	if isNoRows(err) {
		return nil, fmt.Errorf("%s %s has no budget: %w", scope, subject, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.errorf("get the budget of %s %s: %w", scope, subject, err)
	}
	return b, nil
}

// DeleteQuota removes a subject's budget.
func (s *Store) DeleteQuota(ctx context.Context, scope, subject string) error {
	return s.write(ctx, "delete the budget of "+scope+" "+subject, func(tx Querier) error {
		n, err := tx.Exec(ctx, `DELETE FROM quotas WHERE scope = ? AND subject = ?`, scope, subject)
		if err != nil {
			return s.errorf("delete the budget of %s %s: %w", scope, subject, err)
		}
		if n == 0 {
			return fmt.Errorf("%s %s has no budget: %w", scope, subject, store.ErrNotFound)
		}
		return s.auditIn(ctx, tx)
	})
}

// QuotasOf lists the user's budget and their teams', in one query.
func (s *Store) QuotasOf(ctx context.Context, user string) ([]*store.Quota, error) {
	rows, err := s.reader().Query(ctx, `SELECT `+quotaCols+` FROM quotas
WHERE (scope = 'user' AND subject = ?)
   OR (scope = 'team' AND subject IN (SELECT team FROM team_members WHERE user_id = ?))
ORDER BY scope DESC, subject`, user, user)
	out, err := collect(rows, err, scanQuota)
	if err != nil {
		return nil, s.errorf("budgets of %s: %w", user, err)
	}
	return out, nil
}

// AddSpend adds usd to the user's spend on day.
func (s *Store) AddSpend(ctx context.Context, user, day string, usd float64) error {
	if math.IsNaN(usd) || usd < 0 || math.IsInf(usd, 0) {
		return s.errorf("add spend of %s: %v is not an amount to add", user, usd)
	}
	if usd == 0 {
		return nil
	}
	return s.write(ctx, "add the spend of "+user, func(tx Querier) error {
		if _, err := tx.Exec(ctx, `INSERT INTO spend (user_id, day, usd) VALUES (?, ?, ?)
ON CONFLICT (user_id, day) DO UPDATE SET usd = spend.usd + excluded.usd`, user, day, usd); err != nil {
			return s.errorf("add the spend of %s on %s: %w", user, day, err)
		}
		return nil
	})
}

// liveStates is the SQL list of State.Live states.
const liveStates = `('pending', 'provisioning', 'idle', 'working', 'waiting', 'cancelling')`

// UseOf is a subject's spend on day and its live sessions.
func (s *Store) UseOf(ctx context.Context, scope, subject, day string) (store.Use, error) {
	var (
		u     store.Use
		users = `?`
	)
	if scope == store.QuotaTeam {
		users = `SELECT user_id FROM team_members WHERE team = ?`
	}
	err := s.reader().QueryRow(ctx, `SELECT
	(SELECT COALESCE(SUM(usd), 0) FROM spend WHERE day = ? AND user_id IN (`+users+`)),
	(SELECT COUNT(*) FROM sessions WHERE state IN `+liveStates+` AND user_id IN (`+users+`))`,
		day, subject, subject).Scan(&u.SpentUSD, &u.LiveSessions)
	if err != nil {
		return store.Use{}, s.errorf("what %s %s uses: %w", scope, subject, err)
	}
	return u, nil
}

// DumpQuotas lists every budget (store.Copier).
func (s *Store) DumpQuotas(ctx context.Context) ([]*store.Quota, error) {
	rows, err := s.reader().Query(ctx, `SELECT `+quotaCols+` FROM quotas ORDER BY scope, subject`)
	out, err := collect(rows, err, scanQuota)
	if err != nil {
		return nil, s.errorf("list budgets: %w", err)
	}
	return out, nil
}

// DumpSpend lists every user's spend of every day (store.Copier).
func (s *Store) DumpSpend(ctx context.Context) ([]store.Spend, error) {
	rows, err := s.reader().Query(ctx, `SELECT user_id, day, usd FROM spend ORDER BY user_id, day`)
	out, err := collect(rows, err, func(r Row) (*store.Spend, error) {
		var sp store.Spend
		return &sp, r.Scan(&sp.User, &sp.Day, &sp.USD)
	})
	if err != nil {
		return nil, s.errorf("list spend: %w", err)
	}
	return values(out), nil
}
