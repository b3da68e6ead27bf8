package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox/disk"
	"github.com/harvest-dev/harvest/wire"
)

// TestServeMinFree: harvest serve with its data directory on a small
// filesystem of its own (a loop-mounted image), filled to below
// --min-free: a create is a 507 insufficient_storage that names the data
// directory and what is free to the admin (and only what is free to a
// user token), harvest session new says so and exits non-zero, and
// nothing of the session is stored or made; once space is freed the same
// create works and the session runs. harvest doctor --data shows the
// data directory below its floor.
func TestServeMinFree(t *testing.T) {
	e := newServeEnv(t)
	data := e.dataDir()
	d := disk.Disk{Image: filepath.Join(testbin.TempDir(t), "data.img"), Dir: data}
	if err := disk.Create(testbin.Context(t), d, disk.Size{Bytes: 512 << 20}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(data, 0o711); err != nil {
		t.Fatal(err)
	}
	repo := testRepo(t)
	s := e.start("--data", data, "--min-free", "128m", "--repo-root", filepath.Dir(repo))
	tok, err := os.ReadFile(filepath.Join(data, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	admin := strings.TrimSpace(string(tok))
	env := append(e.env, "HARVEST_SERVER="+s.url, "HARVEST_TOKEN="+admin)
	code, userTok, errOut := runHarvest(t, env, "", "token", "create", "someone")
	if code != 0 {
		t.Fatalf("token create: exit %d: %s", code, errOut)
	}
	userTok = strings.TrimSpace(userTok)

	// The server's disks kept ready (--pool 2) are made first: they are
	// counted below, with the sessions' (and none is made below the floor).
	testbin.WaitFor(t, time.Minute, "the disks kept ready", func() bool { return len(poolDisks(t, data)) == 2 })
	// Fill the data directory's filesystem to 16 MiB under the floor.
	var st unix.Statfs_t
	if err := unix.Statfs(data, &st); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(data, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(st.Bavail)*st.Bsize-(128-16)<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()

	ctx := testbin.Context(t)
	create := func(token string) (int, wire.ErrorInfo) {
		body, _ := json.Marshal(wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: "msg hello"})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/sessions", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var eb wire.ErrorBody
		json.Unmarshal(b, &eb)
		return resp.StatusCode, eb.Error
	}
	status, ei := create(admin)
	if status != http.StatusInsufficientStorage || ei.Code != wire.CodeInsufficientStorage {
		t.Fatalf("a create below the floor: %d %+v, want 507 insufficient_storage", status, ei)
	}
	for _, want := range []string{"creating a session", "the data directory " + data, "free of", "floor of 128MiB", "--min-free"} {
		if !strings.Contains(ei.Message, want) {
			t.Errorf("the admin's refusal does not say %q: %s", want, ei.Message)
		}
	}
	status, ei = create(userTok)
	if status != http.StatusInsufficientStorage || strings.Contains(ei.Message, data) || !strings.Contains(ei.Message, "the server's data directory has") {
		t.Errorf("a user's create below the floor: %d %q, want a 507 that does not name the path", status, ei.Message)
	}
	code, _, errOut = runHarvest(t, env, "", "session", "new", "--repo", repo, "msg hello")
	if code == 0 || !strings.Contains(errOut, "below this server's floor") {
		t.Errorf("harvest session new below the floor: exit %d: %s", code, errOut)
	}
	code, out, _ := runHarvest(t, env, "", "doctor", "--data", data, "--min-free", "128m")
	if !strings.Contains(out, "BELOW the floor of 128MiB") || !strings.Contains(out, "session disks: 2,") {
		t.Errorf("harvest doctor below the floor: exit %d:\n%s", code, out)
	}

	// Nothing was made: no session, no workspace, no disk.
	c, err := client.New(s.url, admin, nil)
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.ListSessions(ctx, client.ListOptions{})
	if err != nil || len(list) != 0 {
		t.Fatalf("sessions after refused creates: %+v %v", list, err)
	}
	for _, sub := range []string{"workspaces/session", "disks/session"} {
		if ents, err := os.ReadDir(filepath.Join(data, sub)); err == nil && len(ents) > 0 {
			t.Errorf("%s after refused creates holds %s", sub, ents[0].Name())
		}
	}

	// Space freed: the create is taken and the session runs.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	v, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: "msg hello"})
	if err != nil {
		t.Fatalf("a create once space is freed: %v", err)
	}
	follow(t, c, v.ID, 0, "t1 to end", stacktest.TurnEnded("t1"))
	if _, err := os.Stat(filepath.Join(data, "disks", "session", v.ID+".img")); err != nil {
		t.Errorf("the session's disk: %v", err)
	}
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.DeleteSession(cctx, v.ID); err != nil {
		t.Error(err)
	}
	if t.Failed() {
		t.Logf("serve:\n%s", s.stderr)
	}
}
