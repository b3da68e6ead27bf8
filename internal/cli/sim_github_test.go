package cli

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
)

// TestSimGitHubBadInput: each mistake is one clear line and exit 2 (1 when
// serving fails).
func TestSimGitHubBadInput(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full")
	os.MkdirAll(filepath.Join(full, "x"), 0o755)
	notKey := filepath.Join(dir, "key.pem")
	os.WriteFile(notKey, []byte("nope"), 0o600)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	st := func() string { return filepath.Join(t.TempDir(), "state") }
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"sim", "github"}, 2, "--state DIR is required"},
		{[]string{"sim", "github", "--state", full}, 2, "--state " + full + ": not empty; give a new or empty directory"},
		{[]string{"sim", "github", "--state", st(), "--token-ttl", "0s"}, 2, "--token-ttl 0s: must be positive"},
		{[]string{"sim", "github", "--state", st(), "--webhook-url", "example.com/hook"}, 2, `--webhook-url "example.com/hook": give an http or https URL`},
		{[]string{"sim", "github", "--state", st(), "--webhook-secret", "x"}, 2, "--webhook-secret needs --webhook-url"},
		{[]string{"sim", "github", "--state", st(), "--private-key", notKey}, 2, "--private-key " + notKey + ": private key: no PEM block"},
		{[]string{"sim", "github", "--state", st(), "--repo", "acme"}, 2, `--repo "acme": want OWNER/NAME=DIR`},
		{[]string{"sim", "github", "--state", st(), "--repo", "acme/w=/no/such"}, 2, "--repo acme/w: /no/such is not a directory"},
		{[]string{"sim", "github", "--state", st(), "--app", "Bad Slug"}, 2, `--app: app slug "Bad Slug": lower-case letters, digits and dashes`},
		{[]string{"sim", "github", "--state", st(), "--listen", busy.Addr().String()}, 1, "--listen " + busy.Addr().String() + ":"},
		{[]string{"sim", "github", "--state", st(), "extra"}, 2, `unknown command "extra" for "harvest sim github"`},
	}
	for _, c := range cases {
		code, _, stderr := runCLI(t, "", c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("harvest %s:\n  exit %d, want %d\n  stderr %q\n  want it to contain %q", strings.Join(c.args, " "), code, c.code, stderr, c.want)
		}
		if strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("harvest %s: more than one error line:\n%s", strings.Join(c.args, " "), stderr)
		}
	}
}

// TestSimGitHubBinary: the command sets up an App, a repo and a user,
// writes the key 0600, serves REST to the user's token, and exits 0 on
// SIGTERM.
func TestSimGitHubBinary(t *testing.T) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "README.md"), []byte("hi\n"), 0o644)
	state := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(testbin.Harvest(t), "sim", "github", "--quiet", "--state", state, "--repo", "acme/widget="+src, "--user", "alice")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	lines := bufio.NewReader(out)
	var url, token, printed string
	for url == "" {
		line, err := lines.ReadString('\n')
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("%v; stdout %q; stderr:\n%s", err, printed, stderr.String())
		}
		printed += line
		if u, ok := strings.CutPrefix(strings.TrimSpace(line), "harvest sim github listening on "); ok {
			url = u
		}
		if tk, ok := strings.CutPrefix(strings.TrimSpace(line), "user alice token "); ok {
			token = tk
		}
	}
	go func() {
		io.Copy(io.Discard, lines)
		done <- cmd.Wait()
	}()
	defer func() {
		cmd.Process.Kill()
		<-done
	}()
	if !strings.Contains(printed, "private key written to "+filepath.Join(state, "app.pem")+" (0600)") {
		t.Errorf("stdout:\n%s", printed)
	}
	if st, err := os.Stat(filepath.Join(state, "app.pem")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v", st, err)
	}
	req, _ := http.NewRequest("GET", url+"/api/v3/repos/acme/widget", nil)
	req.Header.Set("Authorization", "token "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET repo: %d", resp.StatusCode)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Errorf("exit: %v\n%s", err, stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("did not exit after SIGTERM")
	}
}
