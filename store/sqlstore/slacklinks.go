package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// Slack accounts waiting to be linked (store/slack.go, "Linking a Slack
// account by hand"): the table slack_links, by the code's SHA-256.

const slackLinkCols = `hash, team, slack_user, name, created_at, expires_at`

func scanSlackLink(r Row) (*store.SlackLink, error) {
	var (
		l                store.SlackLink
		created, expires Time
	)
	if err := r.Scan(&l.Hash, &l.Team, &l.User, &l.Name, &created, &expires); err != nil {
		return nil, err
	}
	l.CreatedAt, l.ExpiresAt = created.T, expires.T
	return &l, nil
}

// CreateSlackLink stores l and drops the links that have expired.
func (s *Store) CreateSlackLink(ctx context.Context, l *store.SlackLink) error {
	if len(l.Hash) == 0 || l.Team == "" || l.User == "" || l.ExpiresAt.IsZero() {
		return s.errorf("create slack link: hash, team, user and expiry must be set")
	}
	c := *l
	if c.CreatedAt.IsZero() {
		c.CreatedAt = s.now()
	}
	err := s.write(ctx, "create slack link", func(tx Querier) error {
		if _, err := tx.Exec(ctx, `DELETE FROM slack_links WHERE expires_at <= ?`, s.d.Time(c.CreatedAt)); err != nil {
			return s.errorf("create slack link: dropping expired ones: %w", err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO slack_links (`+slackLinkCols+`) VALUES (?, ?, ?, ?, ?, ?)`,
			c.Hash, c.Team, c.User, c.Name, s.d.Time(c.CreatedAt), s.d.Time(c.ExpiresAt))
		if s.d.IsDuplicate(err) {
			return s.errorf("create slack link: it exists: %w", store.ErrConflict)
		}
		if err != nil {
			return s.errorf("create slack link: %w", err)
		}
		return nil
	})
	if err == nil {
		*l = c
	}
	return err
}

// SlackLink reads an unexpired link.
func (s *Store) SlackLink(ctx context.Context, hash []byte, now time.Time) (*store.SlackLink, error) {
	l, err := scanSlackLink(s.reader().QueryRow(ctx, `SELECT `+slackLinkCols+` FROM slack_links WHERE hash = ?`, hash))
	if isNoRows(err) || (err == nil && !l.ExpiresAt.After(now)) {
		return nil, fmt.Errorf("slack link: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, s.errorf("slack link: %w", err)
	}
	return l, nil
}

// RedeemSlackLink deletes the link and adds its identity to user: the
// DELETE ... RETURNING is the step two redeemers race on, so one gets
// it; a refusal rolls the deletion back.
func (s *Store) RedeemSlackLink(ctx context.Context, hash []byte, user string, now time.Time) (*store.SlackLink, error) {
	var out *store.SlackLink
	err := s.write(ctx, "redeem slack link", func(tx Querier) error {
		out = nil
		l, err := scanSlackLink(tx.QueryRow(ctx, `DELETE FROM slack_links WHERE hash = ? RETURNING `+slackLinkCols, hash))
		if isNoRows(err) || (err == nil && !l.ExpiresAt.After(now)) {
			return fmt.Errorf("slack link: %w", store.ErrNotFound)
		}
		if err != nil {
			return s.errorf("redeem slack link: %w", err)
		}
		var owner string
		err = tx.QueryRow(ctx, `SELECT user_id FROM identities WHERE kind = ? AND issuer = ? AND subject = ?`,
			store.IdentitySlack, l.Team, l.User).Scan(&owner)
		switch {
		case err == nil && owner != user:
			return fmt.Errorf("the Slack account %s of team %s is user %s's: %w", l.User, l.Team, owner, store.ErrConflict)
		case err == nil: // user's already: the link is used up
		case !isNoRows(err):
			return s.errorf("redeem slack link: %w", err)
		default:
			i := &store.Identity{User: user, Kind: store.IdentitySlack, Issuer: l.Team, Subject: l.User, Login: l.Name}
			if err := s.insertIdentity(ctx, tx, i); err != nil {
				return s.errorf("redeem slack link: %w", err)
			}
		}
		out = l
		return s.auditIn(ctx, tx)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RemoveIdentity takes an identity from its user, with the context's
// audit entry.
func (s *Store) RemoveIdentity(ctx context.Context, user, kind, issuer, subject string) error {
	return s.write(ctx, "remove identity", func(tx Querier) error {
		n, err := tx.Exec(ctx, `DELETE FROM identities WHERE user_id = ? AND kind = ? AND issuer = ? AND subject = ?`, user, kind, issuer, subject)
		if err != nil {
			return s.errorf("remove identity: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("user %s has no %s identity %s: %w", user, kind, subject, store.ErrNotFound)
		}
		return s.auditIn(ctx, tx)
	})
}
