package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/postgres"
	"github.com/harvest-dev/harvest/store/sqlite"
)

const storeHelp = "where the server keeps its state: a postgres:// or postgresql:// URL selects PostgreSQL (several servers may share it; keep the password out of the command line with $PGPASSWORD or ~/.pgpass); default $HARVEST_STORE, else SQLite in DATA/harvest.db"

const storeTimeoutHelp = "how long an API request waits for the store (each call, and a send's commit) before it answers 503 with Retry-After, instead of hanging while the database does not answer; the sessions' own writes wait for it as long as it takes"

// checkStoreFlag validates --store before anything is started: empty (the
// SQLite file of the data directory) or a PostgreSQL URL.
func checkStoreFlag(v string) error {
	if v == "" || isPostgresURL(v) {
		return nil
	}
	// Only the scheme is quoted: the rest may hold a password.
	scheme := "no scheme"
	if u, err := url.Parse(v); err == nil && u.Scheme != "" {
		scheme = "scheme " + u.Scheme
	}
	return fmt.Errorf("--store (%s): give a postgres://USER@HOST:5432/DATABASE URL for PostgreSQL, or leave it out for SQLite in the data directory", scheme)
}

func isPostgresURL(v string) bool {
	return strings.HasPrefix(v, "postgres://") || strings.HasPrefix(v, "postgresql://")
}

// openServerStore opens harvest serve's store: PostgreSQL at the URL v, or
// (v empty) SQLite in the data directory, claimed (sqlite.Claim) until
// closed, so that harvest store migrate does not copy it while it runs
// (and a second server on the same file is refused).
func openServerStore(ctx context.Context, v, data string) (store.Store, error) {
	if isPostgresURL(v) {
		st, err := postgres.Open(ctx, v)
		if err != nil {
			return nil, fmt.Errorf("--store: %w", err)
		}
		return st, nil
	}
	path := filepath.Join(data, "harvest.db")
	release, err := sqlite.Claim(path)
	if err != nil {
		return nil, err
	}
	st, err := sqlite.Open(path)
	if err != nil {
		release()
		return nil, err
	}
	return claimedStore{st, release}, nil
}

// claimedStore is a SQLite store whose claim Close releases.
type claimedStore struct {
	*sqlite.Store
	release func() error
}

func (s claimedStore) Close() error { return errors.Join(s.Store.Close(), s.release()) }
