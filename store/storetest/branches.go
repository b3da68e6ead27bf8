package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/harvest-dev/harvest/store"
)

// onBranch is a live session on branch of acme/app.
func onBranch(id, repo, branch string) *store.Session {
	s := fullSession(id)
	s.Repos = []store.Repo{{Name: "app", Source: repo, GitHub: repo, Branch: branch, Base: "main"}}
	s.Collab = store.Collab{}
	return s
}

// testBranches: a live session holds its GitHub branches; a second live
// session on one of them is refused with who holds it (the repository's
// name compared without case) and stores nothing; a session that ends,
// or is deleted, frees them; sessions on other branches, other
// repositories, or with no GitHub repository are not affected.
func testBranches(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	a := onBranch("s-branchesaaaaaaaaa", "acme/app", "feature/x")
	mustCreate(t, st, a)
	if id, err := st.BranchSession(ctx, "ACME/App", "feature/x"); err != nil || id != a.ID {
		t.Fatalf("BranchSession = %q, %v; want %s", id, err, a.ID)
	}
	if _, err := st.BranchSession(ctx, "acme/app", "Feature/x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("BranchSession of another branch (case differs): %v, want ErrNotFound", err)
	}

	b := onBranch("s-branchesbbbbbbbbb", "Acme/APP", "feature/x")
	err := st.CreateSession(ctx, b, &store.Message{ID: "m-b", Text: "hi"})
	var held *store.BranchHeldError
	if !errors.As(err, &held) || !errors.Is(err, store.ErrConflict) || held.Session != a.ID || held.Branch != "feature/x" || held.Repo != "acme/app" {
		t.Fatalf("a second session on the branch: %v; want a *BranchHeldError naming %s (ErrConflict)", err, a.ID)
	}
	if _, err := st.GetSession(ctx, b.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused session was stored: %v", err)
	}
	// Another branch, another repository, no GitHub repository: no claim
	// in the way.
	mustCreate(t, st, onBranch("s-branchescccccccc1", "acme/app", "feature/y"))
	mustCreate(t, st, onBranch("s-branchescccccccc2", "acme/other", "feature/x"))
	local := fullSession("s-branchescccccccc3")
	local.Repos = []store.Repo{{Name: "api", Source: "/src/api"}}
	local.Collab = store.Collab{}
	mustCreate(t, st, local)

	// Updates that keep it live keep the claim.
	if _, err := st.UpdateSession(ctx, a.ID, func(s *store.Session) error { s.State = store.StateSuspended; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateSession(ctx, b, nil); !errors.As(err, &held) {
		t.Fatalf("a session on the branch of a suspended one: %v; want a *BranchHeldError", err)
	}
	// Ended: the branch is free.
	if _, err := st.UpdateSession(ctx, a.ID, func(s *store.Session) error { s.State = store.StateStopped; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := st.BranchSession(ctx, "acme/app", "feature/x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("BranchSession after the holder stopped: %v, want ErrNotFound", err)
	}
	mustCreate(t, st, b)
	if id, err := st.BranchSession(ctx, "acme/app", "feature/x"); err != nil || id != b.ID {
		t.Errorf("BranchSession = %q, %v; want %s", id, err, b.ID)
	}
	// Deleted: free too.
	if err := st.DeleteSession(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, st, onBranch("s-branchesddddddddd", "acme/app", "feature/x"))
	// A session that fails frees its branch as well.
	if _, err := st.UpdateSession(ctx, "s-branchesddddddddd", func(s *store.Session) error { s.State = store.StateFailed; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := st.BranchSession(ctx, "acme/app", "feature/x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("BranchSession after the holder failed: %v, want ErrNotFound", err)
	}
}

// testBranchRace: sessions created at once on one branch (two nodes, two
// deliveries processed at the same instant): exactly one is stored, and
// every other is told it.
func testBranchRace(t *testing.T, open func(*testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = st.CreateSession(ctx, onBranch(fmt.Sprintf("s-branchrace%08d", i), "acme/app", "harvest/pr"), nil)
		}()
	}
	wg.Wait()
	won := ""
	for i, err := range errs {
		if err == nil {
			if won != "" {
				t.Fatalf("two sessions were stored on one branch: %s and %d", won, i)
			}
			won = fmt.Sprintf("s-branchrace%08d", i)
		}
	}
	if won == "" {
		t.Fatalf("no session was stored: %v", errs)
	}
	for _, err := range errs {
		var held *store.BranchHeldError
		if err != nil && (!errors.As(err, &held) || held.Session != won) {
			t.Errorf("a loser: %v; want a *BranchHeldError naming %s", err, won)
		}
	}
	ss, err := st.ListSessions(ctx, store.SessionFilter{})
	if err != nil || len(ss) != 1 {
		t.Errorf("%d sessions stored (%v); want 1", len(ss), err)
	}
}
