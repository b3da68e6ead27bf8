package postgres

import (
	"testing"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/storetest"
)

// open opens a Store on url, closed when the test ends.
func open(t testing.TB, url string) *Store {
	t.Helper()
	s, err := Open(testbin.Context(t), url)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, testbin.Postgres(t))
	})
}
