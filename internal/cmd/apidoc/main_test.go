package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/internal/testbin"
)

// TestUpToDate: docs/api.md is what apidoc makes of server/openapi.json
// now. When it fails, run go generate ./internal/cmd/apidoc and commit
// docs/api.md.
func TestUpToDate(t *testing.T) {
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(root, "server", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := Render(src)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "docs", "api.md"))
	if err != nil {
		t.Fatalf("%v: run go generate ./internal/cmd/apidoc", err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("docs/api.md is not what server/openapi.json makes (first difference at line %d:\n have %q\n want %q): run go generate ./internal/cmd/apidoc and commit docs/api.md", i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("docs/api.md is not what server/openapi.json makes (%d lines, want %d): run go generate ./internal/cmd/apidoc and commit docs/api.md", len(gl), len(wl))
	}
}

// TestRender: every route and schema of the document is in the reference.
func TestRender(t *testing.T) {
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(root, "server", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	md, err := Render(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"### POST /v1/sessions\n", "### GET /v1/sessions/{id}/events\n", "### CreateRequest\n", "| `repos` (required) |", "No token needed."} {
		if !bytes.Contains(md, []byte(s)) {
			t.Errorf("the reference has no %q", s)
		}
	}
}
