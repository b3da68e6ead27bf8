package session

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/objstore"
	"github.com/harvest-dev/harvest/workspace"
)

// TestNodesCarryWorkspace: two nodes that do not share a data directory
// (two machines). A's session's turn t1 ends when a file "go" appears in
// its workspace, which is carried to the store at the turn's end. Then a file appears in A's
// copy (what an interrupted turn would leave) and A goes away. B takes
// the session over: it cannot see A's directory, so it restores the
// checkpoint into its own, starts a new box on it and runs the next turn,
// which commits a.txt with git in the restored repository; "go" is there,
// the later file is not. Then B goes
// away and a new process on A's disk takes the session back: A's copy is
// stale now (B committed a.txt), so it is restored from B's checkpoint.
// The checkpoints go through a real S3 server (versitygw): the bucket
// holds the latest checkpoint's manifest and no replaced one.
func TestNodesCarryWorkspace(t *testing.T) {
	var bucket *testbin.S3Server
	e := newEnv(t, withNode("a", nodeTTL), withCheckpoints(func(t testing.TB) objstore.Store {
		bucket = testbin.StartS3Server(t)
		return s3Store(t, bucket)
	}))
	ctx := testbin.Context(t)
	if err := e.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	dirB := testbin.TempDir(t)
	os.Chmod(dirB, 0o711) // the box user reaches its workspaces below it
	b, _ := e.openNodeAt("b", nodeTTL, dirB)
	if err := b.Recover(ctx); err != nil {
		t.Fatal(err)
	}

	v := e.create("long task")
	wsA, _ := WorkspaceDir(e.DataDir, Scope{Session: v.ID})
	repo := filepath.Base(e.Repo)
	e.watch(v.ID).Until("the long task's tool to start", func(ev event.Event) bool { return ev.Type() == event.TypeToolStarted })
	if err := os.WriteFile(filepath.Join(wsA, repo, "go"), []byte("go\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.watch(v.ID).Until("turn t1 to end", stacktest.TurnEnded("t1"))
	cp := waitCheckpoint(t, e.st, v.ID, func(c *store.Checkpoint) bool { return c.Turn == "t1" && c.Node == "a" })
	if cp.Files == 0 || cp.Bytes == 0 || len(cp.Packs) == 0 {
		t.Errorf("A's checkpoint after t1: %+v, want the workspace's files in packs", cp)
	}
	// Written after the checkpoint: lost when the session moves.
	if err := os.WriteFile(filepath.Join(wsA, repo, "late.txt"), []byte("after t1\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := e.m.Close(cctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B to take the session over", func() bool {
		l, err := e.st.GetLease(ctx, v.ID)
		return err == nil && l.Node == "b"
	})
	watchB := func(m *Manager) *stacktest.Watcher {
		return stacktest.Watch(t, v.ID, func(after int64) (*journal.Subscription, error) {
			return m.Subscribe(context.Background(), "", v.ID, after)
		})
	}
	// Lazy takeover: B holds the lease of the idle session and nothing
	// else (no copy of the workspace, no box) until something needs it.
	waitFor(t, "B's runner to wait, dormant", func() bool {
		b.mu.Lock()
		r := b.runners[v.ID]
		b.mu.Unlock()
		return r != nil && r.dormant.Load()
	})
	wsB, _ := WorkspaceDir(dirB, Scope{Session: v.ID})
	if _, err := os.Stat(wsB); !os.IsNotExist(err) {
		t.Errorf("B's copy of the workspace of the idle session it took over: %v, want none before a message", err)
	}
	if s, err := e.st.GetSession(ctx, v.ID); err != nil || s.State != store.StateIdle || len(s.Sandbox) != 0 {
		t.Errorf("the idle session B took over: %v, state %s, box %q; want idle with no box", err, s.State, s.Sandbox)
	}
	// A request for its box (here the changes) starts it.
	if _, err := b.Changes(ctx, "owner-1", v.ID, workspace.DefaultDiffLimits); !errors.Is(err, ErrNoBox) {
		t.Errorf("the changes of the dormant session on B: %v, want ErrNoBox (being started)", err)
	}
	asked := time.Now()
	waitFor(t, "B to start the box asked for", func() bool {
		_, _, err := b.Box(ctx, "owner-1", v.ID)
		return err == nil
	})
	t.Logf("OBSERVED lazy takeover: B held the idle session with no workspace copy and no box until its box was asked for; restored and started %s later", time.Since(asked).Round(time.Millisecond))
	if _, err := b.Send(ctx, "owner-1", v.ID, "write a", ""); err != nil {
		t.Fatal(err)
	}
	if ev := watchB(b).Until("turn t2 to end", stacktest.TurnEnded("t2")); ev.Type() != event.TypeTurnFinished {
		t.Fatalf("turn t2 on B ended with %s", ev.Type())
	}
	evs, err := e.st.Events(ctx, v.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	moved := false
	for _, ev := range evs {
		if p, ok := ev.Data.(event.SessionState); ok && strings.Contains(p.Reason, "moved from node a") {
			moved = true
		}
	}
	if !moved {
		t.Error("no session.state event says the session moved from node a")
	}
	for name, want := range map[string]bool{"go": true, "a.txt": true, "late.txt": false} {
		_, err := os.Stat(filepath.Join(wsB, repo, name))
		if (err == nil) != want {
			t.Errorf("%s in B's workspace: %v, want present=%v", name, err, want)
		}
	}
	if s, err := b.Get(ctx, "owner-1", v.ID); err != nil || s.Repos[0].Path != "" && !strings.HasPrefix(s.Repos[0].Path, dirB) {
		t.Errorf("B's view of the session's repository: %+v %v, want it under B's data directory", s, err)
	}
	if t.Failed() {
		dumpEvents(t, e.st, v.ID)
	}
	waitCheckpoint(t, e.st, v.ID, func(c *store.Checkpoint) bool { return c.Turn == "t2" && c.Node == "b" })

	// Back to a new process on A's disk: its copy (a.txt, late.txt) is
	// stale, B's checkpoint is restored over it.
	if err := b.Close(cctx); err != nil {
		t.Fatal(err)
	}
	a2, _ := e.openNodeAt("a2", nodeTTL, e.DataDir)
	if err := a2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A2 to take the session over", func() bool {
		l, err := e.st.GetLease(ctx, v.ID)
		return err == nil && l.Node == "a2"
	})
	if _, err := a2.Send(ctx, "owner-1", v.ID, "msg three", ""); err != nil {
		t.Fatal(err)
	}
	watchB(a2).Until("turn t3 to end", stacktest.TurnEnded("t3"))
	for name, want := range map[string]bool{"go": true, "a.txt": true, "late.txt": false} {
		_, err := os.Stat(filepath.Join(wsA, repo, name))
		if (err == nil) != want {
			t.Errorf("%s in A's workspace after it took the session back: %v, want present=%v", name, err, want)
		}
	}
	last := waitCheckpoint(t, e.st, v.ID, func(c *store.Checkpoint) bool { return c.Turn == "t3" && c.Node == "a2" })
	if last.Manifest != nil || last.ManifestObject == "" {
		t.Errorf("the latest checkpoint keeps its manifest in the store (%d bytes), not in the bucket", len(last.Manifest))
	}
	// The replaced manifest is deleted just after the new checkpoint is
	// stored.
	tick, deadline := time.NewTicker(10*time.Millisecond), time.After(time.Minute)
	defer tick.Stop()
	for ks := objectKeys(t, e.checkpoints, "checkpoints/"+v.ID+"/"); len(ks) != 1 || ks[0] != last.ManifestObject; ks = objectKeys(t, e.checkpoints, "checkpoints/"+v.ID+"/") {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("manifests in the bucket a minute after the last checkpoint: %v, want only its own, %s", ks, last.ManifestObject)
		}
	}
	for _, h := range last.Packs {
		p, err := e.st.GetPack(ctx, h)
		if err != nil || p.Object == "" || p.Data != nil {
			t.Fatalf("pack %s of the latest checkpoint: %+v, %v; want a reference to an object", h, p, err)
		}
		if _, err := os.Stat(filepath.Join(bucket.Dir, bucket.Bucket, "prefix", p.Object)); err != nil {
			t.Errorf("pack %s's object on the S3 server's disk: %v", h, err)
		}
	}
	all, err := e.st.Events(ctx, v.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range all {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i+1, ev.Seq)
		}
		if p, ok := ev.Data.(event.TurnFailed); ok {
			t.Errorf("turn %s failed: %+v", ev.Turn, p)
		}
	}
	// Deleting the session deletes its manifest at once (its packs go at
	// the sweep's).
	if err := a2.Delete(ctx, "owner-1", v.ID); err != nil {
		t.Fatal(err)
	}
	if ks := objectKeys(t, e.checkpoints, "checkpoints/"+v.ID+"/"); len(ks) != 0 {
		t.Errorf("manifests in the bucket after the session was deleted: %v", ks)
	}
}

// s3Store is a checkpoint store in srv's bucket, under prefix/.
func s3Store(t testing.TB, srv *testbin.S3Server) *objstore.S3 {
	s, err := objstore.NewS3(testbin.Context(t), objstore.S3Config{Bucket: srv.Bucket, Prefix: "prefix/", Endpoint: srv.Endpoint, CredentialsFile: srv.CredentialsFile})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// objectKeys lists the objects of s under prefix, sorted.
func objectKeys(t testing.TB, s objstore.Store, prefix string) []string {
	t.Helper()
	var ks []string
	if err := s.List(context.Background(), prefix, func(o objstore.Info) error {
		ks = append(ks, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ks)
	return ks
}

// waitCheckpoint waits for the session's checkpoint to satisfy ok.
func waitCheckpoint(t *testing.T, st store.Store, session string, ok func(*store.Checkpoint) bool) *store.Checkpoint {
	t.Helper()
	var cp *store.Checkpoint
	waitFor(t, "the session's checkpoint", func() bool {
		c, err := st.GetCheckpoint(context.Background(), session)
		if err == nil && ok(c) {
			cp = c
			return true
		}
		return false
	})
	return cp
}

func dumpEvents(t *testing.T, st store.Store, session string) {
	evs, _ := st.Events(context.Background(), session, 0, 0)
	for _, ev := range evs {
		b, _ := json.Marshal(ev.Data)
		if len(b) > 400 {
			b = b[:400]
		}
		t.Logf("%d %s %s %s", ev.Seq, ev.Turn, ev.Type(), b)
	}
}
