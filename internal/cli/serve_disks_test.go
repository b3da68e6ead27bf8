package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/wire"
)

// TestServeNeedsDiskLimits: where loop devices cannot be used (harvest
// serve in a mount namespace of its own whose /dev/loop-control is a plain
// file bound over the device, as in a container not given them), serve
// refuses to start, saying what failed and how to fix it, before it
// listens; told --no-disk-limits it starts, and its sessions say their
// disk limit is not enforced (memory and pids still are), in the API and
// in harvest session show.
func TestServeNeedsDiskLimits(t *testing.T) {
	e := newServeEnv(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("unshare (util-linux) is needed to run serve without loop devices: %v", err)
	}
	mask := filepath.Join(t.TempDir(), "not-loop-control")
	if err := os.WriteFile(mask, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// unshare -m makes the mount private: the host keeps its device.
	wrapper := []string{unshare, "--mount", "--propagation", "private", "sh", "-c",
		`mount --bind '` + mask + `' /dev/loop-control && exec "$0" "$@"`, testbin.Harvest(t)}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, wrapper[0], append(wrapper[1:], "serve", "--listen", "127.0.0.1:0", "--quiet")...)
	cmd.Env = e.env
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitHarvestError {
		t.Fatalf("serve without loop devices: %v, want exit %d\n%s", err, exitHarvestError, out)
	}
	for _, want := range []string{"disk limits cannot be enforced here", "finding a free loop device", "/dev/loop-control",
		"apt-get install e2fsprogs", "harvest doctor", "--no-disk-limits"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("serve's refusal does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "listening") {
		t.Errorf("serve listened before refusing:\n%s", out)
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Fatalf("the host lost its /dev/loop-control: %v", err)
	}

	// Told to, it runs its sessions without disk limits, and says so.
	s := e.startWith(wrapper, "--no-disk-limits")
	if !strings.Contains(s.stderr.String(), "--no-disk-limits: sessions run without disk limits") {
		t.Errorf("serve --no-disk-limits does not warn:\n%s", s.stderr)
	}
	c := e.client(s)
	v, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: testRepo(t)}}, Prompt: "msg hello"})
	if err != nil {
		t.Fatal(err)
	}
	if v.LimitsEnforced != nil {
		t.Errorf("a session with no box yet says its limits are enforced: %+v", v.LimitsEnforced)
	}
	follow(t, c, v.ID, 0, "t1 to end", stacktest.TurnEnded("t1"))
	got, err := c.GetSession(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if e := got.LimitsEnforced; e == nil || !e.Memory || !e.Pids || e.Disk {
		t.Errorf("limits_enforced %+v; want memory and pids, not disk", e)
	}
	// The wire form, as any client reads it.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/v1/sessions/"+v.ID, nil)
	tok, _ := os.ReadFile(filepath.Join(e.home, "admin-token"))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var raw struct {
		Enforced json.RawMessage `json:"limits_enforced"`
	}
	if err := json.Unmarshal(body, &raw); err != nil || string(raw.Enforced) != `{"memory":true,"pids":true,"disk":false}` {
		t.Errorf("GET /v1/sessions/%s: limits_enforced %s (%v)", v.ID, raw.Enforced, err)
	}
	t.Setenv("HARVEST_SERVER", s.url)
	t.Setenv("HARVEST_TOKEN", strings.TrimSpace(string(tok)))
	code, show, errOut := runCLI(t, "", "session", "show", v.ID)
	if code != 0 || !strings.Contains(show, "limits:  enforced: memory, pids; NOT enforced: disk") {
		t.Errorf("harvest session show: exit %d\n%s%s", code, show, errOut)
	}
	code, info, errOut := runCLI(t, "", "session", "info", v.ID)
	if code != 0 || !strings.Contains(info, "enforced: memory, pids; NOT enforced: disk") {
		t.Errorf("harvest session info: exit %d\n%s%s", code, info, errOut)
	}
	// No disk was made: the workspace is a plain directory.
	if _, err := os.Stat(filepath.Join(e.home, "disks", "session", v.ID+".img")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a disk image was made with --no-disk-limits: %v", err)
	}
	if t.Failed() {
		t.Logf("serve:\n%s", s.stderr)
	}
}

// TestServeNoDiskLimitsFlags: --no-disk-limits and a disk size contradict
// each other.
func TestServeNoDiskLimitsFlags(t *testing.T) {
	code, _, errOut := runCLI(t, "", "serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--no-disk-limits", "--disk", "10g")
	if code != 2 || !strings.Contains(errOut, "--no-disk-limits with --disk or --disk-inodes: give one or the other") {
		t.Fatalf("serve --no-disk-limits --disk 10g: exit %d\n%s", code, errOut)
	}
}
