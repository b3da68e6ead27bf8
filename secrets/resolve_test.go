package secrets_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/secrets"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
)

func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func put(t *testing.T, st store.Secrets, k *secrets.Key, scope, name, value string, session bool) {
	t.Helper()
	sc, err := secrets.ParseScope(scope)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.Put(context.Background(), st, k, sc, name, value, session, "tok-admin"); err != nil {
		t.Fatal(err)
	}
}

// TestResolve: setup gets every secret of the repository and the user,
// the session only those marked so; a user secret overrides the
// repository's of the same name, flag included; other scopes stay out.
func TestResolve(t *testing.T) {
	st, k := openStore(t), secrets.GenerateKey()
	ctx := context.Background()
	put(t, st, k, "repo:Octo/Hello", "NPM_TOKEN", "repo-npm", true)
	put(t, st, k, "repo:octo/hello", "DEPLOY_KEY", "repo-deploy", false)
	put(t, st, k, "repo:octo/hello", "SHARED", "repo-shared", true)
	put(t, st, k, "user:tok-alice", "SHARED", "alice=shared", false)
	put(t, st, k, "user:tok-alice", "GH_TOKEN", "alice-gh", true)
	put(t, st, k, "user:tok-bob", "BOB", "bob", true)
	put(t, st, k, "repo:octo/other", "OTHER", "other", true)

	setup, session, err := secrets.Resolve(ctx, st, k, "octo/HELLO", "tok-alice")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"DEPLOY_KEY=repo-deploy", "GH_TOKEN=alice-gh", "NPM_TOKEN=repo-npm", "SHARED=alice=shared"}; !slices.Equal(setup, want) {
		t.Errorf("setup = %q, want %q", setup, want)
	}
	if want := []string{"GH_TOKEN=alice-gh", "NPM_TOKEN=repo-npm"}; !slices.Equal(session, want) {
		t.Errorf("session = %q, want %q (alice's SHARED, not for sessions, hides the repository's)", session, want)
	}

	if setup, _, err := secrets.Resolve(ctx, st, k, "", "tok-bob"); err != nil || !slices.Equal(setup, []string{"BOB=bob"}) {
		t.Errorf("bob alone = %q, %v", setup, err)
	}
	if setup, session, err := secrets.Resolve(ctx, st, k, "", ""); err != nil || setup != nil || session != nil {
		t.Errorf("no scope = %q %q %v", setup, session, err)
	}
	if _, _, err := secrets.Resolve(ctx, st, k, "not a repo", ""); err == nil {
		t.Error("a bad repository accepted")
	}
}

// TestResolveFailures: a value sealed by another key, or moved to another
// row in the database, fails Resolve with an error that names the secret
// and not its value.
func TestResolveFailures(t *testing.T) {
	ctx := context.Background()
	const canary = "canary-7c1d"

	t.Run("wrong key", func(t *testing.T) {
		st := openStore(t)
		put(t, st, secrets.GenerateKey(), "repo:octo/hello", "A", canary, true)
		other := secrets.GenerateKey()
		_, _, err := secrets.Resolve(ctx, st, other, "octo/hello", "")
		if !errors.Is(err, secrets.ErrDecrypt) || !strings.Contains(err.Error(), "sealed with key") || strings.Contains(err.Error(), canary) {
			t.Fatalf("another key: %v", err)
		}
	})
	t.Run("moved", func(t *testing.T) {
		st, k := openStore(t), secrets.GenerateKey()
		put(t, st, k, "repo:octo/hello", "A", canary, true)
		x, err := st.GetSecret(ctx, "repo:octo/hello", "A")
		if err != nil {
			t.Fatal(err)
		}
		moved := *x
		moved.Name = "B"
		if err := st.PutSecret(ctx, &moved); err != nil {
			t.Fatal(err)
		}
		if err := st.DeleteSecret(ctx, "repo:octo/hello", "A"); err != nil {
			t.Fatal(err)
		}
		_, _, err = secrets.Resolve(ctx, st, k, "octo/hello", "")
		if !errors.Is(err, secrets.ErrDecrypt) || !strings.Contains(err.Error(), "secret repo:octo/hello B does not decrypt") || strings.Contains(err.Error(), canary) {
			t.Fatalf("a ciphertext moved to another name: %v", err)
		}
	})
}

func TestPutRefuses(t *testing.T) {
	st, k := openStore(t), secrets.GenerateKey()
	const canary = "canary-91ab"
	_, err := secrets.Put(context.Background(), st, k, secrets.Scope{Kind: "repo", ID: "x"}, "bad-name", canary+"\x00", false, "")
	var ie *secrets.InputError
	if !errors.As(err, &ie) || len(ie.Problems) != 3 || strings.Contains(err.Error(), canary) {
		t.Fatalf("put = %v; want three problems, without the value", err)
	}
	if xs, _ := st.ListSecrets(context.Background()); len(xs) != 0 {
		t.Fatal("an invalid secret was stored")
	}
}
