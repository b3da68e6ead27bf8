package sqlstore_test

import (
	"database/sql"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store/postgres"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// TestMain stops the PostgreSQL server a test started (testbin.Postgres).
func TestMain(m *testing.M) { testbin.Main(m) }

// TestSchemasAgree migrates a SQLite file and a PostgreSQL database and
// checks that their migrations describe the same tables, with the same
// columns, each of the same kind: the queries of this package are written
// once for both, so a column one migration adds and the other forgets
// would fail only in the database that lacks it.
//
// Kinds compare what the queries see, not the DDL: SQLite keeps times as
// INTEGER nanoseconds and booleans as INTEGER where PostgreSQL has
// timestamptz and boolean, and JSON as TEXT where PostgreSQL has jsonb.
func TestSchemasAgree(t *testing.T) {
	ctx := testbin.Context(t)

	path := filepath.Join(t.TempDir(), "harvest.db")
	ls, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ls.Close()
	lite, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	liteCols := map[string]string{}
	tables, err := lite.QueryContext(ctx, `SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for tables.Next() {
		var n string
		if err := tables.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if err := tables.Err(); err != nil {
		t.Fatal(err)
	}
	tables.Close()
	for _, table := range names {
		rows, err := lite.QueryContext(ctx, `SELECT name, type FROM pragma_table_info(?)`, table)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var col, typ string
			if err := rows.Scan(&col, &typ); err != nil {
				t.Fatal(err)
			}
			liteCols[table+"."+col] = liteKind(typ)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}

	url := testbin.Postgres(t)
	ps, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	ps.Close()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	pgCols := map[string]string{}
	rows, err := pool.Query(ctx, `SELECT table_name, column_name, data_type FROM information_schema.columns
WHERE table_schema = current_schema()`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var table, col, typ string
		if err := rows.Scan(&table, &col, &typ); err != nil {
			t.Fatal(err)
		}
		pgCols[table+"."+col] = pgKind(typ)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	if len(liteCols) == 0 || len(pgCols) == 0 {
		t.Fatalf("introspection found %d SQLite and %d PostgreSQL columns", len(liteCols), len(pgCols))
	}
	t.Logf("%d columns in SQLite's schema, %d in PostgreSQL's", len(liteCols), len(pgCols))
	var diffs []string
	for _, c := range slices.Sorted(maps.Keys(liteCols)) {
		switch k, ok := pgCols[c]; {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s: in SQLite's schema (%s), not in PostgreSQL's", c, liteCols[c]))
		case k != liteCols[c]:
			diffs = append(diffs, fmt.Sprintf("%s: %s in SQLite, %s in PostgreSQL", c, liteCols[c], k))
		}
	}
	for _, c := range slices.Sorted(maps.Keys(pgCols)) {
		if _, ok := liteCols[c]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: in PostgreSQL's schema (%s), not in SQLite's", c, pgCols[c]))
		}
	}
	if len(diffs) > 0 {
		t.Errorf("the two migrations describe different schemas (add the column to both, of the same kind):\n%s", strings.Join(diffs, "\n"))
	}
}

// liteKind is the kind of a SQLite column type.
func liteKind(typ string) string {
	switch strings.ToUpper(typ) {
	case "INTEGER", "INT":
		return "integer" // also times (nanoseconds) and booleans
	case "TEXT":
		return "text"
	case "BLOB":
		return "bytes"
	case "REAL":
		return "real"
	}
	return "sqlite " + typ
}

// pgKind is the kind of a PostgreSQL column type, as SQLite keeps it.
func pgKind(typ string) string {
	switch typ {
	case "bigint", "integer", "smallint", "boolean", "timestamp with time zone":
		return "integer"
	case "text", "jsonb", "character varying":
		return "text"
	case "bytea":
		return "bytes"
	case "double precision", "real":
		return "real"
	}
	return "postgres " + typ
}
