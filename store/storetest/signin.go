package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// testUserWebSessions: a user's own web session (no token) stands for the
// user, with the user's role and disabled read in the same query, until
// it expires or is deleted; it is not a token's (TokenByWebSession does
// not resolve it), and a token's is not a user's.
func testUserWebSessions(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	h := func(s string) []byte { b := sha256.Sum256([]byte(s)); return b[:] }
	if err := st.CreateUser(ctx, &store.User{ID: "usr-ada", Name: "Ada", Role: store.RoleViewer, CreatedAt: base}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateToken(ctx, &store.Token{ID: "tok-1", Name: "t", Hash: h("secret"), CreatedAt: base}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateWebSession(ctx, &store.WebSession{Hash: h("both"), TokenID: "tok-1", User: "usr-ada", ExpiresAt: base.Add(time.Hour)}); err == nil {
		t.Fatal("a web session with both a token and a user was stored")
	}
	w := &store.WebSession{Hash: h("u"), User: "usr-ada", Via: store.WebViaGitHub, CreatedAt: base, ExpiresAt: base.Add(time.Hour)}
	if err := st.CreateWebSession(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateWebSession(ctx, &store.WebSession{Hash: h("t"), TokenID: "tok-1", Via: store.WebViaToken, CreatedAt: base, ExpiresAt: base.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	got, u, err := st.UserByWebSession(ctx, h("u"), base.Add(time.Minute))
	if err != nil || got.User != "usr-ada" || got.Via != store.WebViaGitHub || !got.ExpiresAt.Equal(base.Add(time.Hour)) ||
		u.ID != "usr-ada" || u.Name != "Ada" || u.Role != store.RoleViewer || u.Disabled {
		t.Fatalf("UserByWebSession = %+v, %+v, %v", got, u, err)
	}
	if _, err := st.TokenByWebSession(ctx, h("u"), base.Add(time.Minute)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a user's web session as a token's: %v; want ErrNotFound", err)
	}
	if _, _, err := st.UserByWebSession(ctx, h("t"), base.Add(time.Minute)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a token's web session as a user's: %v; want ErrNotFound", err)
	}
	if _, _, err := st.UserByWebSession(ctx, h("u"), base.Add(time.Hour)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an expired user web session: %v; want ErrNotFound", err)
	}
	if _, err := st.UpdateUser(ctx, "usr-ada", func(u *store.User) error { u.Disabled = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, u, err := st.UserByWebSession(ctx, h("u"), base.Add(time.Minute)); err != nil || !u.Disabled {
		t.Fatalf("after disabling: %+v, %v; want the user, disabled", u, err)
	}
	if cp, ok := st.(store.Copier); ok { // the stores themselves, not their wrappers
		ws, err := cp.DumpWebSessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, x := range ws {
			if bytes.Equal(x.Hash, h("u")) {
				found = x.User == "usr-ada" && x.Via == store.WebViaGitHub && x.TokenID == ""
			}
		}
		if !found {
			t.Fatalf("DumpWebSessions lost the user's web session or its user: %+v", ws)
		}
	}
	if err := st.DeleteWebSession(ctx, h("u")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.UserByWebSession(ctx, h("u"), base.Add(time.Minute)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a signed-out user web session: %v; want ErrNotFound", err)
	}
}

// testSignInFlows: a flow is taken once (of racing takers, one gets it),
// an expired one is not taken, creating one drops the expired ones.
func testSignInFlows(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	h := func(s string) []byte { b := sha256.Sum256([]byte(s)); return b[:] }
	if err := st.CreateSignInFlow(ctx, &store.SignInFlow{Hash: h("x")}); err == nil {
		t.Fatal("a flow without provider and expiry was stored")
	}
	f := &store.SignInFlow{Hash: h("s1"), Provider: store.WebViaOIDC, Verifier: "v1", Nonce: "n1", Return: "/s/x", CreatedAt: base, ExpiresAt: base.Add(10 * time.Minute)}
	if err := st.CreateSignInFlow(ctx, f); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateSignInFlow(ctx, f); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a flow stored twice: %v; want ErrConflict", err)
	}
	got, err := st.TakeSignInFlow(ctx, h("s1"), base.Add(time.Minute))
	if err != nil || got.Provider != store.WebViaOIDC || got.Verifier != "v1" || got.Nonce != "n1" || got.Return != "/s/x" || !got.ExpiresAt.Equal(f.ExpiresAt) {
		t.Fatalf("TakeSignInFlow = %+v, %v", got, err)
	}
	if _, err := st.TakeSignInFlow(ctx, h("s1"), base.Add(time.Minute)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a flow taken twice: %v; want ErrNotFound", err)
	}
	// Expired: not taken (and gone).
	if err := st.CreateSignInFlow(ctx, &store.SignInFlow{Hash: h("s2"), Provider: store.WebViaGitHub, Verifier: "v2", CreatedAt: base, ExpiresAt: base.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.TakeSignInFlow(ctx, h("s2"), base.Add(time.Minute)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an expired flow: %v; want ErrNotFound", err)
	}
	// Creating drops the expired: s3 expires, s4's creation after it removes it.
	if err := st.CreateSignInFlow(ctx, &store.SignInFlow{Hash: h("s3"), Provider: store.WebViaGitHub, Verifier: "v3", CreatedAt: base, ExpiresAt: base.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateSignInFlow(ctx, &store.SignInFlow{Hash: h("s4"), Provider: store.WebViaGitHub, Verifier: "v4", CreatedAt: base.Add(2 * time.Minute), ExpiresAt: base.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.TakeSignInFlow(ctx, h("s3"), base); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an expired flow survived a later creation: %v", err)
	}
	// Racing takers: exactly one wins.
	if err := st.CreateSignInFlow(ctx, &store.SignInFlow{Hash: h("race"), Provider: store.WebViaGitHub, Verifier: "v", CreatedAt: base, ExpiresAt: base.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.TakeSignInFlow(ctx, h("race"), base.Add(time.Minute))
			switch {
			case err == nil:
				mu.Lock()
				won++
				mu.Unlock()
			case !errors.Is(err, store.ErrNotFound):
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d takers got the flow; want 1", won)
	}
}

// testOAuthGrants: a grant is kept per user and provider, replaced whole
// by the next, with its times; none is ErrNotFound.
func testOAuthGrants(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	if _, err := st.OAuthGrant(ctx, "usr-ada", store.WebViaGitHub); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("no grant: %v; want ErrNotFound", err)
	}
	if err := st.PutOAuthGrant(ctx, &store.OAuthGrant{User: "usr-ada", Provider: store.WebViaGitHub}); err == nil {
		t.Fatal("a grant without an access token was stored")
	}
	g := &store.OAuthGrant{User: "usr-ada", Provider: store.WebViaGitHub, Access: []byte("sealed-a1"), Refresh: []byte("sealed-r1"),
		ExpiresAt: base.Add(8 * time.Hour), RefreshExpiresAt: base.Add(4000 * time.Hour), UpdatedAt: base}
	if err := st.PutOAuthGrant(ctx, g); err != nil {
		t.Fatal(err)
	}
	got, err := st.OAuthGrant(ctx, "usr-ada", store.WebViaGitHub)
	if err != nil || string(got.Access) != "sealed-a1" || string(got.Refresh) != "sealed-r1" || !got.ExpiresAt.Equal(g.ExpiresAt) ||
		!got.RefreshExpiresAt.Equal(g.RefreshExpiresAt) || !got.UpdatedAt.Equal(base) {
		t.Fatalf("OAuthGrant = %+v, %v", got, err)
	}
	// Replaced: no refresh token, no expiry.
	if err := st.PutOAuthGrant(ctx, &store.OAuthGrant{User: "usr-ada", Provider: store.WebViaGitHub, Access: []byte("sealed-a2"), UpdatedAt: base.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	got, err = st.OAuthGrant(ctx, "usr-ada", store.WebViaGitHub)
	if err != nil || string(got.Access) != "sealed-a2" || got.Refresh != nil || !got.ExpiresAt.IsZero() || !got.RefreshExpiresAt.IsZero() {
		t.Fatalf("after replacing: %+v, %v", got, err)
	}
	if _, err := st.OAuthGrant(ctx, "usr-bob", store.WebViaGitHub); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another user's grant: %v; want ErrNotFound", err)
	}
}
