package sandboxtest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox"
)

// testHomeLayer: a box whose HOME is a prepared layer (Spec.HomeLayer)
// starts with the layer's files; what it writes, changes and deletes there
// lands on its disk, never in the layer; a second box on the same disk
// sees the first one's HOME; a setuid file in the layer runs without its
// privilege.
func (s *suite) testHomeLayer(t *testing.T) {
	layer := filepath.Join(testbin.TempDir(t), "layer")
	for p, c := range map[string]string{".cache/go-build/x": "cached\n", ".gitconfig": "[user]\n\tname = layer\n", "notes.txt": "from the layer\n"} {
		f := filepath.Join(layer, p)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(layer, "suid"), []byte("#!/bin/sh\nid -u\n"), 0o4755); err != nil {
		t.Fatal(err)
	}
	if err := filepath.Walk(layer, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, sandbox.DefaultUID, sandbox.DefaultGID)
	}); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(layer, "suid"), 0o4755) // chown cleared it
	before := snapshotTree(t, layer)
	diskDir := testbin.TempDir(t)

	sb := s.startUnmanaged(t, sandbox.Spec{DiskDir: diskDir, HomeLayer: layer})
	if out := mustOK(t, sb, "sh", "-c", `cat "$HOME/notes.txt" "$HOME/.cache/go-build/x"`); out != "from the layer\ncached" {
		t.Fatalf("HOME from the layer: %q", out)
	}
	mustOK(t, sb, "sh", "-c", `echo mine > "$HOME/new.txt" && echo changed > "$HOME/notes.txt" && rm "$HOME/.gitconfig" && mkdir -p "$HOME/.npm" && echo c > "$HOME/.npm/c"`)
	if r := sh(t, sb, `cat "$HOME/.gitconfig" 2>&1; echo rc=$?`); !strings.Contains(r.out(), "rc=1") {
		t.Fatalf("a file deleted from HOME is still there: %q", r.out())
	}
	if got := snapshotTree(t, layer); got != before {
		t.Fatalf("the box changed its HOME layer:\nbefore %s\nafter  %s", before, got)
	}
	if b, err := os.ReadFile(filepath.Join(diskDir, "home", "new.txt")); err != nil || string(b) != "mine\n" {
		t.Fatalf("a file the box wrote in HOME is not on its disk: %q, %v", b, err)
	}
	if r := sh(t, sb, `"$HOME/suid"`); strings.TrimSpace(r.out()) != "1000" {
		t.Fatalf("a setuid file of the layer ran as %q, want the box user 1000", r.out())
	}
	if err := sb.Destroy(ctxFor(t)); err != nil {
		t.Fatal(err)
	}

	// The next box on the same disk: the first one's HOME, changes and all.
	sb2 := s.start(t, sandbox.Spec{DiskDir: diskDir, HomeLayer: layer})
	if out := mustOK(t, sb2, "sh", "-c", `cat "$HOME/new.txt" "$HOME/notes.txt" "$HOME/.npm/c"; test -e "$HOME/.gitconfig" || echo gone`); out != "mine\nchanged\nc\ngone" {
		t.Fatalf("the second box's HOME: %q", out)
	}
}

// snapshotTree lists a tree's paths, modes and contents.
func snapshotTree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		b.WriteString(rel + " " + fi.Mode().String())
		if fi.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			b.WriteString(" " + string(c))
		}
		b.WriteString("\n")
		return nil
	})
	return b.String()
}

// testWorkspaceLayer: a workspace with a Layer (a prepared environment's
// checkout files) shows the layer's files under the workspace's own;
// what the box writes, changes and deletes there, the layer's files
// included, lands in the workspace on the host, never in the layer; the
// next box on the same workspace and layer sees the first one's changes.
// A backend that is no sandbox.LayerProvider refuses the spec.
func (s *suite) testWorkspaceLayer(t *testing.T) {
	layer := filepath.Join(testbin.TempDir(t), "layer")
	for p, c := range map[string]string{"node_modules/pkg/index.js": "module.exports = 1\n", "node_modules/pkg/package.json": "{}\n", "gen.txt": "generated\n", "src/built.o": "obj\n"} {
		f := filepath.Join(layer, p)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := filepath.Walk(layer, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, sandbox.DefaultUID, sandbox.DefaultGID)
	}); err != nil {
		t.Fatal(err)
	}
	before := snapshotTree(t, layer)
	base := testbin.TempDir(t)
	ws, diskDir := filepath.Join(base, "w"), filepath.Join(base, ".box")
	for _, d := range []string{ws, filepath.Join(ws, "src"), diskDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ws, "src", "main.c"), []byte("int main;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{ws, filepath.Join(ws, "src"), filepath.Join(ws, "src", "main.c")} {
		os.Chown(p, sandbox.DefaultUID, sandbox.DefaultGID)
	}
	spec := sandbox.Spec{DiskDir: diskDir, Workspaces: []sandbox.Workspace{{Name: "w", HostPath: ws, Layer: layer}}}
	if _, ok := s.p.(sandbox.LayerProvider); !ok {
		_, err := s.p.Start(ctxFor(t), spec)
		var se *sandbox.SpecError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), "layer") {
			t.Fatalf("a workspace layer on %s: %v, want a spec error about the layer", s.p.Name(), err)
		}
		return
	}
	sb := s.startUnmanaged(t, spec)
	if out := mustOK(t, sb, "sh", "-c", `cat node_modules/pkg/index.js gen.txt src/main.c src/built.o`); out != "module.exports = 1\ngenerated\nint main;\nobj" {
		t.Fatalf("the workspace over its layer: %q", out)
	}
	mustOK(t, sb, "sh", "-c", `echo 'module.exports = 2' > node_modules/pkg/index.js && rm gen.txt && echo new > node_modules/new.js && rm -r src/built.o && echo mine > src/mine.c`)
	if got := snapshotTree(t, layer); got != before {
		t.Fatalf("the box changed its workspace's layer:\nbefore %s\nafter  %s", before, got)
	}
	for p, want := range map[string]string{"node_modules/pkg/index.js": "module.exports = 2\n", "node_modules/new.js": "new\n", "src/mine.c": "mine\n"} {
		if b, err := os.ReadFile(filepath.Join(ws, p)); err != nil || string(b) != want {
			t.Errorf("%s on the host: %q %v, want the box's write %q", p, b, err, want)
		}
	}
	if err := sb.Destroy(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	sb2 := s.start(t, spec)
	if out := mustOK(t, sb2, "sh", "-c", `cat node_modules/pkg/index.js node_modules/pkg/package.json node_modules/new.js; test -e gen.txt || echo gen gone; test -e src/built.o || echo obj gone`); out != "module.exports = 2\n{}\nnew\ngen gone\nobj gone" {
		t.Fatalf("the next box on the workspace: %q", out)
	}
}
