package session

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/sandbox/disk"
	"github.com/harvest-dev/harvest/store"
)

// leftovers lists what dataDir holds of session id: its workspace
// directory, its disk image, a mount at the directory and a loop device
// on the image.
func leftovers(t *testing.T, dataDir, id string) []string {
	t.Helper()
	dir, _ := WorkspaceDir(dataDir, Scope{Session: id})
	img := filepath.Join(dataDir, "disks", "session", id+".img")
	var out []string
	if _, err := os.Stat(dir); err == nil {
		out = append(out, "workspace")
	}
	if _, err := os.Stat(img); err == nil {
		out = append(out, "image")
	}
	if m, _ := (disk.Disk{Image: img, Dir: dir}).Mounted(); m {
		out = append(out, "mount")
	}
	att, err := disk.Attached()
	if err != nil {
		t.Fatal(err)
	}
	for file := range att {
		if strings.HasPrefix(file, realPath(img)) {
			out = append(out, "loop device")
		}
	}
	return out
}

// cleanNow moves the clock past CleanEvery and waits for m's janitor to
// finish a round after that.
func cleanNow(t *testing.T, e *env, ms ...*Manager) {
	t.Helper()
	var dones []<-chan struct{}
	for _, m := range ms {
		_, done := m.cleanRound()
		dones = append(dones, done)
	}
	e.Clock.Advance(DefaultCleanEvery)
	for _, done := range dones {
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("the janitor did not run a round within a minute of its time")
		}
	}
}

// TestCollectDeletedLeftovers: a lone server's janitor removes, at start
// and every CleanEvery (the test's clock), the workspace and disk of a
// session the store no longer has, and nothing of its own sessions.
func TestCollectDeletedLeftovers(t *testing.T) {
	e := newEnv(t, withDisks)
	ctx := testbin.Context(t)
	if err := e.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	v := e.create("msg one")
	e.watch(v.ID).Until("turn t1 to end", stacktest.TurnEnded("t1"))
	e.watch(v.ID).State(store.StateIdle)

	// A deleted session's leftovers, as a delete that failed halfway (or
	// another node's delete) leaves them.
	gone := DerivedID("gone")
	dir, _ := WorkspaceDir(e.DataDir, Scope{Session: gone})
	if err := os.MkdirAll(filepath.Join(dir, "repo"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "repo", "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cleanNow(t, e, e.m)
	if got := leftovers(t, e.DataDir, gone); len(got) != 0 {
		t.Errorf("a deleted session's leftovers after a round: %v", got)
	}
	if got := leftovers(t, e.DataDir, v.ID); !strings.Contains(strings.Join(got, " "), "workspace") {
		t.Errorf("the live session's own copy after a round: %v, want it kept", got)
	}
	if n, _ := e.m.cleanRound(); n.copies != 1 || n.rounds < 2 {
		t.Errorf("janitor counts %+v: want 1 copy removed in 2 rounds or more", n)
	}
}

// TestNodesCollectStale: nodes A and B on PostgreSQL with data
// directories of their own. A runs two sessions, then stops; B takes both
// over and, at a message to each, restores them from their checkpoints; one is deleted through
// B. A new process on A's disk (a restart) finds A's copies: the deleted
// session's and the one B took (its checkpoint names B's copy). Its
// janitor removes both at start — workspace, disk image, mount, loop
// device — and B's janitor removes nothing of the session it took, whose
// current copy is B's. A node dead for longer than NodeGone leaves the
// nodes table.
func TestNodesCollectStale(t *testing.T) {
	e := newEnv(t, withPostgres, withDisks, withNode("a", nodeTTL))
	ctx := testbin.Context(t)
	if err := e.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	dirB := testbin.TempDir(t)
	os.Chmod(dirB, 0o711)
	t.Cleanup(func() { // after B closes: the stack unmounts only under A's data directory
		if _, err := disk.UnmountUnder(dirB); err != nil {
			t.Errorf("unmounting B's disks: %v", err)
		}
	})
	b, _ := e.openNodeAt("b", nodeTTL, dirB)
	if err := b.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	keep, del := e.create("msg one"), e.create("msg one")
	for _, v := range []*View{keep, del} {
		e.watch(v.ID).Until("turn t1 to end", stacktest.TurnEnded("t1"))
		waitCheckpoint(t, e.st, v.ID, func(c *store.Checkpoint) bool { return c.Turn == "t1" && c.Node == "a" })
		if got := leftovers(t, e.DataDir, v.ID); len(got) < 2 {
			t.Fatalf("A's copy of %s before it stops: %v, want its workspace and disk", v.ID, got)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := e.m.Close(cctx); err != nil {
		t.Fatal(err)
	}
	// B takes them over as leases (idle: nodes_dormant.go); a message to
	// each makes it restore them.
	for _, v := range []*View{keep, del} {
		waitFor(t, "B to take "+v.ID+" over", func() bool {
			l, err := e.st.GetLease(ctx, v.ID)
			return err == nil && l.Node == "b"
		})
		if _, err := b.Send(ctx, "owner-1", v.ID, "msg two", ""); err != nil {
			t.Fatal(err)
		}
		stacktest.Watch(t, v.ID, func(after int64) (*journal.Subscription, error) {
			return b.Subscribe(context.Background(), "", v.ID, after)
		}).Until("turn t2 to end on B", stacktest.TurnEnded("t2"))
		waitCheckpoint(t, e.st, v.ID, func(c *store.Checkpoint) bool { return c.Node == "b" })
	}
	if err := b.Delete(ctx, "owner-1", del.ID); err != nil {
		t.Fatal(err)
	}

	// A node dead for two hours leaves the nodes table (NodeGone).
	if _, err := e.st.HeartbeatNode(ctx, store.Node{ID: "z", Addr: "http://z.invalid"}, -2*time.Hour); err != nil {
		t.Fatal(err)
	}

	a2, _ := e.openNodeAt("a2", nodeTTL, e.DataDir)
	if err := a2.Recover(ctx); err != nil { // its janitor's first round
		t.Fatal(err)
	}
	cleanNow(t, e, a2, b)
	for _, v := range []*View{keep, del} {
		if got := leftovers(t, e.DataDir, v.ID); len(got) != 0 {
			t.Errorf("A's disk still holds of session %s: %v", v.ID, got)
		}
	}
	if got := strings.Join(leftovers(t, dirB, keep.ID), " "); !strings.Contains(got, "workspace") {
		t.Errorf("B's copy of the session it runs after its janitor's round: %q, want it kept", got)
	}
	if got := leftovers(t, dirB, del.ID); len(got) != 0 {
		t.Errorf("B's disk still holds of the session deleted there: %v", got)
	}
	na, _ := a2.cleanRound()
	nb, _ := b.cleanRound()
	if na.nodes+nb.nodes != 1 {
		t.Errorf("the janitors removed %d and %d nodes, want node z once", na.nodes, nb.nodes)
	}
	if ids, err := e.st.RemoveDeadNodes(ctx, time.Hour); err != nil || len(ids) != 0 {
		t.Errorf("dead nodes left after the janitors' rounds: %v %v", ids, err)
	}
}
