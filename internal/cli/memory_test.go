package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestMemoryCommands runs `harvest serve` and the real binary's memory
// commands: set, ls, search, show, export and rm a repository's memory; a
// write the server's --memory-hook refuses is refused with its reason;
// mistakes are usage errors (exit 2, one line); and what was set survives
// a kill -9 of the server.
func TestMemoryCommands(t *testing.T) {
	e := newServeEnv(t)
	hook := filepath.Join(t.TempDir(), "hook")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\nif grep -q password; then echo 'no credentials in memory' >&2; exit 1; fi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := e.start("--memory-hook", hook)
	harvest := func(want int, args ...string) (string, string) {
		t.Helper()
		env := append(slices.Clone(e.env), "HARVEST_SERVER="+s.url, "HARVEST_TOKEN=")
		code, out, errOut := runHarvest(t, env, "", args...)
		if code != want {
			t.Fatalf("harvest %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errOut)
		}
		return out, errOut
	}

	_, errOut := harvest(0, "memory", "set", "--repo", "Octo/Hello", "tests", "--type", "procedure", "-o", "make test needs docker", "-o", "run with -race")
	if !strings.Contains(errOut, "tests [procedure] set with 2 observations") {
		t.Errorf("set: %s", errOut)
	}
	_, errOut = harvest(1, "memory", "set", "--repo", "octo/hello", "db", "--type", "component", "-o", "SQLite \x1b[31min WAL mode")
	if !strings.Contains(errOut, "observations[0] holds a control character") {
		t.Errorf("an observation with an escape sequence: %s", errOut)
	}
	harvest(0, "memory", "set", "--repo", "octo/hello", "db", "--type", "component", "-o", "SQLite in WAL mode")
	harvest(0, "memory", "set", "--repo", "octo/other", "elsewhere", "--type", "note", "-o", "docker elsewhere")

	out, _ := harvest(0, "memory", "ls", "--repo", "octo/hello")
	if !strings.Contains(out, "tests") || !strings.Contains(out, "procedure") || !strings.Contains(out, "db") || strings.Contains(out, "elsewhere") {
		t.Errorf("ls:\n%s", out)
	}
	out, _ = harvest(0, "memory", "search", "--repo", "octo/hello", "DOCKER")
	if !strings.Contains(out, "tests [procedure]  (created by api)") || !strings.Contains(out, "  - make test needs docker  (api)") || strings.Contains(out, "db") {
		t.Errorf("search:\n%s", out)
	}
	out, _ = harvest(0, "memory", "show", "--repo", "octo/hello", "db", "--json")
	if !strings.Contains(out, `"text": "SQLite in WAL mode"`) || !strings.Contains(out, `"session": "api"`) {
		t.Errorf("show --json:\n%s", out)
	}
	out, _ = harvest(0, "memory", "export", "--repo", "octo/hello")
	if want := `{"type":"entity","name":"tests","entityType":"procedure","observations":["make test needs docker","run with -race"]}`; !strings.Contains(out, want) || strings.Count(out, "\n") != 2 {
		t.Errorf("export:\n%s\nwant two lines, one of them %s", out, want)
	}

	_, errOut = harvest(1, "memory", "set", "--repo", "octo/hello", "db", "--type", "component", "-o", "the password is hunter2")
	if !strings.Contains(errOut, "no credentials in memory") {
		t.Errorf("a write the hook refuses: %s", errOut)
	}
	_, errOut = harvest(1, "memory", "show", "--repo", "octo/hello", "ghost")
	if !strings.Contains(errOut, "1 of the 1 entities named are not in the memory") {
		t.Errorf("show of a missing entity: %s", errOut)
	}

	// Mistakes: exit 2, one line, before anything is sent.
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"memory", "ls"}, "give the repository: --repo owner/name"},
		{[]string{"memory", "search", "--repo", "octo/hello"}, "give the text to look for"},
		{[]string{"memory", "show", "--repo", "octo/hello"}, "give the names of the entities to show"},
		{[]string{"memory", "set", "--repo", "octo/hello", "x"}, "give the entity's type: --type"},
		{[]string{"memory", "set", "--repo", "octo/hello"}, "give the entity's name"},
		{[]string{"memory", "rm", "--repo", "octo/hello"}, "give the names of the entities to delete"},
		{[]string{"memory", "ls", "--repo", "octo/hello", "--owner", "a b"}, "--owner: give me"},
		{[]string{"memory", "ls", "--repo", "octo/hello", "--nope"}, "unknown flag: --nope"},
	} {
		_, errOut := harvest(2, c.args...)
		if !strings.Contains(errOut, c.msg) || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
			t.Errorf("harvest %s: %q\nwant one line saying %q", strings.Join(c.args, " "), errOut, c.msg)
		}
	}

	// What was stored survives a kill -9.
	s.cmd.Process.Signal(syscall.SIGKILL)
	s.wait()
	s = e.start()
	out, _ = harvest(0, "memory", "ls", "--repo", "octo/hello")
	if !strings.Contains(out, "tests") || !strings.Contains(out, "db") {
		t.Fatalf("after a kill -9, ls:\n%s", out)
	}
	out, _ = harvest(0, "memory", "rm", "--repo", "octo/hello", "tests")
	if strings.TrimSpace(out) != "tests" {
		t.Errorf("rm: %q", out)
	}
	_, errOut = harvest(1, "memory", "rm", "--repo", "octo/hello", "tests")
	if !strings.Contains(errOut, `no entity "tests"`) {
		t.Errorf("rm of a missing entity: %s", errOut)
	}
	if out, _ = harvest(0, "memory", "search", "--repo", "octo/hello", "docker"); strings.Contains(out, "tests") {
		t.Errorf("search after rm:\n%s", out)
	}
}

// TestMemoryTextQuoted: text an agent wrote with a control character is
// printed quoted, so it cannot drive the terminal.
func TestMemoryTextQuoted(t *testing.T) {
	if got := memoryText("plain text"); got != "plain text" {
		t.Errorf("plain text became %q", got)
	}
	if got := memoryText("red \x1b[31m\nx"); got != `"red \x1b[31m\nx"` {
		t.Errorf("an escape sequence became %q", got)
	}
}
