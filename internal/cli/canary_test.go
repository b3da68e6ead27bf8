package cli

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitCanary is a token a developer's checkout carries in its git config.
const gitCanary = "ghp_runcanary5e1d9c3b7a2f4e6d8c0b"

// canaryRepo makes a git repository whose config carries gitCanary in a
// remote URL and an http.extraHeader, as a developer's checkout may.
func canaryRepo(t *testing.T) string {
	t.Helper()
	repo := filepath.Join(t.TempDir(), "app")
	gitT(t, "", "init", "-q", "-b", "main", repo)
	os.WriteFile(filepath.Join(repo, "notes.txt"), []byte("hello\n"), 0o644)
	gitT(t, repo, "add", "notes.txt")
	gitT(t, repo, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "-q", "-m", "first")
	gitT(t, repo, "remote", "add", "origin", "https://dev:"+gitCanary+"@git.example.com/acme/app.git")
	gitT(t, repo, "config", "http.https://git.example.com/.extraHeader", "Authorization: Bearer "+gitCanary)
	return repo
}

func gitT(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// canaryLook is what the agent runs in the box: everything that would show
// the canary if the copy kept it. Its output goes into the events.
const canaryLook = `cd /workspace/app && git remote -v; git config --list; cat .git/config; env; grep -rl ghp_runcanary /workspace /tmp "$HOME" 2>/dev/null; echo looked-for-it`

// TestRunLeavesGitCredentialsBehind: harvest run copies a checkout whose
// git config has a token in a remote URL and in http.extraHeader; the
// token is nowhere in the copy the box works on, nor in any event, though
// the agent looked.
func TestRunLeavesGitCredentialsBehind(t *testing.T) {
	needRoot(t)
	env, home := runEnv(t)
	repo := canaryRepo(t)
	script := writeScript(t, `
mode: sequence
rules:
  - reply: {text: "Looking.", tool_calls: [{name: bash, input: {command: "`+strings.ReplaceAll(canaryLook, `"`, `\"`)+`"}}]}
  - when: {tool_result: "looked-for-it"}
    reply: {text: "Done."}
`)
	code, out, errOut := runHarvest(t, env, "", "run", "--repo", repo, "--sim-script", script, "--json", "look for credentials")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	if !strings.Contains(out, "looked-for-it") || !strings.Contains(out, "core.bare=false") {
		t.Fatalf("the events do not show the agent's look:\n%s", out)
	}
	if strings.Contains(out, gitCanary) || strings.Contains(errOut, gitCanary) {
		t.Fatalf("the token is in the events:\n%s", out)
	}
	// The copy (what the box saw) is kept under the data dir.
	copies := 0
	filepath.WalkDir(filepath.Join(home, "runs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if strings.HasSuffix(p, "/app/notes.txt") {
			copies++
		}
		if b, _ := os.ReadFile(p); strings.Contains(string(b), gitCanary) {
			t.Errorf("%s has the token", p)
		}
		return nil
	})
	if copies != 1 {
		t.Fatalf("found %d copies of the repository under %s", copies, home)
	}
}
