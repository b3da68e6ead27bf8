package carry

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A manifest is untrusted: Restore must refuse a bad one and write nothing
// outside the root.
func TestRestoreRefusesMaliciousManifests(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	src := freshDir(t, "src")
	writeFile(t, filepath.Join(src, "f"), []byte("hello"), 0o644)
	packs := newMemPacks()
	good, err := Snapshot(ctx, src, nil, packs, Options{})
	must(t, err)
	ext := good.Entries[0].Extents[0]
	// A pack stored under a name that is not its hash.
	wrong := strings.Repeat("ab", 32)
	packs.m[wrong] = packs.m[ext.Pack]

	file := func(p string) Entry {
		return Entry{Path: p, Type: TypeFile, Mode: 0o644, Size: 5, Extents: []Extent{ext}}
	}
	dir := func(p string) Entry { return Entry{Path: p, Type: TypeDir, Mode: 0o755} }
	cases := []struct {
		name    string
		entries []Entry
		want    string
	}{
		{"dotdot", []Entry{file("../x")}, `".."`},
		{"absolute", []Entry{file("/abs")}, "absolute"},
		{"dotdot inside", []Entry{dir("a"), file("a/../../x")}, `".."`},
		{"dot", []Entry{file("./x")}, `"."`},
		{"empty component", []Entry{dir("a"), file("a//x")}, "empty"},
		{"empty path", []Entry{file("")}, "empty path"},
		{"NUL", []Entry{file("x\x00y")}, "NUL"},
		{"under a symlink", []Entry{{Path: "l", Type: TypeSymlink, Target: "OUTSIDE"}, file("l/x")}, "not a directory listed before it"},
		{"under a file", []Entry{file("f"), file("f/x")}, "not a directory listed before it"},
		{"parent later", []Entry{file("a/x"), dir("a")}, "not a directory listed before it"},
		{"duplicate", []Entry{file("x"), file("x")}, "appears twice"},
		{"duplicate dir over symlink", []Entry{{Path: "d", Type: TypeSymlink, Target: "OUTSIDE"}, dir("d"), file("d/x")}, "appears twice"},
		{"extent past the pack", []Entry{{Path: "x", Type: TypeFile, Size: 1000,
			Extents: []Extent{{Pack: ext.Pack, Offset: 0, Length: 1000}}}}, "fewer than the 1000 bytes"},
		{"extent past the pack limit", []Entry{{Path: "x", Type: TypeFile, Size: 1 << 40,
			Extents: []Extent{{Pack: ext.Pack, Offset: MaxPackSize, Length: 1}}}}, "pack limit"},
		{"extent past the file", []Entry{{Path: "x", Type: TypeFile, Size: 2, Extents: []Extent{ext}}}, "outside the file"},
		{"overlapping extents", []Entry{{Path: "x", Type: TypeFile, Size: 5, Extents: []Extent{ext, ext}}}, "out of order"},
		{"pack with the wrong hash", []Entry{{Path: "x", Type: TypeFile, Size: 5,
			Extents: []Extent{{Pack: wrong, Length: 5}}}}, "corrupt"},
		{"pack name not a hash", []Entry{{Path: "x", Type: TypeFile, Size: 5,
			Extents: []Extent{{Pack: "../../etc/passwd", Length: 5}}}}, "not a hex sha256"},
		{"host xattr", []Entry{{Path: "x", Type: TypeFifo, Xattrs: []Xattr{{Name: "security.capability", Value: []byte{1}}}}}, "not one carried"},
		{"mode with type bits", []Entry{{Path: "x", Type: TypeFifo, Mode: 0o100644}}, "outside 07777"},
		{"unknown type", []Entry{{Path: "x", Type: 9}}, "unknown type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			outside := filepath.Join(base, "outside")
			root := filepath.Join(base, "root")
			must(t, os.Mkdir(outside, 0o755))
			must(t, os.Mkdir(root, 0o755))
			for i := range c.entries {
				c.entries[i].Target = strings.ReplaceAll(c.entries[i].Target, "OUTSIDE", outside)
			}
			m := &Manifest{Root: Entry{Type: TypeDir, Mode: 0o755}, Entries: c.entries}
			_, err := Restore(ctx, root, m, packs, Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Restore: %v; want an error containing %q", err, c.want)
			}
			t.Logf("refused: %v", err)
			if ls, _ := os.ReadDir(outside); len(ls) != 0 {
				t.Fatalf("Restore wrote outside the root: %v", ls)
			}
			if ls, _ := os.ReadDir(base); len(ls) != 2 {
				t.Fatalf("Restore wrote next to the root: %v", ls)
			}
		})
	}
}

func TestUnmarshalRefusesGarbage(t *testing.T) {
	ctx := context.Background()
	src := freshDir(t, "src")
	writeFile(t, filepath.Join(src, "a/b"), []byte("hello"), 0o644)
	must(t, os.Symlink("target", filepath.Join(src, "a/l")))
	m, err := Snapshot(ctx, src, nil, newMemPacks(), Options{})
	must(t, err)
	b, err := m.Marshal()
	must(t, err)
	if _, err := UnmarshalManifest(b); err != nil {
		t.Fatal(err)
	}
	for n := range len(b) {
		if _, err := UnmarshalManifest(b[:n]); err == nil {
			t.Fatalf("a manifest cut to %d of %d bytes decoded", n, len(b))
		}
	}
	v2 := bytes.Clone(b)
	v2[len(manifestMagic)] = 2
	if _, err := UnmarshalManifest(v2); err == nil || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("unknown version: %v", err)
	}
	// Every single-byte change of the body either decodes to a valid
	// manifest or fails; none panics.
	body, err := manifestDecoder().DecodeAll(b[len(manifestMagic)+1:], nil)
	must(t, err)
	for i := range body {
		for _, v := range []byte{0, 1, 0x7f, 0x80, 0xff} {
			mut := bytes.Clone(body)
			mut[i] = v
			enc := append([]byte(manifestMagic+"\x01"), encoder().EncodeAll(mut, nil)...)
			UnmarshalManifest(enc)
		}
	}
}

func FuzzUnmarshalManifest(f *testing.F) {
	src := f.TempDir()
	os.WriteFile(filepath.Join(src, "x"), []byte("x"), 0o644)
	m, err := Snapshot(context.Background(), src, nil, newMemPacks(), Options{})
	if err != nil {
		f.Fatal(err)
	}
	b, _ := m.Marshal()
	body, _ := manifestDecoder().DecodeAll(b[len(manifestMagic)+1:], nil)
	f.Add(body)
	f.Fuzz(func(t *testing.T, body []byte) {
		enc := append([]byte(manifestMagic+"\x01"), encoder().EncodeAll(body, nil)...)
		m, err := UnmarshalManifest(enc)
		if err != nil {
			return
		}
		if _, err := m.Marshal(); err != nil {
			t.Fatalf("a manifest that decoded does not encode: %v", err)
		}
	})
}

func TestMaxBytes(t *testing.T) {
	src := freshDir(t, "src")
	for i := range 3 {
		writeFile(t, filepath.Join(src, string(rune('a'+i))), randBytes(uint64(i), 1_000_000), 0o644)
	}
	_, err := Snapshot(context.Background(), src, nil, newMemPacks(), Options{MaxBytes: 1_500_000})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	if !strings.Contains(err.Error(), "3000000") || !strings.Contains(err.Error(), "1500000") {
		t.Errorf("error should say the size (3000000) and the limit (1500000): %v", err)
	}
	t.Log(err)
	_, err = Snapshot(context.Background(), src, nil, newMemPacks(), Options{MaxEntries: 2})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge for entries", err)
	}
	t.Log(err)
}
