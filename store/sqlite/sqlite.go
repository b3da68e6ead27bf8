package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlstore"
)

var _ store.Store = (*Store)(nil)

// Store is a store.Store on one SQLite file. See the package doc for the
// schema and the concurrency rules.
type Store struct {
	// Every method of store.Store and store.Copier but Close: package
	// sqlstore's, over this package's dialect and db (sqlstore.go).
	*sqlstore.Store

	path string
	w    *sql.DB // exactly one connection: all writes
	r    *sql.DB // query_only connections: all reads
	now  func() time.Time

	// Prepared once: the statements of the journal's hot path.
	hot map[string]*sql.Stmt // on r: sqlstore.Hot
	sid *sql.Stmt            // on w
	// insert[k] (on w) inserts 1<<k events: a batch is written as a sum of
	// powers of two, each a prepared statement.
	insert [insertLog + 1]*sql.Stmt
}

// busyTimeout is how long a connection waits for a lock held by another
// process before failing with SQLITE_BUSY.
const busyTimeout = 10 * time.Second

// Open opens (creating if needed) the database at path and brings its schema
// up to date.
func Open(path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("sqlite: open: empty path; give the database file, e.g. ~/.harvest/harvest.db")
	}
	// Create the file ourselves so it is 0600 (SQLite would use 0644).
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	f.Close()

	pragmas := []string{
		fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()),
		// Before the first table: a new file gives the pages event
		// retention frees back (Dialect.Reclaim); in an older file it
		// changes nothing until a VACUUM (the package doc).
		"auto_vacuum(INCREMENTAL)",
		"journal_mode(WAL)",
		"synchronous(FULL)",
		"foreign_keys(1)",
	}
	w, err := sql.Open("sqlite", dsn(path, pragmas, "immediate"))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)

	s := &Store{path: path, w: w, now: time.Now}
	// The writer connection is opened (and WAL mode set) before any reader.
	if err := s.migrate(context.Background()); err != nil {
		w.Close()
		return nil, err
	}

	// Readers need no journal or sync settings (they write nothing).
	readPragmas := []string{pragmas[0], "query_only(1)"}
	r, err := sql.Open("sqlite", dsn(path, readPragmas, ""))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	s.r = r
	if err := s.prepare(); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.Store = s.shared()
	return s, nil
}

func (s *Store) prepare() error {
	s.hot = map[string]*sql.Stmt{}
	for _, q := range sqlstore.Hot {
		st, err := s.r.Prepare(q)
		if err != nil {
			return fmt.Errorf("preparing %q: %w", q, err)
		}
		s.hot[q] = st
	}
	const sid = `SELECT sid FROM sessions WHERE id = ?`
	st, err := s.w.Prepare(sid)
	if err != nil {
		return fmt.Errorf("preparing %q: %w", sid, err)
	}
	s.sid = st
	// Prepared on the writer connection now: once a transaction holds it,
	// nothing else can be prepared on it.
	for k := range s.insert {
		st, err := s.w.Prepare(insertEvents(1 << k))
		if err != nil {
			return fmt.Errorf("preparing the insert of %d events: %w", 1<<k, err)
		}
		s.insert[k] = st
	}
	return nil
}

func dsn(path string, pragmas []string, txlock string) string {
	q := url.Values{}
	for _, p := range pragmas {
		q.Add("_pragma", p)
	}
	if txlock != "" {
		q.Set("_txlock", txlock)
	}
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// Close closes the database. Calls made after Close fail.
func (s *Store) Close() error {
	var errs []error
	sts := append([]*sql.Stmt{s.sid}, s.insert[:]...)
	for _, st := range s.hot {
		sts = append(sts, st)
	}
	for _, st := range sts {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	return errors.Join(append(errs, s.w.Close())...)
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

// write runs fn in a transaction on the writer connection (BEGIN IMMEDIATE)
// and commits it. fn's error aborts: nothing is written.
func (s *Store) write(ctx context.Context, what string, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%s: begin: %w", what, err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%s: commit: %w", what, err)
	}
	return nil
}

func code(err error) int {
	var e *sqlite.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return 0
}

// isDuplicate reports a primary key or unique constraint violation.
func isDuplicate(err error) bool {
	c := code(err)
	return c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || c == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}

// ts encodes t as nanoseconds since the epoch (0 for the zero time).
func ts(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
