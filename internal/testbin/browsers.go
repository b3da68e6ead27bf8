package testbin

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/internal/testreq"
)

// The client-side tools the API's tests run against a real server
// (server/browser_test.go): a headless Chromium opening an EventSource, and
// the npm EventSource client under node. scripts/setup installs both:
// Chromium from the distribution, eventsource pinned into NPMPrefix.
const (
	EventSourcePackage = "eventsource"
	EventSourceVersion = "3.0.7"
)

// Chromium returns the path of a Chromium (or Chrome): $HARVEST_CHROMIUM_BIN,
// else chromium, chromium-browser or google-chrome on $PATH. When none is
// found the test is skipped, or fails where testreq.Chromium is required.
func Chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("HARVEST_CHROMIUM_BIN"); p != "" {
		if isExecutable(p) {
			return p
		}
		testreq.Unavailable(t, testreq.Chromium, "$HARVEST_CHROMIUM_BIN=%s is not an executable file", p)
	}
	names := []string{"chromium", "chromium-browser", "google-chrome"}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	testreq.Unavailable(t, testreq.Chromium, "no Chromium (tried %s on $PATH): run scripts/setup, or apt-get install chromium, or set $HARVEST_CHROMIUM_BIN",
		strings.Join(names, ", "))
	return ""
}

// EventSource returns node and the directory of the npm eventsource
// package (require() it by that path): $HARVEST_EVENTSOURCE_DIR, else the
// one scripts/setup installs in NPMPrefix. When either is missing the test
// is skipped, or fails where testreq.EventSource is required.
func EventSource(t testing.TB) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testreq.Unavailable(t, testreq.EventSource, "node is not installed: run scripts/setup, or apt-get install nodejs")
		return "", ""
	}
	dir = os.Getenv("HARVEST_EVENTSOURCE_DIR")
	if dir == "" {
		dir = filepath.Join(NPMPrefix, "node_modules", EventSourcePackage)
	}
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		testreq.Unavailable(t, testreq.EventSource, "the npm package %s is not installed in %s: run scripts/setup, or npm install --prefix %s %s@%s, or set $HARVEST_EVENTSOURCE_DIR",
			EventSourcePackage, dir, NPMPrefix, EventSourcePackage, EventSourceVersion)
		return "", ""
	}
	var pkg struct{ Name, Version string }
	json.Unmarshal(b, &pkg)
	if pkg.Name != EventSourcePackage {
		testreq.Unavailable(t, testreq.EventSource, "%s holds package %q, not %s", dir, pkg.Name, EventSourcePackage)
	}
	if pkg.Version != EventSourceVersion {
		t.Logf("%s is %s version %s; the tests are written for %s", dir, pkg.Name, pkg.Version, EventSourceVersion)
	}
	return node, dir
}
