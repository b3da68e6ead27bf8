package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/secrets"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// TestSecretCommands runs `harvest serve` and the real binary's secret
// commands: a value piped in is stored (encrypted, one trailing newline
// less) and resolves; ls and the server's log never show it; mistakes are
// usage errors; and a key file others may read stops the next start.
func TestSecretCommands(t *testing.T) {
	const (
		repoCanary = "canary-cli-5e1f"
		userCanary = "canary-cli-user-77a0"
	)
	e := newServeEnv(t)
	s := e.start()
	env := append(slices.Clone(e.env), "HARVEST_SERVER="+s.url, "HARVEST_TOKEN=")
	harvest := func(want int, stdin string, args ...string) (string, string) {
		t.Helper()
		code, out, errOut := runHarvest(t, env, stdin, args...)
		if code != want {
			t.Fatalf("harvest %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errOut)
		}
		return out, errOut
	}

	_, errOut := harvest(0, repoCanary+"\n", "secret", "set", "--repo", "Octo/Hello", "NPM_TOKEN")
	if !strings.Contains(errOut, "secret NPM_TOKEN set in repo:octo/hello (for setup scripts)") {
		t.Errorf("set --repo: %s", errOut)
	}
	_, errOut = harvest(0, userCanary+"\r\n", "secret", "set", "--user", "--session", "GH_TOKEN")
	if !strings.Contains(errOut, "(for setup scripts and sessions)") {
		t.Errorf("set --user --session: %s", errOut)
	}
	out, _ := harvest(0, "", "secret", "ls")
	if !strings.Contains(out, "repo:octo/hello") || !strings.Contains(out, "NPM_TOKEN") || !strings.Contains(out, "GH_TOKEN") || !strings.Contains(out, "setup+session") {
		t.Errorf("secret ls:\n%s", out)
	}
	jsonOut, _ := harvest(0, "", "secret", "ls", "--json", "--repo", "octo/hello")
	if !strings.Contains(jsonOut, `"name": "NPM_TOKEN"`) || strings.Contains(jsonOut, "GH_TOKEN") {
		t.Errorf("secret ls --json --repo:\n%s", jsonOut)
	}
	for _, c := range []string{repoCanary, userCanary} {
		if strings.Contains(out+jsonOut, c) {
			t.Errorf("secret ls shows the value %s", c)
		}
	}

	// Mistakes: exit 2, before anything is sent.
	for _, c := range []struct {
		stdin string
		args  []string
		msg   string
	}{
		{"v", []string{"secret", "set", "--user", "NPM_TOKEN", repoCanary}, "never taken from the command line"},
		{"v", []string{"secret", "set", "NPM_TOKEN"}, "say whose secret: --repo owner/name"},
		{"v", []string{"secret", "set", "--user", "--repo", "o/r", "NPM_TOKEN"}, "not both"},
		{"v", []string{"secret", "set", "--user", "npm_token"}, "did you mean NPM_TOKEN?"},
		{"v", []string{"secret", "set", "--repo", "octo", "NPM_TOKEN"}, "owner/name"},
		{"\n", []string{"secret", "set", "--user", "NPM_TOKEN"}, "the value is empty"},
		{"", []string{"secret", "rm", "--user"}, "give the names"},
	} {
		_, errOut := harvest(2, c.stdin, c.args...)
		if !strings.Contains(errOut, c.msg) || strings.Contains(errOut, repoCanary) {
			t.Errorf("harvest %s: %s\nwant it to say %q", strings.Join(c.args, " "), errOut, c.msg)
		}
	}
	_, errOut = harvest(1, "", "secret", "rm", "--user", "NOPE")
	if !strings.Contains(errOut, "no secret NOPE") {
		t.Errorf("rm of a missing secret: %s", errOut)
	}

	// What was stored is the value, encrypted with DATA/secret.key.
	fi, err := os.Stat(filepath.Join(e.home, secrets.KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key file: %v %v", fi, err)
	}
	key, _, err := secrets.LoadOrCreateKey(e.home)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(filepath.Join(e.home, "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	xs, err := st.ListSecrets(context.Background(), "repo:octo/hello")
	if err != nil || len(xs) != 1 {
		t.Fatalf("stored: %v %v", xs, err)
	}
	admin := xs[0].SetBy // the admin token's id
	setup, session, err := secrets.Resolve(context.Background(), st, key, "octo/hello", admin)
	st.Close()
	if err != nil || !slices.Equal(setup, []string{"GH_TOKEN=" + userCanary, "NPM_TOKEN=" + repoCanary}) || !slices.Equal(session, []string{"GH_TOKEN=" + userCanary}) {
		t.Fatalf("resolved %q %q %v", setup, session, err)
	}

	out, _ = harvest(0, "", "secret", "rm", "--repo", "octo/hello", "NPM_TOKEN")
	if strings.TrimSpace(out) != "NPM_TOKEN" {
		t.Errorf("rm: %q", out)
	}
	if out, _ = harvest(0, "", "secret", "ls"); strings.Contains(out, "NPM_TOKEN") {
		t.Errorf("ls after rm:\n%s", out)
	}

	s.cmd.Process.Signal(syscall.SIGTERM)
	s.wait()
	if l := s.stderr.String(); strings.Contains(l, repoCanary) || strings.Contains(l, userCanary) || !strings.Contains(l, "created the key of the stored secrets") {
		t.Errorf("the server's log:\n%s", l)
	}

	// A key others may read: the next start refuses, saying what to run.
	keyPath := filepath.Join(e.home, secrets.KeyFile)
	if err := os.Chmod(keyPath, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testbin.Harvest(t), "serve", "--listen", "127.0.0.1:0", "--quiet")
	cmd.Env = e.env
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "run: chmod 600 "+keyPath) {
		t.Errorf("serve with a key file of mode 0644: %v\n%s", err, b)
	}
}
