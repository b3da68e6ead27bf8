package deptest

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/internal/testreq"
)

// maxLines bounds a non-test Go file: past it, a file holds more than one
// idea, and should be split along its seams.
const maxLines = 700

// TestFileSizes fails for a non-test Go file of the module over maxLines.
func TestFileSizes(t *testing.T) {
	out, err := exec.Command("git", "-C", "../..", "ls-files", "*.go").Output()
	if err != nil {
		testreq.Unavailable(t, testreq.Git, "not a git checkout: git ls-files: %v", err)
	}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile("../../" + f)
		if err != nil {
			continue // deleted in the working tree
		}
		if n := bytes.Count(b, []byte("\n")); n > maxLines {
			t.Errorf("%s has %d lines (at most %d): split it along its seams", f, n, maxLines)
		}
	}
}
