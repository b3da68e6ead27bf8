package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlstore"
)

var (
	_ store.Store  = (*Store)(nil)
	_ store.Copier = (*Store)(nil)
)

// Store is a store.Store on a PostgreSQL database. See the package doc for
// the schema, the isolation level and how seqs are allocated.
type Store struct {
	// The methods written once for both databases (package sqlstore).
	*sqlstore.Store

	pool pgPool
	// where names the server and database (never the password) in errors.
	where string
	now   func() time.Time
}

// connectTimeout bounds Open's first connection when the URL sets no
// connect_timeout: a server that does not answer is reported, not waited
// for.
const connectTimeout = 10 * time.Second

// Open connects to the database at rawURL (postgres://user:password@host:port/db?sslmode=...,
// or postgresql://...), checks that it answers, and brings its schema up to
// date (see the package doc: migrations under an advisory lock).
func Open(ctx context.Context, rawURL string) (*Store, error) {
	cfg, where, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	pp, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", where, err)
	}
	pool := pgPool{pp}
	s := &Store{pool: pool, where: where, now: func() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }}
	s.Store = s.shared()
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, unreachable(where, cfg.ConnConfig, err)
	}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// parseURL validates rawURL and makes the pool's configuration, and a
// description of the server for errors.
func parseURL(rawURL string) (*pgxpool.Config, string, error) {
	const example = "postgres://USER:PASSWORD@HOST:5432/DATABASE?sslmode=require"
	if strings.TrimSpace(rawURL) == "" {
		return nil, "", fmt.Errorf("postgres: empty database URL; give one like %s", example)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// url's error quotes the URL, password and all.
		return nil, "", fmt.Errorf("postgres: the database URL does not parse as a URL; give one like %s", example)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, "", fmt.Errorf("postgres: database URL scheme %q: want postgres:// or postgresql://, like %s", u.Scheme, example)
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" {
		return nil, "", fmt.Errorf("postgres: the database URL names no database: add it as the path, like %s", example)
	}
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		// pgx's parse errors may quote the URL: say what is wrong, not it.
		var pe *pgconn.ParseConfigError
		msg := err.Error()
		if errors.As(err, &pe) && pe.Unwrap() != nil {
			msg = pe.Unwrap().Error()
		}
		return nil, "", fmt.Errorf("postgres: the database URL of %s: %s; want one like %s", redact(u), msg, example)
	}
	cc := cfg.ConnConfig
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = connectTimeout
	}
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	if _, ok := cc.RuntimeParams["application_name"]; !ok {
		cc.RuntimeParams["application_name"] = "harvest"
	}
	cc.RuntimeParams["timezone"] = "UTC"
	return cfg, fmt.Sprintf("database %s on %s", cc.Database, hostPort(cc)), nil
}

// redact is u without its password.
func redact(u *url.URL) string {
	c := *u
	if c.User != nil {
		c.User = url.User(c.User.Username())
	}
	c.RawQuery = ""
	return c.String()
}

func hostPort(cc *pgx.ConnConfig) string {
	if strings.HasPrefix(cc.Host, "/") {
		return fmt.Sprintf("the unix socket in %s (port %d)", cc.Host, cc.Port)
	}
	return net.JoinHostPort(cc.Host, fmt.Sprint(cc.Port))
}

// unreachable explains a failed first connection: which server, and what
// to check.
func unreachable(where string, cc *pgx.ConnConfig, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "28P01", "28000":
			return fmt.Errorf("postgres: %s refused user %q: check the user and password in the URL, and the server's pg_hba.conf: %w", where, cc.User, err)
		case "3D000":
			return fmt.Errorf("postgres: %s does not exist: create it (createdb %s) or fix the URL's path: %w", where, cc.Database, err)
		}
		return fmt.Errorf("postgres: %s: %w", where, err)
	}
	return fmt.Errorf("postgres: cannot reach %s: check that PostgreSQL runs there, that the host and port in the URL are right, and that this machine may connect (firewall, listen_addresses, pg_hba.conf): %w", where, err)
}

// Close closes the pool's connections. Calls made after Close fail.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// rollbackTimeout bounds the rollback of a write whose function failed
// (it runs even when the caller's context has ended).
const rollbackTimeout = 5 * time.Second

// maxAttempts bounds the retries of a transaction PostgreSQL aborted as a
// deadlock or a serialization failure.
const maxAttempts = 5

// write runs fn in a READ COMMITTED transaction and commits it. fn's error
// aborts: nothing is written. A transaction aborted by a deadlock or a
// serialization failure (40P01, 40001) is run again from the start, up to
// maxAttempts times, so fn must have no effect outside tx. UpdateSession
// and UpdateEnvironment, whose callers' functions are called once, use
// attempt instead (they hold one row lock, so they cannot deadlock).
func (s *Store) write(ctx context.Context, what string, fn func(tx pgx.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := s.attempt(ctx, what, fn)
		if s.pool.lost(err) {
			// The connection broke in the transaction (a commit cut off
			// may have committed: not run again).
			return unavailable(err)
		}
		if err == nil || !retryable(err) || attempt == maxAttempts || ctx.Err() != nil {
			return err
		}
	}
}

// attempt is one try of write: fn's error is returned as it is (fn phrases
// its own), begin's and commit's are named.
func (s *Store) attempt(ctx context.Context, what string, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return fmt.Errorf("postgres: %s: begin: %w", what, err)
	}
	if err := fn(tx); err != nil {
		// A rollback that fails leaves nothing committed either: pgx
		// closes the connection and the server aborts the transaction.
		// Bounded: a server that hangs must not hold the call forever.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		_ = tx.Rollback(rctx)
		cancel()
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: %s: commit: %w", what, err)
	}
	return nil
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func retryable(err error) bool {
	c := pgCode(err)
	return c == "40001" || c == "40P01"
}

// isDuplicate reports a unique or primary key violation.
func isDuplicate(err error) bool { return pgCode(err) == "23505" }

// isMissingParent reports a foreign key violation: what a row refers to
// (a session) is gone.
func isMissingParent(err error) bool { return pgCode(err) == "23503" }

// ts is t for a timestamptz column: NULL for the zero time.
func ts(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}
