package session

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
)

func inWorkflow(mode string) func(*CreateRequest) {
	return func(r *CreateRequest) { r.Workflow, r.Collaboration = "wf", mode }
}

// toolOutput waits for the first tool of turn t1 to finish and returns its
// output.
func toolOutput(w *stacktest.Watcher) string {
	return stacktest.Typed(w, "t1", func(event.ToolFinished) bool { return true }).Output
}

// Seed 004's collaboration, end to end: sequential sessions of a workflow
// share one workspace and take turns under the workflow lock ("locked by
// run X"); parallel sessions each work on a copy on a branch of their own,
// at the same time; a sequential merge step fetches their branches from
// /runs and merges them into the shared workspace.
func TestWorkflowCollaboration(t *testing.T) {
	e := newEnv(t, withDisks)
	ctx := testbin.Context(t)
	lockKey := workflowLockKey("owner-1", "wf")
	lockFree := func() bool {
		_, err := e.st.GetLock(ctx, lockKey)
		return errors.Is(err, store.ErrNotFound)
	}

	// A sequential step commits a.txt in the shared workspace.
	s1 := e.create("write a", inWorkflow(""))
	if s1.Collab.Mode != store.Sequential || s1.Collab.Branch != "" {
		t.Fatalf("collab %+v, want sequential on the working branch", s1.Collab)
	}
	w1 := e.watch(s1.ID)
	if out := toolOutput(w1); !strings.Contains(out, "committed on") {
		t.Fatalf("s1's tool printed %q", out)
	}
	w1.IdleAfter("t1")
	shared := s1.Repos[0].Path
	if want := filepath.Join(workflowDir(e.DataDir, "owner-1", "wf"), "repo"); shared != want {
		t.Fatalf("s1 works in %s, want the workflow's shared workspace %s", shared, want)
	}
	testbin.WaitFor(t, 10*time.Second, "s1's streak releases the workflow lock", lockFree)

	// Two parallel steps: p1 works on a long task while p2 commits b.txt on
	// its own branch, from where the sequential step left off.
	p1 := e.create("long task", inWorkflow("parallel"))
	wp1 := e.watch(p1.ID)
	stacktest.Typed[event.ToolStarted](wp1, "t1", nil)
	p2 := e.create("write b", inWorkflow("parallel"))
	if p2.Collab.Branch != "harvest/wf/"+p2.ID || p2.Repos[0].Path == shared {
		t.Fatalf("p2: collab %+v in %s, want its own branch and copy", p2.Collab, p2.Repos[0].Path)
	}
	wp2 := e.watch(p2.ID)
	if out := toolOutput(wp2); !strings.Contains(out, "committed on harvest/wf/"+p2.ID) {
		t.Fatalf("p2's commit went elsewhere: %q", out)
	}
	wp2.IdleAfter("t1")
	if st := e.get(p1.ID).State; st != store.StateWorking {
		t.Fatalf("p1 is %s while p2 finished; parallel sessions must run at once", st)
	}
	if _, err := os.Stat(filepath.Join(p2.Repos[0].Path, "a.txt")); err != nil {
		t.Fatalf("p2's copy does not have the sequential step's work: %v", err)
	}
	if _, err := os.Stat(filepath.Join(shared, "b.txt")); err == nil {
		t.Fatal("p2 wrote into the shared workspace")
	}

	// Sequential again: s2 holds the workflow lock through a long task, so
	// the merge step s3 waits for it, saying who holds it.
	s2 := e.create("long task", inWorkflow("sequential"))
	w2 := e.watch(s2.ID)
	stacktest.Typed[event.ToolStarted](w2, "t1", nil)
	s3 := e.create("merge", inWorkflow(""))
	w3 := e.watch(s3.ID)
	stacktest.Typed(w3, "", func(p event.SessionState) bool {
		return strings.Contains(p.Reason, "workflow wf is locked by "+s2.ID+"/t1")
	})
	if st := e.get(s3.ID); st.State != store.StateIdle || len(st.Queue) != 1 {
		t.Fatalf("the merge step is %s with %d queued while the lock is held; want idle with its message queued", st.State, len(st.Queue))
	}
	release(t, s2)
	w2.Finished("t1")
	if out := toolOutput(w3); !strings.Contains(out, "merged: a.txt b.txt") {
		t.Fatalf("the merge step printed %q", out)
	}
	w3.Finished("t1")
	if b, err := os.ReadFile(filepath.Join(shared, "b.txt")); err != nil || string(b) != "B\n" {
		t.Fatalf("the shared workspace after the merge: b.txt %q, %v", b, err)
	}
	release(t, p1)
	wp1.Finished("t1")

	// Deleting a parallel session removes its copy; deleting the last
	// session of the workflow removes the workflow's directory.
	if err := e.m.Delete(ctx, "owner-1", p2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(runsDir(e.DataDir, "owner-1", "wf"), p2.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("p2's copy after its delete: %v", err)
	}
	for _, id := range []string{s1.ID, p1.ID, s2.ID} {
		if err := e.m.Delete(ctx, "owner-1", id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(shared); err != nil {
		t.Fatalf("the shared workspace went while s3 is in the workflow: %v", err)
	}
	if err := e.m.Delete(ctx, "owner-1", s3.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(workflowDir(e.DataDir, "owner-1", "wf")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the workflow's directory after its last session went: %v", err)
	}
}

func TestWorkflowValidation(t *testing.T) {
	e := newEnv(t)
	ctx := testbin.Context(t)
	other := filepath.Join(t.TempDir(), "repo")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	v := e.create("", inWorkflow(""))
	for name, tc := range map[string]struct {
		req  CreateRequest
		want string
	}{
		"collaboration alone": {CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Collaboration: "parallel"}, "collaboration is only for sessions in a workflow"},
		"bad workflow":        {CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Workflow: "../up"}, `workflow "../up"`},
		"bad mode":            {CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Workflow: "wf", Collaboration: "both"}, `collaboration "both"`},
		"other source":        {CreateRequest{Repos: []RepoSpec{{Source: other}}, Workflow: "wf"}, `workflow wf's repository "repo" comes from`},
	} {
		_, err := e.m.Create(ctx, "owner-1", tc.req)
		if !IsInput(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an input error with %q", name, err, tc.want)
		}
	}
	// Another owner's workflow of the same name is another workflow.
	w, err := e.m.Create(ctx, "owner-2", CreateRequest{Repos: []RepoSpec{{Source: other}}, Workflow: "wf"})
	if err != nil {
		t.Fatalf("owner-2's workflow wf: %v", err)
	}
	if w.Repos[0].Path == v.Repos[0].Path {
		t.Fatalf("two owners' workflows share %s", w.Repos[0].Path)
	}
}
