package sandboxtest

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/harvest-dev/harvest/sandbox"
)

// The conformance suite's file operations: read, write, stat, list, glob
// and grep, through the in-box agent.

func testFiles(t *testing.T, sb *sandbox.Sandbox, hostWS string) {
	ctx := ctxFor(t)
	dir := sb.WorkspacePath("w") + "/files"
	big := make([]byte, 9<<20+3) // three chunks
	rand.Read(big)
	cases := map[string][]byte{"empty": {}, "small.txt": []byte("hello\n"), "bin": {0, 1, 2, 255}, "big": big}
	for name, data := range cases {
		p := dir + "/sub/" + name
		if err := sb.WriteFile(ctx, p, data, 0o640); err != nil {
			t.Fatalf("WriteFile %s: %v", name, err)
		}
		got, err := sb.ReadFile(ctx, p)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("ReadFile %s: %d bytes, %v", name, len(got), err)
		}
	}
	// Overwriting with shorter content truncates.
	if err := sb.WriteFile(ctx, dir+"/sub/big", []byte("short"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := sb.ReadFile(ctx, dir+"/sub/big"); string(got) != "short" {
		t.Errorf("overwrite: %q", got)
	}
	// What the box wrote lands in the host workspace, owned by the box user.
	if hostWS != "" && !sb.Unsafe() {
		fi, err := os.Stat(filepath.Join(hostWS, "files/sub/small.txt"))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != sandbox.DefaultUID {
			t.Errorf("file owner on the host: %d", st.Uid)
		}
	}
	fi, err := sb.Stat(ctx, dir+"/sub/small.txt")
	if err != nil || fi.Size != 6 || fi.Mode.Perm() != 0o640 || fi.IsDir() {
		t.Errorf("Stat: %+v %v", fi, err)
	}
	if err := sb.AppendFile(ctx, dir+"/sub/small.txt", []byte("more\n")); err != nil {
		t.Fatal(err)
	}
	if got, _ := sb.ReadFile(ctx, dir+"/sub/small.txt"); string(got) != "hello\nmore\n" {
		t.Errorf("append: %q", got)
	}
	mustOK(t, sb, "ln", "-s", "small.txt", dir+"/sub/link")
	if fi, err := sb.Lstat(ctx, dir+"/sub/link"); err != nil || fi.Mode&fs.ModeSymlink == 0 || fi.Link != "small.txt" {
		t.Errorf("Lstat symlink: %+v %v", fi, err)
	}
	ents, err := sb.ReadDir(ctx, dir+"/sub")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	if got := strings.Join(names, ","); got != "big,bin,empty,link,small.txt" {
		t.Errorf("ReadDir: %s", got)
	}
	if err := sb.Rename(ctx, dir+"/sub/bin", dir+"/bin2"); err != nil {
		t.Fatal(err)
	}
	if err := sb.Mkdir(ctx, dir+"/a/b/c", true); err != nil {
		t.Fatal(err)
	}
	if err := sb.Mkdir(ctx, dir+"/a", false); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Mkdir existing: %v", err)
	}
	if err := sb.Remove(ctx, dir+"/a"); err == nil {
		t.Error("Remove of a non-empty dir succeeded")
	}
	if err := sb.RemoveAll(ctx, dir+"/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Stat(ctx, dir+"/a"); !isNotExist(err) {
		t.Errorf("after RemoveAll: %v", err)
	}
	if _, err := sb.ReadFile(ctx, dir+"/missing"); !isNotExist(err) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := sb.ReadFile(ctx, dir); err == nil {
		t.Error("ReadFile of a directory succeeded")
	}
	if sb.Unsafe() {
		return
	}
	if err := sb.WriteFile(ctx, "/usr/harvest-should-not-exist", []byte("x"), 0o644); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("writing the read-only system: %v", err)
	}
	// Relative paths resolve against the workdir.
	if got, err := sb.ReadFile(ctx, "files/sub/empty"); err != nil || len(got) != 0 {
		t.Errorf("relative path: %v", err)
	}
}

func testGlobGrep(t *testing.T, sb *sandbox.Sandbox) {
	ctx := ctxFor(t)
	root := sb.WorkspacePath("w") + "/repo"
	files := map[string]string{
		".gitignore":           "build/\n*.log\n!keep.log\n",
		"main.go":              "package main\n\nfunc main() { println(\"Hello\") }\n",
		"pkg/util.go":          "package pkg\n// TODO: hello there\n",
		"pkg/util_test.go":     "package pkg\n",
		"pkg/.gitignore":       "gen_*.go\n",
		"pkg/gen_x.go":         "package pkg // hello generated\n",
		"pkg/trace.log":        "hello from a log below the root .gitignore\n",
		"build/out.go":         "package build // hello\n",
		"debug.log":            "hello log\n",
		"keep.log":             "hello kept\n",
		"docs/a/b/c/deep.go":   "package c\n",
		".git/config":          "hello from git\n",
		"bin.dat":              "hello\x00binary",
		"nested/repo/skip.txt": "hello nested\n",
	}
	for name, content := range files {
		if err := sb.WriteFile(ctx, root+"/"+name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	paths, _, err := sb.Glob(ctx, "**/*.go", sandbox.GlobOptions{Root: root, GitIgnore: true})
	if err != nil {
		t.Fatal(err)
	}
	rel := func(ps []string) string {
		var out []string
		for _, p := range ps {
			out = append(out, strings.TrimPrefix(p, root+"/"))
		}
		sort.Strings(out)
		return strings.Join(out, ",")
	}
	if got := rel(paths); got != "docs/a/b/c/deep.go,main.go,pkg/util.go,pkg/util_test.go" {
		t.Errorf("glob with gitignore: %s", got)
	}
	paths, _, _ = sb.Glob(ctx, "**/*.go", sandbox.GlobOptions{Root: root})
	if !strings.Contains(rel(paths), "build/out.go") || !strings.Contains(rel(paths), "pkg/gen_x.go") {
		t.Errorf("glob without gitignore: %s", rel(paths))
	}
	paths, trunc, _ := sb.Glob(ctx, "**/*.go", sandbox.GlobOptions{Root: root, Limit: 2})
	if len(paths) != 2 || !trunc {
		t.Errorf("glob limit: %d %v", len(paths), trunc)
	}
	// A walk that starts in a subdirectory obeys the repository root's
	// .gitignore (*.log) as well as its own directory's (gen_*.go).
	paths, _, _ = sb.Glob(ctx, "*", sandbox.GlobOptions{Root: root + "/pkg", GitIgnore: true})
	if got := rel(paths); got != "pkg/.gitignore,pkg/util.go,pkg/util_test.go" {
		t.Errorf("glob from a subdirectory with gitignore: %s", got)
	}
	if res, _ := sb.Grep(ctx, sandbox.GrepOptions{Root: root + "/pkg", Pattern: "hello", GitIgnore: true}); len(res.Matches) != 1 {
		t.Errorf("grep from a subdirectory with gitignore: %+v", res.Matches)
	}
	paths, _, _ = sb.Glob(ctx, "pkg/*.go", sandbox.GlobOptions{Root: root})
	if got := rel(paths); got != "pkg/gen_x.go,pkg/util.go,pkg/util_test.go" {
		t.Errorf("glob pkg/*.go: %s", got)
	}

	res, err := sb.Grep(ctx, sandbox.GrepOptions{Root: root, Pattern: "hello", IgnoreCase: true, GitIgnore: true})
	if err != nil {
		t.Fatal(err)
	}
	var hits []string
	for _, m := range res.Matches {
		hits = append(hits, fmt.Sprintf("%s:%d", strings.TrimPrefix(m.Path, root+"/"), m.Line))
	}
	sort.Strings(hits)
	if got := strings.Join(hits, ","); got != "keep.log:1,main.go:3,nested/repo/skip.txt:1,pkg/util.go:2" {
		t.Errorf("grep: %s", got)
	}
	res, _ = sb.Grep(ctx, sandbox.GrepOptions{Root: root, Pattern: "hello", Include: "*.go", GitIgnore: true})
	if len(res.Matches) != 1 || !strings.HasSuffix(res.Matches[0].Path, "pkg/util.go") || res.Matches[0].Text != "// TODO: hello there" {
		t.Errorf("grep include: %+v", res.Matches)
	}
	res, _ = sb.Grep(ctx, sandbox.GrepOptions{Root: root, Pattern: "(", Literal: true})
	if len(res.Matches) != 1 {
		t.Errorf("grep literal: %+v", res.Matches)
	}
	if _, err := sb.Grep(ctx, sandbox.GrepOptions{Root: root, Pattern: "("}); err == nil {
		t.Error("grep with a bad regexp succeeded")
	}
}
