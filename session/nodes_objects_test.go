package session

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/objstore"
	"github.com/harvest-dev/harvest/workspace/carry"
)

// inlinePacks stores packs in the database itself, as nodes did before the
// checkpoint store.
type inlinePacks struct{ st store.Store }

func (p inlinePacks) PutPack(ctx context.Context, hash string, data []byte) error {
	return p.st.PutPack(ctx, &store.Pack{Hash: hash, Data: data})
}

func (p inlinePacks) GetPack(ctx context.Context, hash string) ([]byte, error) {
	pk, err := p.st.GetPack(ctx, hash)
	if err != nil {
		return nil, err
	}
	return pk.Data, nil
}

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func checkTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil || string(b) != text {
			t.Errorf("%s restored: %q, %v; want %q", name, b, err, text)
		}
	}
}

// TestCarryInlineCheckpoint: a checkpoint stored before the checkpoint
// store (its manifest and packs in the database) is still restored, and
// the next snapshot, incremental over it, keeps naming the old packs for
// unchanged files and stores the new ones as objects.
func TestCarryInlineCheckpoint(t *testing.T) {
	e := newEnv(t, withNode("a", nodeTTL))
	c := e.m.carry
	ctx := testbin.Context(t)
	src := t.TempDir()
	files := map[string]string{"a.txt": "alpha\n", "dir/b.txt": strings.Repeat("beta ", 1000)}
	writeTree(t, src, files)
	m1, err := carry.Snapshot(ctx, src, nil, inlinePacks{e.st}, c.opt)
	if err != nil {
		t.Fatal(err)
	}
	b1, err := m1.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	old := &store.Checkpoint{Session: "s", Manifest: b1, Packs: m1.Packs()}
	got, err := c.manifest(ctx, old)
	if err != nil || string(got) != string(b1) {
		t.Fatalf("an inline checkpoint's manifest: %d bytes, %v", len(got), err)
	}
	man, err := carry.UnmarshalManifest(got)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "ws")
	os.Mkdir(dst, 0o755)
	restored, err := carry.Restore(ctx, dst, man, c.packs, c.opt)
	if err != nil {
		t.Fatalf("restoring an inline checkpoint: %v", err)
	}
	checkTree(t, dst, files)

	// Incremental over the restored copy: a new file goes to an object.
	files["new.txt"] = "new\n"
	writeTree(t, dst, map[string]string{"new.txt": "new\n"})
	m2, err := carry.Snapshot(ctx, dst, restored, c.packs, c.opt)
	if err != nil {
		t.Fatal(err)
	}
	var inline, objects int
	for _, h := range m2.Packs() {
		p, err := e.st.GetPack(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if p.Object == "" {
			inline++
		} else {
			objects++
		}
	}
	if inline == 0 || objects == 0 {
		t.Errorf("the incremental snapshot names %d inline packs and %d objects, want both", inline, objects)
	}
	dst2 := filepath.Join(t.TempDir(), "ws")
	os.Mkdir(dst2, 0o755)
	if _, err := carry.Restore(ctx, dst2, m2, c.packs, c.opt); err != nil {
		t.Fatal(err)
	}
	checkTree(t, dst2, files)
}

// TestCheckpointObjectsGC: the object GC deletes the objects nothing names
// once they are older than objectGrace (a replaced manifest, a swept
// pack's object, a dead writer's temporary file), and spares the ones a
// reference names and the recent ones (an upload not recorded yet).
func TestCheckpointObjectsGC(t *testing.T) {
	e := newEnv(t, withNode("a", nodeTTL))
	c := e.m.carry
	d := e.checkpoints.(*objstore.Dir)
	ctx := testbin.Context(t)
	put := func(key string, age time.Duration) {
		t.Helper()
		if _, err := d.Put(ctx, key, strings.NewReader(key), int64(len(key))); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-age)
		if err := os.Chtimes(filepath.Join(d.String(), key), at, at); err != nil {
			t.Fatal(err)
		}
	}
	hash := strings.Repeat("ab", 32)
	named := "packs/ab/" + hash + ".1"
	put(named, 2*objectGrace)
	if err := e.st.PutPack(ctx, &store.Pack{Hash: hash, Object: named, Size: int64(len(named))}); err != nil {
		t.Fatal(err)
	}
	put("packs/ab/"+hash+".2", 2*objectGrace)  // a second upload of the same pack
	put("checkpoints/s-gone/1", 2*objectGrace) // a deleted session's manifest
	put("checkpoints/s-new/1", objectGrace/2)  // being recorded
	put("packs/cd/"+strings.Repeat("cd", 32)+".1", objectGrace/2)
	tmp := filepath.Join(d.String(), "packs", "ab", ".tmp-dead")
	os.WriteFile(tmp, []byte("half"), 0o600)
	at := time.Now().Add(-2 * objectGrace)
	os.Chtimes(tmp, at, at)

	n, err := c.collectObjects(ctx)
	if err != nil || n != 2 {
		t.Errorf("collectObjects = %d, %v; want 2", n, err)
	}
	want := []string{"checkpoints/s-new/1", named, "packs/cd/" + strings.Repeat("cd", 32) + ".1"}
	got := append(objectKeys(t, d, "checkpoints/"), objectKeys(t, d, "packs/")...)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("objects after the GC: %v, want %v", got, want)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("a dead writer's temporary file after the GC: %v", err)
	}
}
