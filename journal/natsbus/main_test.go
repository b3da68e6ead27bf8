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
		// nats.go's ordered consumer remakes its pull subscription when
		// the connection comes back; an iterator stopped while it does
		// (a follower closed across a NATS restart) can leave that
		// subscription's two goroutines waiting on a connection already
		// closed. They are nats.go's, hold nothing of Harvest's, and end
		// with the process (docs/limitations.md, Several machines).
		if err := goleak.Find(
			goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*pullSubscription).pullMessages"),
			goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*pullConsumer).Messages.func2"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
