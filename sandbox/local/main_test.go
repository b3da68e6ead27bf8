package local_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them. With
// $LOCAL_TEST_WARM set it is instead a process that keeps a warm box
// (warmHolder), for the tests of what a dead Harvest leaves.
func TestMain(m *testing.M) {
	if dir := os.Getenv(warmHolderEnv); dir != "" {
		os.Exit(warmHolder(dir))
	}
	goleak.VerifyTestMain(m)
}
