package natsbus_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/harvest-dev/harvest/internal/testbin"
)

// TestMain stops the benchmarks' PostgreSQL server (if one started), then
// fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) {
	code := m.Run()
	testbin.StopPostgres()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
