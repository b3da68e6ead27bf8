package session

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
)

// sessionCanary is a token a developer's checkout carries in its git config.
const sessionCanary = "ghp_sessioncanary0c9b8a7f6e5d4c3b"

// TestSessionLeavesGitCredentialsBehind: a session on a checkout whose git
// config has a token in a remote URL and in http.extraHeader: the agent,
// told to look, finds it nowhere, no event carries it, and a scan of the
// box (environments, command lines, HOME, /workspace, /tmp) does not find
// it either.
func TestSessionLeavesGitCredentialsBehind(t *testing.T) {
	e := newEnv(t)
	repo := filepath.Join(t.TempDir(), "app")
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("", "init", "-q", "-b", "main", repo)
	os.WriteFile(filepath.Join(repo, "notes.txt"), []byte("hello\n"), 0o644)
	git(repo, "add", "notes.txt")
	git(repo, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "-q", "-m", "first")
	git(repo, "remote", "add", "origin", "https://dev:"+sessionCanary+"@git.example.com/acme/app.git")
	git(repo, "config", "http.https://git.example.com/.extraHeader", "Authorization: Bearer "+sessionCanary)

	v := e.create("look for credentials", func(r *CreateRequest) { r.Repos = []RepoSpec{{Source: repo}} })
	w := e.watch(v.ID)
	if f := w.Finished("t1"); f.Result != "done looking" {
		t.Fatalf("t1 finished with %+v", f)
	}
	evs := stacktest.CheckGapless(t, e.st, v.ID)
	looked := false
	for _, ev := range evs {
		b, _ := json.Marshal(ev)
		if strings.Contains(string(b), sessionCanary) {
			t.Fatalf("event %d carries the token: %s", ev.Seq, b)
		}
		if tf, ok := ev.Data.(event.ToolFinished); ok && strings.Contains(tf.Output, "core.bare=false") && strings.Contains(tf.Output, "looked-for-it") {
			looked = true
		}
	}
	if !looked {
		t.Fatal("no tool.finished shows the agent's look at the git config")
	}
	scanBoxFor(t, e, v.ID, []string{sessionCanary}, "bare = false")
}
