package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/internal/testreq"
)

// The agent CLIs the end-to-end tests run, pinned: scripts/setup installs
// exactly these versions, and the sim scripts the tests play
// (sim/examples/claude-code.yaml, opencode.yaml) are written against what
// these versions send.
const (
	ClaudeCodePackage = "@anthropic-ai/claude-code"
	ClaudeCodeVersion = "2.1.197"
	OpenCodePackage   = "opencode-ai"
	OpenCodeVersion   = "1.18.33"

	// NPMPrefix is where scripts/setup installs them (npm install --prefix).
	NPMPrefix = "/opt/harvest/npm"
)

// RequireCLIs reports whether a missing agent CLI fails the tests rather
// than skipping them: testreq.Required(testreq.CLIs).
func RequireCLIs() bool { return testreq.Required(testreq.CLIs) }

// Claude returns the path of the Claude Code CLI: $HARVEST_CLAUDE_BIN, else
// the one scripts/setup installs, else claude on PATH. When none is found
// the test is skipped, or fails where testreq.CLIs is required.
func Claude(t testing.TB) string {
	t.Helper()
	return findCLI(t, "HARVEST_CLAUDE_BIN", "claude", ClaudeCodePackage, ClaudeCodeVersion)
}

// OpenCode returns the path of the OpenCode CLI, found like Claude's
// ($HARVEST_OPENCODE_BIN).
func OpenCode(t testing.TB) string {
	t.Helper()
	return findCLI(t, "HARVEST_OPENCODE_BIN", "opencode", OpenCodePackage, OpenCodeVersion)
}

func findCLI(t testing.TB, env, name, pkg, version string) string {
	t.Helper()
	tried := []string{}
	if p := os.Getenv(env); p != "" {
		if isExecutable(p) {
			return checkVersion(t, p, version)
		}
		testreq.Unavailable(t, testreq.CLIs, "$%s=%s is not an executable file", env, p)
	}
	p := filepath.Join(NPMPrefix, "node_modules", ".bin", name)
	if isExecutable(p) {
		return checkVersion(t, p, version)
	}
	tried = append(tried, p)
	if p, err := exec.LookPath(name); err == nil {
		return checkVersion(t, p, version)
	}
	tried = append(tried, name+" on $PATH")
	testreq.Unavailable(t, testreq.CLIs, "%s is not installed (tried %s): run scripts/setup, or npm install --prefix %s %s@%s, or set $%s",
		name, strings.Join(tried, ", "), NPMPrefix, pkg, version, env)
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// checkVersion logs the CLI's version, and says so when it is not the pinned
// one (the scripts may then not match what it sends).
func checkVersion(t testing.TB, p, want string) string {
	t.Helper()
	out, err := exec.Command(p, "--version").Output()
	got := strings.TrimSpace(string(out))
	switch {
	case err != nil:
		t.Logf("%s --version: %v", p, err)
	case !strings.HasPrefix(got, want):
		t.Logf("%s is version %q; the tests are written for %s", p, got, want)
	default:
		t.Logf("%s: %s", p, got)
	}
	return p
}

// LocalRequired reports whether a machine without the local sandbox
// backend fails the tests instead of skipping them:
// testreq.Required(testreq.Local).
func LocalRequired() bool { return testreq.Required(testreq.Local) }

// DockerRequired reports whether a machine without a working docker
// backend fails the tests instead of skipping them:
// testreq.Required(testreq.Docker).
func DockerRequired() bool { return testreq.Required(testreq.Docker) }

// DockerImage is the image docker-backend tests use:
// $HARVEST_TEST_DOCKER_IMAGE, else the base image scripts/setup builds.
func DockerImage() string {
	if v := os.Getenv("HARVEST_TEST_DOCKER_IMAGE"); v != "" {
		return v
	}
	return "harvest/base:bookworm"
}
