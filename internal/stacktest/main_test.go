package stacktest

import (
	"testing"

	"github.com/harvest-dev/harvest/internal/testbin"
)

// TestMain stops the PostgreSQL server a test started (testbin.Postgres),
// then fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) { testbin.Main(m) }
