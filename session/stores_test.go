package session

import (
	"testing"

	"github.com/harvest-dev/harvest/internal/stacktest"
)

// storeTests are the session tests whose state lives in the store through
// everything that matters — queues, cancels, suspension and resumption,
// locks, deletion, graceful and abrupt restarts — so they must pass on
// every store. Each runs on SQLite (or $HARVEST_TEST_STORE's store) as its
// own Test function, and on PostgreSQL in TestOnPostgres.
var storeTests = []struct {
	name string
	run  func(t *testing.T, opts ...envOpt)
}{
	{"QueuedMessagesDeliveredInOrder", testQueuedMessagesDeliveredInOrder},
	{"Interrupt", testInterrupt},
	{"CancelDuringBash", testCancelDuringBash},
	{"IdleSuspendAndResume", testIdleSuspendAndResume},
	{"MaxLifetime", testMaxLifetime},
	{"SessionLock", testSessionLock},
	{"Delete", testDelete},
	{"CloseAndRecover", testCloseAndRecover},
	{"CrashRecovery", testCrashRecovery},
}

// TestOnPostgres runs storeTests with the stack's store on PostgreSQL (a
// database of its own each, on this process's server): in every go test
// run, not only when $HARVEST_TEST_STORE asks for it.
func TestOnPostgres(t *testing.T) {
	for _, tt := range storeTests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, withPostgres) })
	}
}

// withPostgres keeps the env's state in PostgreSQL (stacktest.WithPostgres).
func withPostgres(c *envConfig) { stackOpt(stacktest.WithPostgres)(c) }
