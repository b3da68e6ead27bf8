package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/harvest-dev/harvest/store"
)

// claimBranches claims the branches of a live session in tx (store's
// branches.go): a branch another session holds is a *BranchHeldError.
func claimBranches(ctx context.Context, tx *sql.Tx, sess *store.Session) error {
	if sess.State.Ended() {
		return nil
	}
	for _, k := range store.BranchKeys(sess) {
		res, err := tx.ExecContext(ctx, `INSERT INTO branch_claims (repo, branch, session) VALUES (?, ?, ?) ON CONFLICT (repo, branch) DO NOTHING`, k.Repo, k.Branch, sess.ID)
		if err != nil {
			return fmt.Errorf("sqlite: claiming branch %s of %s: %w", k.Branch, k.Repo, err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			continue
		}
		var holder string
		if err := tx.QueryRowContext(ctx, `SELECT session FROM branch_claims WHERE repo = ? AND branch = ?`, k.Repo, k.Branch).Scan(&holder); err != nil {
			return fmt.Errorf("sqlite: reading the holder of branch %s of %s: %w", k.Branch, k.Repo, err)
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
	err := s.r.QueryRowContext(ctx, `SELECT session FROM branch_claims WHERE repo = ? AND branch = ?`, strings.ToLower(repo), branch).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("branch %s of %s: no live session holds it: %w", branch, repo, store.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("sqlite: branch %s of %s: %w", branch, repo, err)
	}
	return id, nil
}
