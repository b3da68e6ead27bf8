package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// migrationFS holds the numbered migrations, NNNN_name.sql. Never edit one
// that has shipped: add the next.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// migrations are the embedded migrations in order; version i is at index
// i-1 (the numbers must run 1, 2, 3, ... with no gap).
var migrations = mustLoad(migrationFS)

func mustLoad(fsys fs.FS) []migration {
	ms, err := loadMigrations(fsys)
	if err != nil {
		panic(err)
	}
	return ms
}

func loadMigrations(fsys fs.FS) ([]migration, error) {
	files, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []migration
	for i, f := range files {
		base := strings.TrimSuffix(path.Base(f), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v != i+1 {
			return nil, fmt.Errorf("postgres: migration %s: want the name %04d_NAME.sql (numbered from 1 without gaps)", f, i+1)
		}
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: name, sql: string(b)})
	}
	return out, nil
}

// migrateLockID is the pg_advisory_xact_lock key that serialises migrations
// of one database (the bytes of "harvest!" as a big-endian int64). Advisory
// locks are per database, so two harvest databases on one server do not
// wait for each other.
const migrateLockID int64 = 0x6861727665737421

// migrate applies the migrations the database has not seen, all in one
// transaction that first takes migrateLockID: nodes starting together
// queue there, and each after the first finds the work done. Either the
// schema is brought fully up to date or it is left as it was.
func (s *Store) migrate(ctx context.Context) error {
	return s.attempt(ctx, "migrate "+s.where, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrateLockID); err != nil {
			return fmt.Errorf("postgres: %s: taking the migration lock: %w", s.where, err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    integer PRIMARY KEY,
	name       text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
			return fmt.Errorf("postgres: %s: creating schema_migrations (may the user create tables in the database's schema?): %w", s.where, err)
		}
		rows, err := tx.Query(ctx, `SELECT version FROM schema_migrations`)
		if err != nil {
			return fmt.Errorf("postgres: %s: reading the applied migrations: %w", s.where, err)
		}
		done, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return fmt.Errorf("postgres: %s: reading the applied migrations: %w", s.where, err)
		}
		have := map[int]bool{}
		for _, v := range done {
			have[v] = true
			if v > len(migrations) {
				return fmt.Errorf("postgres: %s has schema version %d but this harvest knows only up to %d: it was written by a newer harvest; upgrade harvest", s.where, v, len(migrations))
			}
		}
		for _, m := range migrations {
			if have[m.version] {
				continue
			}
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("postgres: %s: migration %d (%s): %w", s.where, m.version, m.name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
				return fmt.Errorf("postgres: %s: recording migration %d: %w", s.where, m.version, err)
			}
		}
		return nil
	})
}
