package storetest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/harvest-dev/harvest/store"
)

// PeopleSeed describes the rows a migration test writes at the schema
// version before people (with the SQL of that version: the store's
// methods write the columns the migration adds) for MigratedPeople to
// check after the upgrade. Secrets are the tokens' secrets; their rows
// hold sha256 of each.
//
//	tokens   tok-aaa "root" admin (secret-a), tok-bbb "ci" (secret-b),
//	         tok-nnn "node:n1" admin (secret-n)
//	sessions s-a1 of tok-aaa; s-b1, s-b2 of tok-bbb; s-gone of tok-gone
//	         (a deleted token); s-gh1 and, newer, s-gh2 of "github" with
//	         github {"requester":"octo"|"octo-renamed","requester_id":7};
//	         s-gh3 of "github" with {"requester":"old"} (no id)
var PeopleSeed = struct{ Secrets map[string]string }{
	Secrets: map[string]string{"tok-aaa": "secret-a", "tok-bbb": "secret-b", "tok-nnn": "secret-n"},
}

// SeedHash is the hash a seed token's row holds.
func SeedHash(secret string) []byte { h := sha256.Sum256([]byte(secret)); return h[:] }

// MigratedPeople checks a store opened on PeopleSeed's rows: every token
// still found by its secret, each a user of its own with the role its
// admin flag gave (a node's none), every session its owner token's user
// (none for a deleted token's), and the GitHub requester a user with a
// github identity, owning the sessions GitHub started for them.
func MigratedPeople(t *testing.T, st store.Store) {
	t.Helper()
	ctx := context.Background()
	for id, want := range map[string]struct {
		user string
		role store.Role
	}{"tok-aaa": {"usr-aaa", store.RoleAdmin}, "tok-bbb": {"usr-bbb", store.RoleMember}, "tok-nnn": {"", ""}} {
		tok, err := st.TokenByHash(ctx, SeedHash(PeopleSeed.Secrets[id]))
		if err != nil || tok.ID != id || tok.User != want.user || tok.Role != want.role || tok.Disabled {
			t.Errorf("token %s after the upgrade: %+v, %v; want user %q, role %q", id, tok, err, want.user, want.role)
		}
	}
	for id, want := range map[string]struct {
		name string
		role store.Role
	}{"usr-aaa": {"root", store.RoleAdmin}, "usr-bbb": {"ci", store.RoleMember}, "usr-gh7": {"octo-renamed", store.RoleMember}} {
		u, err := st.GetUser(ctx, id)
		if err != nil || u.Name != want.name || u.Role != want.role || u.Disabled || u.CreatedAt.IsZero() {
			t.Errorf("user %s after the upgrade: %+v, %v; want %s, %s", id, u, err, want.name, want.role)
		}
	}
	if us, err := st.ListUsers(ctx); err != nil || len(us) != 3 {
		t.Errorf("users after the upgrade: %v, %v; want usr-aaa, usr-bbb, usr-gh7", us, err)
	}
	for id, want := range map[string]struct{ owner, user string }{
		"s-a1": {"tok-aaa", "usr-aaa"}, "s-b1": {"tok-bbb", "usr-bbb"}, "s-b2": {"tok-bbb", "usr-bbb"},
		"s-gone": {"tok-gone", ""}, "s-gh1": {"github", "usr-gh7"}, "s-gh2": {"github", "usr-gh7"}, "s-gh3": {"github", ""},
	} {
		s, err := st.GetSession(ctx, id)
		if err != nil || s.Owner != want.owner || s.User != want.user {
			t.Errorf("session %s after the upgrade: %+v, %v; want owner %s, user %q", id, s, err, want.owner, want.user)
		}
	}
	if ss, err := st.ListSessions(ctx, store.SessionFilter{User: "usr-bbb"}); err != nil || len(ss) != 2 {
		t.Errorf("the sessions of usr-bbb: %v, %v; want s-b1, s-b2", ss, err)
	}
	u, err := st.UserByIdentity(ctx, store.IdentityGitHub, "", "7")
	if err != nil || u.ID != "usr-gh7" {
		t.Errorf("the user of GitHub user 7: %+v, %v; want usr-gh7", u, err)
	}
	if ids, err := st.Identities(ctx, "usr-gh7"); err != nil || len(ids) != 1 || ids[0].Login != "octo-renamed" {
		t.Errorf("the identities of usr-gh7: %v, %v; want github 7 octo-renamed", ids, err)
	}
	// A token made now still becomes a user of its own.
	tok := &store.Token{ID: "tok-ccc", Name: "new", Hash: SeedHash("secret-c")}
	if err := st.CreateToken(ctx, tok); err != nil || tok.User != "usr-ccc" {
		t.Errorf("a token made after the upgrade: %+v, %v", tok, err)
	}
}

// BenchmarkTokenByHash measures the read every API request makes to
// authenticate: a token by its hash, joined to its user (role and
// disabled), among n tokens of n users.
func BenchmarkTokenByHash(b *testing.B, st store.Store, n int) {
	ctx := context.Background()
	for i := range n {
		t := &store.Token{ID: fmt.Sprintf("tok-%012x", i), Name: fmt.Sprintf("t%d", i), Hash: SeedHash(fmt.Sprint(i))}
		if err := st.CreateToken(ctx, t); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		t, err := st.TokenByHash(ctx, SeedHash(fmt.Sprint(i%n)))
		if err != nil || t.User == "" {
			b.Fatalf("TokenByHash: %+v, %v", t, err)
		}
	}
}
