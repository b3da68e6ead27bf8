package stacktest

import (
	"context"
	"slices"
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
// it) on an error.
func DestroyAll(t testing.TB, p Lister) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hs, err := p.List(ctx)
	if err != nil {
		t.Errorf("listing boxes: %v", err)
	}
	for _, h := range hs {
		if err := p.Destroy(ctx, h); err != nil {
			t.Errorf("destroying box %s: %v", h.ID, err)
		}
	}
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
