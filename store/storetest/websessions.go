package storetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// testWebSessions: a web session stands for its token until it expires,
// is deleted or its token is; a hash stored twice is ErrConflict; creating
// one drops those expired.
func testWebSessions(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	h := func(s string) []byte { b := sha256.Sum256([]byte(s)); return b[:] }
	for _, tok := range []*store.Token{
		{ID: "tok-1", Name: "alice", Hash: h("secret-1"), CreatedAt: base},
		{ID: "tok-2", Name: "bob", Hash: h("secret-2"), Admin: true, CreatedAt: base},
	} {
		if err := st.CreateToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CreateWebSession(ctx, &store.WebSession{Hash: h("w")}); err == nil {
		t.Fatal("a web session without token and expiry was stored")
	}
	old := &store.WebSession{Hash: h("old"), TokenID: "tok-1", CreatedAt: base, ExpiresAt: base.Add(time.Hour)}
	if err := st.CreateWebSession(ctx, old); err != nil {
		t.Fatal(err)
	}
	if tok, err := st.TokenByWebSession(ctx, h("old"), base.Add(time.Minute)); err != nil || tok.ID != "tok-1" || tok.Name != "alice" || !tok.CreatedAt.Equal(base) {
		t.Fatalf("TokenByWebSession = %+v, %v; want tok-1", tok, err)
	}
	if _, err := st.TokenByWebSession(ctx, h("old"), base.Add(time.Hour)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an expired web session: %v; want ErrNotFound", err)
	}
	if _, err := st.TokenByWebSession(ctx, h("never"), base); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an unknown web session: %v; want ErrNotFound", err)
	}

	// Created after old expired: old is dropped, even for a reader whose
	// clock is earlier.
	later := base.Add(2 * time.Hour)
	for _, w := range []*store.WebSession{
		{Hash: h("a"), TokenID: "tok-1", CreatedAt: later, ExpiresAt: later.Add(time.Hour)},
		{Hash: h("b"), TokenID: "tok-2", CreatedAt: later, ExpiresAt: later.Add(time.Hour)},
	} {
		if err := st.CreateWebSession(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.TokenByWebSession(ctx, h("old"), base.Add(time.Minute)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an expired web session outlived the next sign-in: %v; want ErrNotFound", err)
	}
	if err := st.CreateWebSession(ctx, &store.WebSession{Hash: h("a"), TokenID: "tok-2", CreatedAt: later, ExpiresAt: later.Add(time.Hour)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a web session's hash stored twice: %v; want ErrConflict", err)
	}
	if tok, err := st.TokenByWebSession(ctx, h("a"), later); err != nil || tok.ID != "tok-1" {
		t.Fatalf("after the conflict, a = %+v, %v; want tok-1 still", tok, err)
	}

	if err := st.DeleteWebSession(ctx, h("a")); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteWebSession(ctx, h("a")); err != nil {
		t.Fatalf("deleting a web session twice: %v", err)
	}
	if _, err := st.TokenByWebSession(ctx, h("a"), later); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a signed-out web session: %v; want ErrNotFound", err)
	}
	if err := st.DeleteToken(ctx, "tok-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.TokenByWebSession(ctx, h("b"), later); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the web session of a deleted token: %v; want ErrNotFound", err)
	}
}
