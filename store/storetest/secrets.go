package storetest

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// testSecrets: a secret is stored and read back as it was put, replaced in
// place by a put of the same scope and name (keeping its creation time),
// listed by scope then name (filtered by scopes), and deleted once; a
// token's deletion takes its user secrets with it.
func testSecrets(t *testing.T, open func(t *testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	if err := st.PutSecret(ctx, &store.Secret{Scope: "repo:o/r", Name: "X"}); err == nil {
		t.Fatal("a secret without ciphertext or key id was stored")
	}
	tok := &store.Token{ID: "tok-000000000001", Name: "alice", Hash: []byte("h1"), CreatedAt: base}
	if err := st.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	user := "user:" + tok.ID
	put := func(scope, name, ct string, session bool, at time.Duration) *store.Secret {
		t.Helper()
		x := &store.Secret{Scope: scope, Name: name, Ciphertext: []byte(ct), KeyID: "k-1", Session: session, SetBy: "tok-admin", UpdatedAt: base.Add(at)}
		if err := st.PutSecret(ctx, x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	a := put("repo:octo/hello", "NPM_TOKEN", "c1", false, 0)
	if !a.CreatedAt.Equal(base) || !a.UpdatedAt.Equal(base) || a.SetBy != "tok-admin" {
		t.Fatalf("put returned %+v", a)
	}
	put("repo:octo/hello", "API_KEY", "c2", true, 1e3)
	put(user, "NPM_TOKEN", "c3", true, 2e3)
	put("repo:octo/other", "A", "c4", false, 3e3)

	b := put("repo:octo/hello", "NPM_TOKEN", "c1-new", true, 5e3)
	if !b.CreatedAt.Equal(base) || !b.UpdatedAt.Equal(base.Add(5e3)) || !b.Session {
		t.Fatalf("replacing kept %+v; want the first creation time, the new update time and flag", b)
	}
	got, err := st.GetSecret(ctx, "repo:octo/hello", "NPM_TOKEN")
	if err != nil || !bytes.Equal(got.Ciphertext, []byte("c1-new")) || got.KeyID != "k-1" || !got.Session || !got.CreatedAt.Equal(base) {
		t.Fatalf("get = %+v, %v", got, err)
	}
	if _, err := st.GetSecret(ctx, "repo:octo/hello", "NOPE"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a missing secret: %v", err)
	}

	names := func(xs []*store.Secret) []string {
		var out []string
		for _, x := range xs {
			out = append(out, x.Scope+" "+x.Name)
		}
		return out
	}
	all, err := st.ListSecrets(ctx)
	want := []string{"repo:octo/hello API_KEY", "repo:octo/hello NPM_TOKEN", "repo:octo/other A", user + " NPM_TOKEN"}
	if err != nil || !slices.Equal(names(all), want) {
		t.Fatalf("list all = %v, %v; want %v", names(all), err, want)
	}
	some, err := st.ListSecrets(ctx, user, "repo:octo/hello", "repo:nobody/none")
	want = []string{"repo:octo/hello API_KEY", "repo:octo/hello NPM_TOKEN", user + " NPM_TOKEN"}
	if err != nil || !slices.Equal(names(some), want) || len(some[0].Ciphertext) == 0 {
		t.Fatalf("list of two scopes = %v, %v; want %v with their ciphertexts", names(some), err, want)
	}

	if err := st.DeleteSecret(ctx, "repo:octo/hello", "API_KEY"); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteSecret(ctx, "repo:octo/hello", "API_KEY"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleting twice: %v", err)
	}
	if err := st.DeleteToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if xs, err := st.ListSecrets(ctx, user); err != nil || len(xs) != 0 {
		t.Fatalf("the deleted token's secrets: %v, %v", names(xs), err)
	}
	all, _ = st.ListSecrets(ctx)
	if want := []string{"repo:octo/hello NPM_TOKEN", "repo:octo/other A"}; !slices.Equal(names(all), want) {
		t.Fatalf("after deletions = %v; want %v", names(all), want)
	}
}
