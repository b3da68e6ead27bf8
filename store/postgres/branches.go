package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-dev/harvest/store"
)

// claimBranches claims the branches of a live session in tx (store's
// branches.go): a branch another session holds is a *BranchHeldError.
// ON CONFLICT DO NOTHING waits for a racing transaction that claimed the
// same branch, and does nothing once it committed: the loser reads the
// holder.
func claimBranches(ctx context.Context, tx pgx.Tx, sess *store.Session) error {
	if sess.State.Ended() {
		return nil
	}
	for _, k := range store.BranchKeys(sess) {
		tag, err := tx.Exec(ctx, `INSERT INTO branch_claims (repo, branch, session) VALUES ($1, $2, $3) ON CONFLICT (repo, branch) DO NOTHING`, k.Repo, k.Branch, sess.ID)
		if err != nil {
			return fmt.Errorf("postgres: claiming branch %s of %s: %w", k.Branch, k.Repo, err)
		}
		if tag.RowsAffected() == 1 {
			continue
		}
		var holder string
		if err := tx.QueryRow(ctx, `SELECT session FROM branch_claims WHERE repo = $1 AND branch = $2`, k.Repo, k.Branch).Scan(&holder); err != nil {
			return fmt.Errorf("postgres: reading the holder of branch %s of %s: %w", k.Branch, k.Repo, err)
		}
		if holder != sess.ID {
			return &store.BranchHeldError{Repo: k.Repo, Branch: k.Branch, Session: holder}
		}
	}
	return nil
}

// BranchSession is the live session holding branch of repo.
func (s *Store) BranchSession(ctx context.Context, repo, branch string) (string, error) {
	var id string
	err := s.pool.QueryRow(ctx, `SELECT session FROM branch_claims WHERE repo = $1 AND branch = $2`, strings.ToLower(repo), branch).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("branch %s of %s: no live session holds it: %w", branch, repo, store.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("postgres: branch %s of %s: %w", branch, repo, err)
	}
	return id, nil
}
