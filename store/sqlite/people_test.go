package sqlite

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/harvest-dev/harvest/store/storetest"
)

// TestMigrationPeople: a database written at the schema version before
// users (storetest.PeopleSeed's rows) upgrades with every token working
// as the user it became and every session owned by the matching user.
func TestMigrationPeople(t *testing.T) {
	i := slices.IndexFunc(migrations, func(m struct{ name, sql string }) bool { return m.name == "people" })
	if i < 0 {
		t.Fatal("no migration named people")
	}
	all := migrations
	migrations = all[:i]
	path := filepath.Join(t.TempDir(), "harvest.db")
	s, err := Open(path)
	migrations = all
	if err != nil {
		t.Fatal(err)
	}
	ns := func(sec int) int64 { return 1_700_000_000_000_000_000 + int64(sec)*1_000_000_000 }
	for _, tok := range []struct {
		id, name string
		admin    int
	}{{"tok-aaa", "root", 1}, {"tok-bbb", "ci", 0}, {"tok-nnn", "node:n1", 1}} {
		if _, err := s.w.Exec(`INSERT INTO tokens (id, name, hash, admin, created_at) VALUES (?, ?, ?, ?, ?)`,
			tok.id, tok.name, storetest.SeedHash(storetest.PeopleSeed.Secrets[tok.id]), tok.admin, ns(0)); err != nil {
			t.Fatal(err)
		}
	}
	for i, sess := range []struct{ id, owner, github string }{
		{"s-a1", "tok-aaa", ""}, {"s-b1", "tok-bbb", ""}, {"s-b2", "tok-bbb", ""}, {"s-gone", "tok-gone", ""},
		{"s-gh1", "github", `{"repo":"o/r","number":1,"requester":"octo","requester_id":7}`},
		{"s-gh2", "github", `{"repo":"o/r","number":2,"requester":"octo-renamed","requester_id":7}`},
		{"s-gh3", "github", `{"repo":"o/r","number":3,"requester":"old"}`},
	} {
		if _, err := s.w.Exec(`INSERT INTO sessions (id, owner, state, created_at, updated_at, github) VALUES (?, ?, 'idle', ?, ?, ?)`,
			sess.id, sess.owner, ns(i+1), ns(i+1), sess.github); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()

	storetest.MigratedPeople(t, open(t, path))
}

func BenchmarkTokenByHash(b *testing.B) {
	storetest.BenchmarkTokenByHash(b, open(b, filepath.Join(b.TempDir(), "harvest.db")), 1000)
}
