package tools

import (
	"fmt"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	b := newBox(t, Config{})
	var lines []string
	for i := 1; i <= 3000; i++ {
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	b.write(t, ws+"/big.txt", strings.Join(lines, "\n")+"\n")
	b.write(t, ws+"/small.go", "package main\n\nfunc main() {}")

	t.Run("numbered like cat -n", func(t *testing.T) {
		r := b.call(t, "read", `{"path": "small.go"}`)
		wantOK(t, r)
		want := "     1\tpackage main\n     2\t\n     3\tfunc main() {}\n"
		if r.Output != want {
			t.Errorf("got %q, want %q", r.Output, want)
		}
	})
	t.Run("default limit says where to continue", func(t *testing.T) {
		r := b.call(t, "read", map[string]any{"path": ws + "/big.txt"})
		wantOK(t, r, "     1\tline 1\n", "  2000\tline 2000\n", "read on with offset=2001")
		if strings.Contains(r.Output, "line 2001") || !r.Truncated {
			t.Errorf("read past the default limit or did not say it was truncated:\n%s", r.Output[len(r.Output)-200:])
		}
	})
	t.Run("offset and limit", func(t *testing.T) {
		r := b.call(t, "read", `{"path": "big.txt", "offset": 2999, "limit": 5}`)
		wantOK(t, r)
		if r.Output != "  2999\tline 2999\n  3000\tline 3000\n" || r.Truncated {
			t.Errorf("got %q (truncated %v)", r.Output, r.Truncated)
		}
		r = b.call(t, "read", `{"path": "big.txt", "offset": 10, "limit": 2}`)
		wantOK(t, r, "    10\tline 10\n    11\tline 11\n", "offset=12")
	})
	t.Run("offset past the end", func(t *testing.T) {
		wantErr(t, b.call(t, "read", `{"path": "big.txt", "offset": 3001}`), "has 3000 lines", "offset 3001 is past the end")
	})
	t.Run("output cap", func(t *testing.T) {
		long := strings.Repeat("x", 1500)
		var ls []string
		for i := 0; i < 100; i++ {
			ls = append(ls, long)
		}
		b.write(t, ws+"/wide.txt", strings.Join(ls, "\n"))
		r := b.call(t, "read", `{"path": "wide.txt"}`)
		wantOK(t, r, "output capped at 65536 bytes", "offset=")
		if len(r.Output) > DefaultReadMaxBytes+300 || !r.Truncated {
			t.Errorf("output is %d bytes (truncated %v)", len(r.Output), r.Truncated)
		}
	})
	t.Run("long lines are clipped", func(t *testing.T) {
		b.write(t, ws+"/oneline.js", strings.Repeat("a", 10000)+"\nsecond\n")
		r := b.call(t, "read", `{"path": "oneline.js"}`)
		wantOK(t, r, "[line clipped: 10000 bytes]", "     2\tsecond")
		if len(r.Output) > 2200 {
			t.Errorf("a clipped line still takes %d bytes", len(r.Output))
		}
	})
	t.Run("binary", func(t *testing.T) {
		b.sh(t, `printf '\211PNG\r\n\032\n\000\000\000\rIHDR' > img.png`)
		r := b.call(t, "read", `{"path": "img.png"}`)
		wantErr(t, r, "binary file", "image/png", "xxd")
	})
	t.Run("directory", func(t *testing.T) {
		b.sh(t, "mkdir -p d/sub && touch d/a d/b")
		wantErr(t, b.call(t, "read", `{"path": "d"}`), "is a directory", "3 entries", "a\nb\nsub/")
	})
	t.Run("missing file suggests similar names", func(t *testing.T) {
		wantErr(t, b.call(t, "read", `{"path": "smal.go"}`), ws+"/smal.go does not exist", "Did you mean "+ws+"/small.go?")
		wantErr(t, b.call(t, "read", `{"path": "nodir/x.go"}`), "does not exist (nor does its directory "+ws+"/nodir)")
	})
	t.Run("empty", func(t *testing.T) {
		b.sh(t, ": > empty")
		wantOK(t, b.call(t, "read", `{"path": "empty"}`), "is empty")
	})
	t.Run("crlf", func(t *testing.T) {
		b.write(t, ws+"/dos.txt", "a\r\nb\r\n")
		r := b.call(t, "read", `{"path": "dos.txt"}`)
		wantOK(t, r, "     1\ta\n     2\tb\n", "CRLF")
		if strings.Contains(r.Output, "\r") {
			t.Errorf("carriage returns in the output: %q", r.Output)
		}
	})
}

func TestWrite(t *testing.T) {
	b := newBox(t, Config{})
	r := b.call(t, "write", `{"path": "a/b/c.txt", "content": "hello\nworld\n"}`)
	wantOK(t, r, "Created "+ws+"/a/b/c.txt", "12 bytes", "2 lines")
	if len(r.Paths) != 1 || r.Paths[0] != ws+"/a/b/c.txt" {
		t.Errorf("paths: %v", r.Paths)
	}
	if got := b.readFile(t, ws+"/a/b/c.txt"); got != "hello\nworld\n" {
		t.Errorf("file holds %q", got)
	}
	// The box user owns what write created (it ran in the box).
	if got := b.sh(t, "stat -c %u:%a a/b/c.txt"); got != "1000:644\n" {
		t.Errorf("owner and mode: %q", got)
	}

	t.Run("overwrite needs a read", func(t *testing.T) {
		b.write(t, ws+"/existing.txt", "precious\n")
		wantErr(t, b.call(t, "write", `{"path": "existing.txt", "content": "x"}`), "have not read it", "read it first")
		if got := b.readFile(t, ws+"/existing.txt"); got != "precious\n" {
			t.Fatalf("the refused write changed the file: %q", got)
		}
		wantOK(t, b.call(t, "read", `{"path": "existing.txt"}`))
		wantOK(t, b.call(t, "write", `{"path": "existing.txt", "content": "new\n"}`), "Overwrote "+ws+"/existing.txt (it had 9 bytes)")
		// Our own write counts as seen: writing again is fine.
		wantOK(t, b.call(t, "write", `{"path": "existing.txt", "content": "newer\n"}`))
		// A change behind the model's back is not.
		b.sh(t, "echo changed >> existing.txt")
		wantErr(t, b.call(t, "write", `{"path": "existing.txt", "content": "x"}`), "changed since you last read it")
	})
	t.Run("mode is kept", func(t *testing.T) {
		b.sh(t, "printf '#!/bin/sh\\n' > run.sh && chmod 755 run.sh")
		wantOK(t, b.call(t, "read", `{"path": "run.sh"}`))
		wantOK(t, b.call(t, "write", `{"path": "run.sh", "content": "#!/bin/sh\necho hi\n"}`))
		if got := b.sh(t, "stat -c %a run.sh && ./run.sh"); got != "755\nhi\n" {
			t.Errorf("got %q", got)
		}
	})
	t.Run("not into .git", func(t *testing.T) {
		b.sh(t, "git init -q repo")
		wantDenied(t, b.call(t, "write", `{"path": "repo/.git/hooks/pre-commit", "content": "evil"}`), "inside a .git directory")
		if b.exists(t, ws+"/repo/.git/hooks/pre-commit") {
			t.Fatal("the hook was written")
		}
		wantDenied(t, b.call(t, "edit", `{"path": "repo/.git/HEAD", "old_string": "ref", "new_string": "x"}`), "inside a .git directory")
		// .gitignore is a normal file.
		wantOK(t, b.call(t, "write", `{"path": "repo/.gitignore", "content": "*.o\n"}`))
	})
	t.Run("a directory", func(t *testing.T) {
		wantErr(t, b.call(t, "write", `{"path": "a/b", "content": "x"}`), "is a directory")
	})
}

func TestEdit(t *testing.T) {
	b := newBox(t, Config{})
	src := `package calc

func Add(a, b int) int {
	return a - b
}

func Sub(a, b int) int {
	return a - b
}
`
	b.write(t, ws+"/calc.go", src)

	t.Run("unique replacement", func(t *testing.T) {
		r := b.call(t, "edit", map[string]any{"path": "calc.go", "old_string": "func Add(a, b int) int {\n\treturn a - b", "new_string": "func Add(a, b int) int {\n\treturn a + b"})
		wantOK(t, r, "Edited "+ws+"/calc.go: replaced 1 occurrence.", "     4\t\treturn a + b")
		if len(r.Paths) != 1 || r.Paths[0] != ws+"/calc.go" {
			t.Errorf("paths: %v", r.Paths)
		}
		got := b.readFile(t, ws+"/calc.go")
		if want := strings.Replace(src, "return a - b", "return a + b", 1); got != want {
			t.Errorf("file is now:\n%s", got)
		}
	})
	t.Run("several matches", func(t *testing.T) {
		b.write(t, ws+"/dup.txt", "x = 1\ny = 2\nx = 1\n\nx = 1\n")
		r := b.call(t, "edit", `{"path": "dup.txt", "old_string": "x = 1", "new_string": "x = 3"}`)
		wantErr(t, r, "occurs 3 times", "lines 1, 3, 5", "replace_all")
		if got := b.readFile(t, ws+"/dup.txt"); got != "x = 1\ny = 2\nx = 1\n\nx = 1\n" {
			t.Fatalf("a failed edit changed the file: %q", got)
		}
		wantOK(t, b.call(t, "edit", `{"path": "dup.txt", "old_string": "x = 1", "new_string": "x = 3", "replace_all": true}`), "replaced 3 occurrence(s)")
		if got := b.readFile(t, ws+"/dup.txt"); got != "x = 3\ny = 2\nx = 3\n\nx = 3\n" {
			t.Errorf("got %q", got)
		}
	})
	t.Run("nearest match", func(t *testing.T) {
		r := b.call(t, "edit", map[string]any{"path": "calc.go", "old_string": "func Sub(a, b int) int {\n\treturn a - c\n}", "new_string": "x"})
		wantErr(t, r, "old_string was not found", "most similar text is at lines 7-9", "     8\t\treturn a - b",
			`First difference: line 8 is "\treturn a - b" in the file, but old_string has "\treturn a - c"`)
	})
	t.Run("whitespace only", func(t *testing.T) {
		r := b.call(t, "edit", map[string]any{"path": "calc.go", "old_string": "func Sub(a, b int) int {\n    return a - b\n}", "new_string": "x"})
		wantErr(t, r, "lines 7-9", "differ only in whitespace", `line 8 is "\treturn a - b" in the file, "    return a - b" in old_string`)
	})
	t.Run("nothing similar", func(t *testing.T) {
		wantErr(t, b.call(t, "edit", `{"path": "calc.go", "old_string": "zzzz qqqq", "new_string": "x"}`), "Nothing in the file resembles it")
	})
	t.Run("crlf file", func(t *testing.T) {
		b.write(t, ws+"/dos.txt", "one\r\ntwo\r\nthree\r\n")
		wantOK(t, b.call(t, "edit", `{"path": "dos.txt", "old_string": "one\ntwo", "new_string": "1\n2"}`))
		if got := b.readFile(t, ws+"/dos.txt"); got != "1\r\n2\r\nthree\r\n" {
			t.Errorf("got %q", got)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		wantErr(t, b.call(t, "edit", `{"path": "calc.go", "old_string": "a", "new_string": "a"}`), "identical")
		wantErr(t, b.call(t, "edit", `{"path": "calc.go", "old_string": "", "new_string": "a"}`), "old_string is empty")
		wantErr(t, b.call(t, "edit", `{"path": "nope.go", "old_string": "a", "new_string": "b"}`), "does not exist", "use write")
	})
}
