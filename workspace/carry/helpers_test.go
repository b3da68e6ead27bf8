package carry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/internal/testreq"
)

func TestMain(m *testing.M) {
	// Files in tests are written just before they are snapshotted; with the
	// production window every one would be "racy" and read again.
	racyWindow = 0
	os.Exit(m.Run())
}

// memPacks is a Packs in memory that counts what is stored.
type memPacks struct {
	mu    sync.Mutex
	m     map[string][]byte
	puts  int
	onPut func() // called after each put, outside the lock
	onGet func()
}

func newMemPacks() *memPacks { return &memPacks{m: map[string][]byte{}} }

func (p *memPacks) PutPack(ctx context.Context, hash string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != hash {
		return fmt.Errorf("memPacks: hash %s does not match the data", hash)
	}
	p.mu.Lock()
	p.m[hash] = bytes.Clone(data)
	p.puts++
	f := p.onPut
	p.mu.Unlock()
	if f != nil {
		f()
	}
	return nil
}

func (p *memPacks) GetPack(ctx context.Context, hash string) ([]byte, error) {
	if f := p.onGet; f != nil {
		f()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	d, ok := p.m[hash]
	if !ok {
		return nil, fmt.Errorf("memPacks: no pack %s", hash)
	}
	return d, nil
}

// raw returns the uncompressed content of a stored pack.
func (p *memPacks) raw(t testing.TB, hash string) []byte {
	t.Helper()
	p.mu.Lock()
	d := p.m[hash]
	p.mu.Unlock()
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	out, err := dec.DecodeAll(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (p *memPacks) hashes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for h := range p.m {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}

func needRoot(t testing.TB) {
	t.Helper()
	testreq.NeedRoot(t, "owners, device nodes, trusted.* xattrs and mounts")
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeFile(t testing.TB, path string, data []byte, mode os.FileMode) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(path), 0o755))
	must(t, os.WriteFile(path, data, mode))
}

// node is what compareTrees compares for one path.
type node struct {
	Type   uint32
	Mode   uint32
	UID    uint32
	GID    uint32
	Mtime  int64
	Size   int64
	Rdev   uint64
	Target string
	Sum    string
	Xattrs string
}

// describe walks root with lstat (the test's own trees are not raced) and
// returns every entry's node, keyed by relative path; "" is root.
func describe(t testing.TB, root string, skipMtimeFor func(string) bool) map[string]node {
	t.Helper()
	out := map[string]node{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			rel = ""
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		n := node{Type: st.Mode & unix.S_IFMT, Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid,
			Mtime: st.Mtim.Nano(), Rdev: st.Rdev}
		if skipMtimeFor != nil && skipMtimeFor(rel) {
			n.Mtime = 0
		}
		switch n.Type {
		case unix.S_IFREG:
			n.Size = st.Size
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			h := sha256.New()
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
			n.Sum = hex.EncodeToString(h.Sum(nil))
		case unix.S_IFLNK:
			n.Target, _ = os.Readlink(p)
			n.Mode = 0
		}
		n.Xattrs = listXattrs(t, p)
		out[rel] = n
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func listXattrs(t testing.TB, p string) string {
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		return "err:" + err.Error()
	}
	var parts []string
	for name := range strings.SplitSeq(string(buf[:n]), "\x00") {
		if name == "" || !carriedXattr(name) {
			continue
		}
		v := make([]byte, 64<<10)
		m, err := unix.Lgetxattr(p, name, v)
		if err != nil {
			t.Fatalf("lgetxattr %s %s: %v", p, name, err)
		}
		parts = append(parts, name+"="+string(v[:m]))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func compareTrees(t testing.TB, want, got map[string]node) {
	t.Helper()
	var paths []string
	for p := range want {
		paths = append(paths, p)
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("restored tree has extra %q", p)
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		g, ok := got[p]
		if !ok {
			t.Errorf("restored tree lacks %q", p)
			continue
		}
		if w := want[p]; w != g {
			t.Errorf("%q differs:\n want %+v\n got  %+v", p, w, g)
		}
	}
}

// freshDir returns a new empty directory.
func freshDir(t testing.TB, name string) string {
	d := filepath.Join(t.TempDir(), name)
	must(t, os.Mkdir(d, 0o755))
	return d
}
