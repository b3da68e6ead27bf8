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

func testCarry(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	for _, id := range []string{"s1", "s2"} {
		mustCreate(t, st, &store.Session{ID: id, Owner: "o", State: store.StateIdle, CreatedAt: base, UpdatedAt: base})
	}
	if _, err := st.GetCheckpoint(ctx, "s1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetCheckpoint of a session without one: %v, want ErrNotFound", err)
	}
	if _, err := st.GetPack(ctx, "p-none"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetPack of a missing pack: %v, want ErrNotFound", err)
	}
	big := bytes.Repeat([]byte{0, 1, 2, 0xff}, 1<<18) // 1 MiB, with NULs
	// p-a and p-b in the database (as before the checkpoint store), p-c
	// an object of it.
	for h, d := range map[string][]byte{"p-a": []byte("alpha"), "p-b": big} {
		if err := st.PutPack(ctx, &store.Pack{Hash: h, Data: d}); err != nil {
			t.Fatalf("PutPack(%s): %v", h, err)
		}
	}
	pc := &store.Pack{Hash: "p-c", Object: "packs/p-c.1", Size: 5}
	if err := st.PutPack(ctx, pc); err != nil {
		t.Fatalf("PutPack(p-c): %v", err)
	}
	if err := st.PutPack(ctx, &store.Pack{Hash: "p-a", Data: []byte("alpha")}); err != nil {
		t.Errorf("PutPack of a stored pack: %v, want nil", err)
	}
	if err := st.PutPack(ctx, &store.Pack{Hash: "p-c", Object: "packs/p-c.2", Size: 5}); err != nil {
		t.Errorf("PutPack of a stored pack in another object: %v, want nil", err)
	}
	for _, bad := range []*store.Pack{{Hash: "p-x"}, {Hash: "p-x", Object: "o", Data: []byte("x")}, {Object: "o"}} {
		if err := st.PutPack(ctx, bad); err == nil {
			t.Errorf("PutPack(%+v): no error", bad)
		}
	}
	if got, err := st.GetPack(ctx, "p-b"); err != nil || !bytes.Equal(got.Data, big) || got.Object != "" || got.Size != 1<<20 {
		t.Errorf("GetPack(p-b): %+v, %v; want the 1 MiB stored", got, err)
	}
	if got, err := st.GetPack(ctx, "p-c"); err != nil || !(got.Hash == pc.Hash && got.Object == pc.Object && got.Size == pc.Size && got.Data == nil) {
		t.Errorf("GetPack(p-c): %+v, %v; want %+v (the first object recorded)", got, err, pc)
	}

	l1 := mustAcquire(t, st, "s1", "node-a", time.Hour)
	c := &store.Checkpoint{Session: "s1", Instance: "i-a", Node: "node-a", Turn: "t1",
		ManifestObject: "checkpoints/s1/1", ManifestSize: 3, ManifestSHA256: "ab12",
		Packs: []string{"p-b", "p-a", "p-a"}, Bytes: 1<<20 + 5, Files: 2}
	before := time.Now()
	if err := st.PutCheckpoint(ctx, l1.Fence(), c); err != nil {
		t.Fatalf("PutCheckpoint: %v", err)
	}
	if c.Replaced != "" {
		t.Errorf("the first PutCheckpoint says it replaced %q", c.Replaced)
	}
	if !near(c.CreatedAt, before) {
		t.Errorf("PutCheckpoint set CreatedAt %v, want about now", c.CreatedAt)
	}
	got, err := st.GetCheckpoint(ctx, "s1")
	if err != nil {
		t.Fatalf("GetCheckpoint: %v", err)
	}
	if got.Session != "s1" || got.Instance != "i-a" || got.Node != "node-a" || got.Turn != "t1" ||
		got.Manifest != nil || got.ManifestObject != c.ManifestObject || got.ManifestSize != 3 || got.ManifestSHA256 != "ab12" ||
		!slices.Equal(got.Packs, []string{"p-a", "p-b"}) ||
		got.Bytes != c.Bytes || got.Files != 2 || !got.CreatedAt.Equal(c.CreatedAt) {
		t.Errorf("GetCheckpoint = %+v, want %+v with packs p-a, p-b", got, c)
	}

	if named, err := st.CarryObjects(ctx, []string{"checkpoints/s1/1", "packs/p-c.1", "packs/p-c.2", "checkpoints/s1/0"}); err != nil ||
		len(named) != 2 || !named["checkpoints/s1/1"] || !named["packs/p-c.1"] {
		t.Errorf("CarryObjects = %v, %v; want the manifest and p-c's first object", named, err)
	}
	if err := st.PutCheckpoint(ctx, l1.Fence(), &store.Checkpoint{Session: "s1", Instance: "i-a", Packs: []string{"p-a"}}); err == nil {
		t.Error("PutCheckpoint with neither a manifest nor its object: no error")
	}

	// A pack that is not stored: refused, the checkpoint unchanged.
	bad := &store.Checkpoint{Session: "s1", Instance: "i-a", Node: "node-a", Turn: "t2", Manifest: []byte("m2"), Packs: []string{"p-a", "p-missing"}}
	if err := st.PutCheckpoint(ctx, l1.Fence(), bad); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("PutCheckpoint naming a missing pack: %v, want ErrNotFound", err)
	}
	if got, err := st.GetCheckpoint(ctx, "s1"); err != nil || got.Turn != "t1" {
		t.Errorf("after a refused PutCheckpoint: %+v, %v; want t1's", got, err)
	}
	// Another session's fence: refused.
	if err := st.PutCheckpoint(ctx, store.Fence{Session: "s2", Epoch: 1}, c); err == nil {
		t.Error("PutCheckpoint of s1 under s2's fence succeeded")
	}

	// Another node takes s1 over: the old owner's checkpoint is refused,
	// the new owner's replaces it.
	expire(t, st, l1)
	l2 := mustAcquire(t, st, "s1", "node-b", time.Hour)
	stale := &store.Checkpoint{Session: "s1", Instance: "i-a", Node: "node-a", Turn: "t2", Manifest: []byte("stale"), Packs: []string{"p-a"}}
	wantLost(t, "PutCheckpoint by the old owner", st.PutCheckpoint(ctx, l1.Fence(), stale), "s1", l1.Epoch, "node-b", l2.Epoch)
	c2 := &store.Checkpoint{Session: "s1", Instance: "i-b", Node: "node-b", Turn: "t2", Manifest: []byte("m2"), Packs: []string{"p-c"}}
	if err := st.PutCheckpoint(ctx, l2.Fence(), c2); err != nil {
		t.Fatalf("PutCheckpoint by the new owner: %v", err)
	}
	if c2.Replaced != "checkpoints/s1/1" {
		t.Errorf("PutCheckpoint by the new owner replaced %q, want checkpoints/s1/1", c2.Replaced)
	}
	if got, err := st.GetCheckpoint(ctx, "s1"); err != nil || got.Instance != "i-b" || !slices.Equal(got.Packs, []string{"p-c"}) || string(got.Manifest) != "m2" {
		t.Errorf("GetCheckpoint after the takeover = %+v, %v; want node-b's", got, err)
	}

	// s2 shares p-a; s1 does not any more. A sweep of packs stored before
	// an hour ago removes nothing; one up to now removes p-b only.
	l3 := mustAcquire(t, st, "s2", "node-a", time.Hour)
	if err := st.PutCheckpoint(ctx, l3.Fence(), &store.Checkpoint{Session: "s2", Instance: "i-a", Node: "node-a", Manifest: []byte("m"), Packs: []string{"p-a"}}); err != nil {
		t.Fatal(err)
	}
	if n, err := st.SweepPacks(ctx, time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Errorf("SweepPacks(an hour ago) = %d, %v; want 0", n, err)
	}
	if n, err := st.SweepPacks(ctx, time.Now().Add(time.Minute)); err != nil || n != 1 {
		t.Errorf("SweepPacks(now) = %d, %v; want 1 (p-b)", n, err)
	}
	if _, err := st.GetPack(ctx, "p-b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("p-b after the sweep: %v, want ErrNotFound", err)
	}
	for _, h := range []string{"p-a", "p-c"} {
		if _, err := st.GetPack(ctx, h); err != nil {
			t.Errorf("%s after the sweep: %v, want it kept", h, err)
		}
	}
	// Deleting a session deletes its checkpoint; its packs go at the next sweep.
	if err := st.DeleteSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetCheckpoint(ctx, "s1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetCheckpoint of a deleted session: %v, want ErrNotFound", err)
	}
	if n, err := st.SweepPacks(ctx, time.Now().Add(time.Minute)); err != nil || n != 1 {
		t.Errorf("SweepPacks after the delete = %d, %v; want 1 (p-c)", n, err)
	}
	if _, err := st.GetPack(ctx, "p-a"); err != nil {
		t.Errorf("p-a (s2's) after the sweeps: %v", err)
	}
}
