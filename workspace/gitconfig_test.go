package workspace

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const canary = "ghp_canary7f3e9a1c5b2d4e6f8a0b"

// A config as a developer's checkout might have it, with the canary
// everywhere git can hold a credential.
var dirtyConfig = `# a comment with ` + canary + `
[core]
	repositoryformatversion = 0
	bare = false
	hooksPath = /home/dev/hooks
	fsmonitor = /home/dev/bin/watch
	sshCommand = ssh -i /home/dev/.ssh/id_` + canary + `
[remote "origin"]
	url = https://dev:` + canary + `@git.example.com/acme/app.git
	fetch = +refs/heads/*:refs/remotes/origin/*
[remote "other"] url = https://` + canary + `@other.example.com/x.git
[branch "main"]
	remote = origin
	merge = refs/heads/main ; trailing ` + canary + `
[http]
	extraHeader = Authorization: Bearer ` + canary + `
[http "https://git.example.com/"]
	extraheader = AUTHORIZATION: basic ` + canary + `
[credential]
	helper = store --file /home/dev/.` + canary + `
[credential "https://git.example.com"]
	username = dev
[url "https://x:` + canary + `@git.example.com/"]
	insteadOf = https://git.example.com/
[include]
	path = /home/dev/.gitconfig-` + canary + `
[includeIf "gitdir:~/work/"]
	path = ~/work.gitconfig
[user]
	name = Dev
	email = dev@example.com
[github]
	token = ` + canary + `
[sendemail]
	smtpPass = ` + canary + `
[alias]
	long = log \
		--oneline ; a comment after a continued line
[http] extraHeader = X: ` + canary + `
[submodule "lib"]
	url = https://u:` + canary + `@git.example.com/lib.git
	active = true
[Remote.legacy]
	url = https://` + canary + `@legacy.example.com/
`

func TestSanitizeGitConfig(t *testing.T) {
	out := string(SanitizeGitConfig([]byte(dirtyConfig)))
	t.Logf("sanitized:\n%s", out)
	if strings.Contains(out, canary) {
		t.Errorf("the canary survived:\n%s", out)
	}
	// What is kept must still be git config git reads, with the values it
	// had (git reads our own output here, in a temp dir: no agent wrote it).
	dir := t.TempDir()
	f := filepath.Join(dir, "config")
	os.WriteFile(f, []byte(out), 0o644)
	cmd := exec.Command("git", "config", "--file", f, "--list")
	cmd.Env = []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "PATH=" + os.Getenv("PATH")}
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git cannot read the sanitized config: %v\n%s", err, b)
	}
	got := string(b)
	for _, want := range []string{"core.repositoryformatversion=0", "core.bare=false", "branch.main.remote=origin",
		"branch.main.merge=refs/heads/main", "user.name=Dev", "user.email=dev@example.com",
		"submodule.lib.url=https://git.example.com/lib.git", "submodule.lib.active=true", "--oneline"} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("lost %q:\n%s", want, got)
		}
	}
	for _, gone := range []string{"remote.", "credential.", "http.", "url.", "include", "core.hookspath", "core.fsmonitor", "core.sshcommand", "github.token", "sendemail.smtppass"} {
		if strings.Contains(got, gone) {
			t.Errorf("kept %q:\n%s", gone, got)
		}
	}
}

func TestClassifyGitMeta(t *testing.T) {
	for rel, want := range map[string]gitMetaKind{
		".git/config":                       gitConfigFile,
		".git/config.worktree":              gitConfigFile,
		"vendor/lib/.git/config":            gitConfigFile,
		".git/modules/lib/config":           gitConfigFile,
		".git/modules/a/b/config":           gitConfigFile,
		".git/worktrees/wt/config.worktree": gitConfigFile,
		".git/logs/HEAD":                    gitLogFile,
		".git/logs/refs/heads/main":         gitLogFile,
		".git/FETCH_HEAD":                   gitLogFile,
		".git/modules/lib/logs/HEAD":        gitLogFile,
		"config":                            notGitMeta,
		"src/config":                        notGitMeta,
		".git/HEAD":                         notGitMeta,
		".git/objects/ab/cdef":              notGitMeta,
		".github/config":                    notGitMeta,
		".gitconfig":                        notGitMeta,
	} {
		if got := classifyGitMeta(rel, false); got != want {
			t.Errorf("%s: %d, want %d", rel, got, want)
		}
	}
	if classifyGitMeta("config", true) != gitConfigFile || classifyGitMeta("logs/HEAD", true) != gitLogFile {
		t.Error("a bare repository's config and logs are git metadata")
	}
}

// TestCopyLeavesCredentialsBehind: a checkout whose git config, reflog and
// FETCH_HEAD carry a token is copied without it anywhere, and the copy is
// still a repository git reads.
func TestCopyLeavesCredentialsBehind(t *testing.T) {
	src := filepath.Join(t.TempDir(), "app")
	git(t, "", "init", "-q", "-b", "main", src)
	os.WriteFile(filepath.Join(src, "a.txt"), []byte("hello\n"), 0o644)
	git(t, src, "add", "a.txt")
	git(t, src, "-c", "user.name=T", "-c", "user.email=t@example.com", "commit", "-q", "-m", "first")
	cfg, _ := os.ReadFile(filepath.Join(src, ".git", "config"))
	os.WriteFile(filepath.Join(src, ".git", "config"), append(cfg, []byte(dirtyConfig[strings.Index(dirtyConfig, "[remote"):])...), 0o644)
	os.WriteFile(filepath.Join(src, ".git", "FETCH_HEAD"), []byte("abc\t\tbranch 'main' of https://x:"+canary+"@git.example.com/app\n"), 0o644)
	f, _ := os.OpenFile(filepath.Join(src, ".git", "logs", "HEAD"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("0000 1111 T <t@example.com> 1 +0000\tclone: from https://x:" + canary + "@git.example.com/app\n")
	f.Close()

	dst := filepath.Join(t.TempDir(), "copy")
	if _, err := Copy(context.Background(), src, dst, Owner{}); err != nil {
		t.Fatal(err)
	}
	filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), canary) {
				t.Errorf("%s has the canary:\n%s", p, b)
			}
		}
		return nil
	})
	if out := git(t, dst, "log", "--format=%s"); out != "first\n" {
		t.Errorf("git log of the copy: %q", out)
	}
	if out := git(t, dst, "remote"); out != "" {
		t.Errorf("the copy has remotes: %q", out)
	}
}

// git runs git for a test on directories the test made.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}
