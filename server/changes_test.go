package server_test

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/demo"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/sim"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// demoSession copies examples/calc under the test's repository root and
// runs the bundled demo on it (the sim plays internal/demo's script from
// now on): the agent fixes Sum's loop, a one-line change. It returns the
// session (as the admin sees it) once its turn has finished.
func demoSession(t *testing.T, e *apiEnv, c *client.Client) *wire.View {
	t.Helper()
	ctx := testbin.Context(t)
	dst := demoRepo(t, e)
	v, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: dst}}, Model: demo.Model, Prompt: "Fix the failing test"})
	if err != nil {
		t.Fatal(err)
	}
	st := c.Events(ctx, v.ID, client.StreamOptions{})
	defer st.Close()
	stacktest.ReadUntil(t, st, "the demo's turn", stacktest.TurnEnded("t1"))
	stacktest.ReadUntil(t, st, "idle", stacktest.IsState(store.StateIdle))
	v, err = e.AdminC.GetSession(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// demoRepo makes the sim play the bundled demo script and returns a copy
// of examples/calc under the server's repository root, for it to fix.
func demoRepo(t *testing.T, e *apiEnv) string {
	t.Helper()
	sc, err := demo.Script()
	if err != nil {
		t.Fatal(err)
	}
	e.Sim.Store(sim.New(sc))
	dst := filepath.Join(e.RepoRoot, "calc")
	if _, err := os.Stat(dst); err != nil {
		if out, err := exec.Command("cp", "-r", filepath.Join(moduleRoot(t), "examples", "calc"), dst).CombinedOutput(); err != nil {
			t.Fatalf("copying examples/calc: %v: %s", err, out)
		}
	}
	return dst
}

// TestChanges: the demo's one-line fix is the session's diff, read in its
// box, with an untracked file next to it; another token's session is a
// 404; a suspended session's is a 409 that says to send a message.
func TestChanges(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	v := demoSession(t, e, e.AliceC)
	if v.Repos[0].Start == "" {
		t.Fatalf("the session did not record the commit it started at: %+v", v.Repos[0])
	}
	if err := os.WriteFile(filepath.Join(v.Repos[0].Path, "NOTES.txt"), []byte("one\ntwo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ch, err := e.AliceC.Changes(ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Repos) != 1 {
		t.Fatalf("changes of %d repos, want 1: %+v", len(ch.Repos), ch)
	}
	rc := ch.Repos[0]
	if rc.Repo != "calc" || rc.Base != v.Repos[0].Start || !rc.BaseKnown || rc.Error != "" || rc.Truncated {
		t.Errorf("the repo's changes: %+v", rc)
	}
	byPath := map[string]wire.FileChange{}
	for _, f := range rc.Files {
		byPath[f.Path] = f
	}
	fix, ok := byPath["calc.go"]
	if !ok || len(rc.Files) != 2 {
		t.Fatalf("files %+v, want calc.go and NOTES.txt", rc.Files)
	}
	if fix.Status != "modified" || fix.Additions != 1 || fix.Deletions != 1 ||
		!strings.Contains(fix.Patch, "-\tfor i := 1; i < len(xs); i++ {") || !strings.Contains(fix.Patch, "+\tfor i := 0; i < len(xs); i++ {") ||
		!strings.HasPrefix(fix.Patch, "diff --git a/calc.go b/calc.go\n") {
		t.Errorf("calc.go: %+v", fix)
	}
	if n := byPath["NOTES.txt"]; n.Status != "untracked" || n.Additions != 2 || !strings.Contains(n.Patch, "+two\n") {
		t.Errorf("NOTES.txt: %+v", n)
	}
	if rc.Additions != 3 || rc.Deletions != 1 {
		t.Errorf("totals +%d -%d, want +3 -1", rc.Additions, rc.Deletions)
	}

	// Bob does not see Alice's session; the admin does.
	status, info, _ := e.doRaw(http.MethodGet, "/v1/sessions/"+v.ID+"/diff", "Bearer "+e.Bob, "", nil)
	if status != 404 || info.Code != server.CodeNotFound {
		t.Errorf("Bob's GET of Alice's diff: %d %+v", status, info)
	}
	if _, err := e.AdminC.Changes(ctx, v.ID); err != nil {
		t.Errorf("the admin's: %v", err)
	}

	// A session suspended when idle has no box: 409, saying what to do.
	s2, err := e.AliceC.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: e.Repo}}, Prompt: "msg hi", Limits: wire.Limits{IdleTimeout: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	st := e.AliceC.Events(ctx, s2.ID, client.StreamOptions{})
	defer st.Close()
	stacktest.ReadUntil(t, st, "suspended", stacktest.IsState(store.StateSuspended))
	status, info, _ = e.doRaw(http.MethodGet, "/v1/sessions/"+s2.ID+"/diff", "Bearer "+e.Alice, "", nil)
	if status != 409 || info.Code != server.CodeConflict || !strings.Contains(info.Message, "send it a message") {
		t.Errorf("the diff of a suspended session: %d %+v", status, info)
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}
