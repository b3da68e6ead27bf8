package stacktest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
)

// Lister is a provider that can list its boxes.
type Lister interface {
	sandbox.Provider
	sandbox.Lister
}

// DestroyAll destroys every box p lists, failing the test (not stopping
// it) on an error: eight at a time, each within a minute (a test that
// leaves hundreds of boxes, such as TestNodesTakeoverSpread's 600, is not
// bound by one minute for all).
func DestroyAll(t testing.TB, p Lister) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	hs, err := p.List(ctx)
	cancel()
	if err != nil {
		t.Errorf("listing boxes: %v", err)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, h := range hs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := p.Destroy(ctx, h); err != nil {
				t.Errorf("destroying box %s: %v", h.ID, err)
			}
		}()
	}
	wg.Wait()
}

// BoxIDs lists the ids of the boxes p lists, sorted.
func BoxIDs(t testing.TB, p sandbox.Lister) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hs, err := p.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, h := range hs {
		ids = append(ids, h.ID)
	}
	slices.Sort(ids)
	return ids
}
