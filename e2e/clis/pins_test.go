package clis

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/harvest-dev/harvest/internal/testbin"
)

// TestPinsAgree: scripts/setup installs the CLI versions the tests (and the
// example scripts written against them) expect.
func TestPinsAgree(t *testing.T) {
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	setup, err := os.ReadFile(filepath.Join(root, "scripts", "setup"))
	if err != nil {
		t.Fatal(err)
	}
	for _, pin := range []struct{ variable, want string }{
		{"claude_code_version", testbin.ClaudeCodeVersion},
		{"opencode_version", testbin.OpenCodeVersion},
		{"eventsource_version", testbin.EventSourceVersion},
		{"cli_prefix", testbin.NPMPrefix},
	} {
		got := "nothing"
		if m := regexp.MustCompile(`(?m)^` + pin.variable + `=(\S+)$`).FindSubmatch(setup); m != nil {
			got = string(m[1])
		}
		if got != pin.want {
			t.Errorf("scripts/setup sets %s to %s; internal/testbin/clis.go says %s", pin.variable, got, pin.want)
		}
	}
}
