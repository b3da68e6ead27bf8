package testbin

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"
)

// WaitFor polls cond until it holds, failing the test after d. Use it only
// where what is waited for sends no notification (a process leaving /proc,
// a file appearing); events have watchers (internal/stacktest).
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Context is a context for one test's calls: it ends after two minutes,
// or when the test does.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Logger is the logger of the components a test runs: silent, unless
// $HARVEST_TEST_LOG is set, and then everything, on stderr.
func Logger() *slog.Logger {
	if os.Getenv("HARVEST_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}
