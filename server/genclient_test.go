package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	// The runtime package the generated client imports: required here so
	// that go.mod (and go mod tidy) keep it, and the generated client
	// builds offline from the module's own requirements.
	_ "github.com/oapi-codegen/runtime"
)

// TestGeneratedClient generates a Go client from the /openapi.json a real
// server serves, with oapi-codegen (a tool of this module: go tool
// oapi-codegen), builds it into testdata/genclient through a build overlay
// (nothing is written to the source tree), and runs that against the
// server: the document must be one a generator takes (no [integer, string]
// unions), and its types must decode what the server really sends.
func TestGeneratedClient(t *testing.T) {
	e := newAPIEnv(t)
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	resp, err := http.Get(e.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !json.Valid(spec) {
		t.Fatalf("GET /openapi.json: %s %.200s", resp.Status, spec)
	}
	dir := t.TempDir()
	specPath, gen := filepath.Join(dir, "openapi.json"), filepath.Join(dir, "client.gen.go")
	if err := os.WriteFile(specPath, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: go %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("generating the client", "tool", "oapi-codegen", "-generate", "types,client", "-package", "main", "-o", gen, specPath)

	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{
		filepath.Join(root, "server", "testdata", "genclient", "client.gen.go"): gen,
	}})
	ovPath := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ovPath, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "genclient")
	run("building the generated client", "build", "-overlay", ovPath, "-o", bin, "./server/testdata/genclient")
	cmd := exec.CommandContext(ctx, bin, e.URL, e.Alice, e.Repo)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("the generated client against the server: %v\n%s", err, out)
	}
}
