package tools

import (
	"strings"
	"testing"
)

func TestGitTools(t *testing.T) {
	b := newBox(t, Config{})
	b.sh(t, `git init -q -b main repo && cd repo &&
git config user.email a@example.com && git config user.name Alice &&
printf 'one\ntwo\n' > a.txt && printf 'x\n' > b.txt && git add . && git commit -qm "first commit" &&
printf 'one\nTWO\n' > a.txt && git commit -qam "second commit" &&
printf 'one\nTWO\nthree\n' > a.txt && printf 'y\n' > b.txt && git add b.txt && echo new > untracked.txt`)

	r := b.call(t, "git_status", `{"path": "repo"}`)
	wantOK(t, r, "[repository "+ws+"/repo]", "## main", " M a.txt", "M  b.txt", "?? untracked.txt")

	r = b.call(t, "git_diff", `{"path": "repo"}`)
	wantOK(t, r, "diff --git a/a.txt b/a.txt", "+three")
	if strings.Contains(r.Output, "b.txt") {
		t.Errorf("unstaged diff shows the staged file:\n%s", r.Output)
	}
	r = b.call(t, "git_diff", `{"path": "repo", "staged": true}`)
	wantOK(t, r, "diff --git a/b.txt b/b.txt", "-x", "+y")
	wantOK(t, b.call(t, "git_diff", `{"path": "repo", "ref": "HEAD~1", "stat": true}`), "a.txt | 3 ++-", "b.txt | 2 +-")
	wantOK(t, b.call(t, "git_diff", `{"path": "repo/b.txt"}`), "limited to "+ws+"/repo/b.txt", "No unstaged changes")
	wantErr(t, b.call(t, "git_diff", `{"path": "repo", "ref": "--output=/workspace/w/x"}`), "is not a commit")

	r = b.call(t, "git_log", `{"path": "repo"}`)
	wantOK(t, r, "Alice: second commit", "Alice: first commit")
	if strings.Index(r.Output, "second") > strings.Index(r.Output, "first") {
		t.Error("not newest first")
	}
	r = b.call(t, "git_log", `{"path": "repo", "n": 1}`)
	if wantOK(t, r); strings.Contains(r.Output, "first commit") {
		t.Errorf("n=1 shows two commits:\n%s", r.Output)
	}
	wantOK(t, b.call(t, "git_log", `{"path": "repo/b.txt"}`), "first commit")
	wantErr(t, b.call(t, "git_log", `{"path": "repo", "n": 500}`), "at most 200")

	// Not a repository: the workspace root itself.
	wantErr(t, b.call(t, "git_status", `{}`), ws+" is not inside a git repository")
	b.sh(t, "git init -q empty")
	wantOK(t, b.call(t, "git_log", `{"path": "empty"}`), "No commits yet")
	wantOK(t, b.call(t, "git_status", `{"path": "empty"}`), "working tree clean")
}

// TestGitToolsRunNoRepoCode: an agent-written repository cannot make the git
// tools run its code (core.fsmonitor is the classic way).
func TestGitToolsRunNoRepoCode(t *testing.T) {
	b := newBox(t, Config{})
	b.sh(t, `git init -q r && cd r && git config core.fsmonitor 'echo ran > /tmp/pwned; false' &&
mkdir -p .hooks && printf '#!/bin/sh\necho ran > /tmp/hook\n' > .hooks/post-index-change && chmod +x .hooks/post-index-change &&
git config core.hooksPath .hooks && echo x > f && git add f`)
	// The traps work: plain git status runs the fsmonitor command, and the
	// hook when it refreshes the index of a touched file.
	b.sh(t, "cd r && touch f && git status >/dev/null && test -e /tmp/pwned && test -e /tmp/hook && rm /tmp/pwned /tmp/hook && touch f")
	wantOK(t, b.call(t, "git_status", `{"path": "r"}`), "A  f")
	wantOK(t, b.call(t, "git_diff", `{"path": "r"}`))
	if b.exists(t, "/tmp/pwned") {
		t.Error("git_status ran the repository's core.fsmonitor command")
	}
	if b.exists(t, "/tmp/hook") {
		t.Error("a git tool ran a repository hook")
	}
}
