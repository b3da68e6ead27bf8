package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
)

func testLocks(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	const key = "session/s1"

	if _, err := st.GetLock(ctx, key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetLock of a free key: %v, want ErrNotFound", err)
	}
	before := time.Now()
	l, err := st.AcquireLock(ctx, key, "run-a", time.Hour)
	if err != nil {
		t.Fatalf("AcquireLock: %v", err)
	}
	if l.Key != key || l.Holder != "run-a" || l.Expires.Before(before.Add(time.Hour-time.Second)) || l.Expires.After(time.Now().Add(time.Hour+time.Second)) {
		t.Errorf("AcquireLock = %+v, want run-a until about now+1h", l)
	}
	if g, err := st.GetLock(ctx, key); err != nil || g.Holder != "run-a" || g.Expires.Sub(l.Expires).Abs() > time.Microsecond {
		t.Errorf("GetLock = %+v, %v; want %+v", g, err, l)
	}

	// Another holder is refused, and told who holds it.
	_, err = st.AcquireLock(ctx, key, "run-b", time.Hour)
	var le *store.LockError
	if !errors.As(err, &le) || !errors.Is(err, store.ErrLocked) {
		t.Fatalf("AcquireLock by another holder: %v, want a *LockError (ErrLocked)", err)
	}
	if le.Lock.Holder != "run-a" || le.Lock.Key != key || le.Lock.Expires.Sub(l.Expires).Abs() > time.Microsecond {
		t.Errorf("LockError.Lock = %+v, want %+v", le.Lock, l)
	}

	// The holder renews.
	r, err := st.AcquireLock(ctx, key, "run-a", 2*time.Hour)
	if err != nil {
		t.Fatalf("renewing: %v", err)
	}
	if !r.Expires.After(l.Expires) || r.Holder != "run-a" {
		t.Errorf("renewed lock %+v does not last longer than %+v", r, l)
	}

	// Release by someone else does nothing.
	if err := st.ReleaseLock(ctx, key, "run-b"); err != nil {
		t.Errorf("ReleaseLock by a non-holder: %v, want nil", err)
	}
	if g, err := st.GetLock(ctx, key); err != nil || g.Holder != "run-a" {
		t.Errorf("after a non-holder's release: %+v, %v; want still run-a", g, err)
	}
	// Release by the holder frees it.
	if err := st.ReleaseLock(ctx, key, "run-a"); err != nil {
		t.Fatalf("ReleaseLock: %v", err)
	}
	if _, err := st.GetLock(ctx, key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetLock after release: %v, want ErrNotFound", err)
	}
	if _, err := st.AcquireLock(ctx, key, "run-b", time.Hour); err != nil {
		t.Fatalf("AcquireLock after release: %v", err)
	}

	// ForceUnlock frees it whoever holds it.
	if err := st.ForceUnlock(ctx, key); err != nil {
		t.Fatalf("ForceUnlock: %v", err)
	}
	if _, err := st.GetLock(ctx, key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetLock after ForceUnlock: %v, want ErrNotFound", err)
	}
	if err := st.ForceUnlock(ctx, key); err != nil {
		t.Errorf("ForceUnlock of a free key: %v, want nil", err)
	}
	if _, err := st.AcquireLock(ctx, key, "run-c", time.Hour); err != nil {
		t.Fatalf("AcquireLock after ForceUnlock: %v", err)
	}
	// Keys are independent.
	if _, err := st.AcquireLock(ctx, "session/s2", "run-a", time.Hour); err != nil {
		t.Errorf("AcquireLock of another key: %v", err)
	}
}

// testLockExpiry: a lease whose time is over is free. The TTLs are already
// over when they are given, so the test needs no clock and no sleep.
func testLockExpiry(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	const key = "session/s1"

	// run-a holds the lock, then renews it with a lease that is over: as if
	// its TTL had run out without a renewal (the run died).
	if _, err := st.AcquireLock(ctx, key, "run-a", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireLock(ctx, key, "run-b", time.Hour); !errors.Is(err, store.ErrLocked) {
		t.Fatalf("AcquireLock of a held lock: %v, want ErrLocked", err)
	}
	if _, err := st.AcquireLock(ctx, key, "run-a", -time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetLock(ctx, key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetLock of an expired lock: %v, want ErrNotFound", err)
	}
	l, err := st.AcquireLock(ctx, key, "run-b", time.Hour)
	if err != nil {
		t.Fatalf("AcquireLock of an expired lock: %v", err)
	}
	if l.Holder != "run-b" {
		t.Errorf("lock taken over: holder %q, want run-b", l.Holder)
	}
	// The old holder cannot take it back, nor release it.
	if _, err := st.AcquireLock(ctx, key, "run-a", time.Hour); !errors.Is(err, store.ErrLocked) {
		t.Errorf("the expired holder re-acquiring: %v, want ErrLocked", err)
	}
	if err := st.ReleaseLock(ctx, key, "run-a"); err != nil {
		t.Errorf("ReleaseLock by the expired holder: %v, want nil (no-op)", err)
	}
	if g, err := st.GetLock(ctx, key); err != nil || g.Holder != "run-b" {
		t.Errorf("GetLock = %+v, %v; want run-b", g, err)
	}
	// A zero TTL is over at once, too.
	if _, err := st.AcquireLock(ctx, "k2", "run-a", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireLock(ctx, "k2", "run-b", time.Hour); err != nil {
		t.Errorf("AcquireLock after a zero-TTL lease: %v", err)
	}
}

func testTokens(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	h1 := sha256.Sum256([]byte("secret-1"))
	h2 := sha256.Sum256([]byte("secret-2"))
	t1 := &store.Token{ID: "tok-1", Name: "admin", Hash: h1[:], Admin: true, CreatedAt: base}
	t2 := &store.Token{ID: "tok-2", Name: "ci", Hash: h2[:], CreatedAt: base.Add(time.Second)}
	for _, tok := range []*store.Token{t1, t2} {
		if err := st.CreateToken(ctx, tok); err != nil {
			t.Fatalf("CreateToken(%s): %v", tok.ID, err)
		}
	}
	got, err := st.TokenByHash(ctx, h1[:])
	if err != nil {
		t.Fatalf("TokenByHash: %v", err)
	}
	if got.ID != "tok-1" || got.Name != "admin" || !got.Admin || !bytes.Equal(got.Hash, h1[:]) || !got.CreatedAt.Equal(base) {
		t.Errorf("TokenByHash = %+v, want %+v", got, t1)
	}
	other := sha256.Sum256([]byte("nope"))
	if _, err := st.TokenByHash(ctx, other[:]); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("TokenByHash(unknown): %v, want ErrNotFound", err)
	}
	if err := st.CreateToken(ctx, &store.Token{ID: "tok-3", Name: "dup", Hash: h1[:], CreatedAt: base}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateToken with an existing hash: %v, want ErrConflict", err)
	}
	if err := st.CreateToken(ctx, &store.Token{ID: "tok-1", Name: "dup", Hash: other[:], CreatedAt: base}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateToken with an existing id: %v, want ErrConflict", err)
	}
	list, err := st.ListTokens(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("ListTokens = %v, %v; want 2", list, err)
	}
	seen := map[string]bool{}
	for _, tok := range list {
		seen[tok.ID] = true
	}
	if !seen["tok-1"] || !seen["tok-2"] {
		t.Errorf("ListTokens = %v", list)
	}
	if err := st.DeleteToken(ctx, "tok-1"); err != nil {
		t.Fatalf("DeleteToken: %v", err)
	}
	if _, err := st.TokenByHash(ctx, h1[:]); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("TokenByHash after delete: %v, want ErrNotFound", err)
	}
	if err := st.DeleteToken(ctx, "tok-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteToken twice: %v, want ErrNotFound", err)
	}
}
