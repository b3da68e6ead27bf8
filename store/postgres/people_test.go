package postgres

import (
	"slices"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store/storetest"
)

// TestMigrationPeople: a database written at the schema version before
// users (storetest.PeopleSeed's rows) upgrades with every token working
// as the user it became and every session owned by the matching user.
func TestMigrationPeople(t *testing.T) {
	i := slices.IndexFunc(migrations, func(m migration) bool { return m.name == "people" })
	if i < 0 {
		t.Fatal("no migration named people")
	}
	url := testbin.Postgres(t)
	ctx := testbin.Context(t)
	all := migrations
	migrations = all[:i]
	s, err := Open(ctx, url)
	migrations = all
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	p := pool(t, url)
	at := func(sec int) time.Time { return time.Unix(1_700_000_000+int64(sec), 0).UTC() }
	for _, tok := range []struct {
		id, name string
		admin    bool
	}{{"tok-aaa", "root", true}, {"tok-bbb", "ci", false}, {"tok-nnn", "node:n1", true}} {
		if _, err := p.Exec(ctx, `INSERT INTO tokens (id, name, hash, admin, created_at) VALUES ($1, $2, $3, $4, $5)`,
			tok.id, tok.name, storetest.SeedHash(storetest.PeopleSeed.Secrets[tok.id]), tok.admin, at(0)); err != nil {
			t.Fatal(err)
		}
	}
	for i, sess := range []struct{ id, owner, github string }{
		{"s-a1", "tok-aaa", ""}, {"s-b1", "tok-bbb", ""}, {"s-b2", "tok-bbb", ""}, {"s-gone", "tok-gone", ""},
		{"s-gh1", "github", `{"repo":"o/r","number":1,"requester":"octo","requester_id":7}`},
		{"s-gh2", "github", `{"repo":"o/r","number":2,"requester":"octo-renamed","requester_id":7}`},
		{"s-gh3", "github", `{"repo":"o/r","number":3,"requester":"old"}`},
	} {
		var gh any
		if sess.github != "" {
			gh = sess.github
		}
		if _, err := p.Exec(ctx, `INSERT INTO sessions (id, owner, state, created_at, updated_at, github) VALUES ($1, $2, 'idle', $3, $3, $4)`,
			sess.id, sess.owner, at(i+1), gh); err != nil {
			t.Fatal(err)
		}
	}

	storetest.MigratedPeople(t, open(t, url))
}

func BenchmarkTokenByHash(b *testing.B) {
	storetest.BenchmarkTokenByHash(b, open(b, testbin.Postgres(b)), 1000)
}
