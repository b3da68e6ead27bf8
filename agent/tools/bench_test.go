package tools

import (
	"testing"
)

// BenchmarkTools measures what a tool call costs on top of the work itself:
// decoding, the policy checks (symlink resolution is one Lstat per path
// component) and the sandbox round trips.
func BenchmarkTools(b *testing.B) {
	box := newBox(b, Config{Policy: DefaultPolicy()})
	box.write(b, ws+"/src/main.go", "package main\n\nfunc main() {}\n")
	for _, c := range []struct{ name, tool, in string }{
		{"read", "read", `{"path": "src/main.go"}`},
		{"write", "write", `{"path": "src/new.go", "content": "package main\n"}`},
		{"bash_true", "bash", `{"command": "true"}`},
		{"glob", "glob", `{"pattern": "**/*.go"}`},
		{"grep", "grep", `{"pattern": "main"}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if r := box.call(b, c.tool, c.in); r.IsError {
					b.Fatal(r.Output)
				}
			}
		})
	}
}
