package tools

import (
	"strings"
	"testing"
)

func setupTree(t *testing.T, b *testBox) {
	t.Helper()
	b.sh(t, `git init -q . && mkdir -p src/pkg build node_modules/dep &&
printf 'build/\nnode_modules/\n*.log\n' > .gitignore &&
printf 'package main\n\nfunc Hello() string { return "hello" }\n' > src/main.go &&
printf 'package pkg\n\n// HELLO again\nvar x = 1\n' > src/pkg/util.go &&
printf 'hello from a test\n' > src/main_test.go &&
printf 'hello generated\n' > build/out.go &&
printf 'hello dep\n' > node_modules/dep/index.go &&
printf 'hello log\n' > debug.log &&
printf 'notes about hello\n' > README.md`)
}

func TestGlob(t *testing.T) {
	b := newBox(t, Config{})
	setupTree(t, b)
	r := b.call(t, "glob", `{"pattern": "**/*.go"}`)
	wantOK(t, r)
	want := ws + "/src/main.go\n" + ws + "/src/main_test.go\n" + ws + "/src/pkg/util.go"
	if r.Output != want {
		t.Errorf("got:\n%s\nwant (sorted, .gitignore respected):\n%s", r.Output, want)
	}
	wantOK(t, b.call(t, "glob", `{"pattern": "*.go", "path": "src/pkg"}`), ws+"/src/pkg/util.go")
	wantOK(t, b.call(t, "glob", map[string]any{"pattern": ws + "/src/*.go"}), ws+"/src/main.go\n"+ws+"/src/main_test.go")
	wantOK(t, b.call(t, "glob", `{"pattern": "**/*.rs"}`), `No files match "**/*.rs"`)
	wantErr(t, b.call(t, "glob", `{"pattern": "src/[a"}`), "not a valid glob")
	wantErr(t, b.call(t, "glob", `{"pattern": "../**"}`), `may not contain ".."`)
	wantErr(t, b.call(t, "glob", `{"pattern": "*", "path": "README.md"}`), "is a file, not a directory")
	wantDenied(t, b.call(t, "glob", `{"pattern": "*", "path": "/etc"}`), "outside the workspace")
	wantDenied(t, b.call(t, "glob", `{"pattern": "/etc/*"}`), "outside the workspace")

	small := newBox(t, Config{Limits: Limits{GlobResults: 2}})
	setupTree(t, small)
	r = small.call(t, "glob", `{"pattern": "**/*.go"}`)
	wantOK(t, r, ws+"/src/main.go\n"+ws+"/src/main_test.go\n[... more paths match; only the first 2 are shown. Narrow the pattern or path.]")
	if !r.Truncated {
		t.Error("not marked truncated")
	}
}

func TestGrep(t *testing.T) {
	b := newBox(t, Config{})
	setupTree(t, b)
	r := b.call(t, "grep", `{"pattern": "hello"}`)
	wantOK(t, r, ws+"/README.md\n     1: notes about hello", ws+"/src/main.go\n     3: func Hello() string { return \"hello\" }", ws+"/src/main_test.go\n     1: hello from a test")
	for _, ignored := range []string{"build/out.go", "node_modules", "debug.log"} {
		if strings.Contains(r.Output, ignored) {
			t.Errorf("grep searched %s, which .gitignore excludes:\n%s", ignored, r.Output)
		}
	}
	if strings.Contains(r.Output, "HELLO") {
		t.Error("matched case-insensitively by default")
	}
	r = b.call(t, "grep", `{"pattern": "hello", "ignore_case": true, "include": "*.go", "output_mode": "files"}`)
	wantOK(t, r)
	if want := ws + "/src/main.go\n" + ws + "/src/main_test.go\n" + ws + "/src/pkg/util.go"; r.Output != want {
		t.Errorf("files mode:\n%s\nwant:\n%s", r.Output, want)
	}
	wantOK(t, b.call(t, "grep", `{"pattern": "return \"hello\" }", "literal": true, "path": "src/main.go"}`), "     3: func Hello()")
	wantOK(t, b.call(t, "grep", `{"pattern": "nomatchanywhere"}`), "No matches", "files searched")
	wantErr(t, b.call(t, "grep", `{"pattern": "(?<=x)y"}`), "not a valid RE2 regular expression", "literal")
	wantErr(t, b.call(t, "grep", `{"pattern": "x", "output_mode": "lines"}`), `field "output_mode" must be one of "content", "files"`)
	wantDenied(t, b.call(t, "grep", `{"pattern": "root", "path": "/etc/passwd"}`), "outside the workspace")

	small := newBox(t, Config{Limits: Limits{GrepResults: 2}})
	setupTree(t, small)
	r = small.call(t, "grep", `{"pattern": "hello", "ignore_case": true}`)
	wantOK(t, r, "more lines match; the first 2 are shown")
	if !r.Truncated || strings.Count(r.Output, ": ") != 2 {
		t.Errorf("want 2 lines, truncated:\n%s", r.Output)
	}
}
