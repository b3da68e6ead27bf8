// Package stacktest assembles Harvest's stack for tests, once: a data
// directory, the store (SQLite in a file, or PostgreSQL: below) and the
// journal, the sandbox providers (the
// local backend with its warm pool, docker when asked), harvest sim
// playing a script as the model, the model configuration that points at
// it, a clock the test moves, a logger, and a repository to give
// sessions. Everything is real and on loopback; nothing is a fake of our
// own.
//
// # Two layers, because of session's internal tests
//
// session's tests are internal (package session: they use unexported
// things), so a package they import must not import session. The stack is
// therefore split where session sits:
//
//	internal/stacktest          everything below session: Stack (dirs, store,
//	                            journal, providers, sim, models, clock), the
//	                            event watchers and checks, the box helpers.
//	                            Imported by session's, server's and the CLI's
//	                            tests.
//	internal/stacktest/apitest  a session.Manager built from a Stack, the HTTP
//	                            server on 127.0.0.1, tokens and clients, and a
//	                            leak check of every goroutine. Imported by
//	                            server's tests (and any test of the API); not
//	                            by session's, which build their Manager from
//	                            the same Stack (Backends, Models, Sources,
//	                            DataDir, Clock, Logger are the Config's values).
//
// The CLI's tests run the real `harvest serve` binary, not a Stack: they
// use the Sim, the box helpers and the event helpers of this package.
//
// Helpers that need nothing of Harvest (polling, a buffer safe to read while
// written, processes on the host, a test's context and logger) live in
// internal/testbin, beside the built binaries, so that packages below the
// stack can use them too.
//
// # The store
//
// A Stack's store is SQLite in a file of the test's (DBPath), unless
// WithPostgres, or $HARVEST_TEST_STORE=postgres when no option says,
// gives it a fresh database on the test process's own PostgreSQL server
// (testbin.Postgres; StoreURL). A package whose tests may use PostgreSQL
// stops that server in TestMain with testbin.Main. The tests that must
// hold on both stores run on PostgreSQL in every go test run through an
// entry point of their package (session's TestOnPostgres); the variable
// runs a whole package there: HARVEST_TEST_STORE=postgres go test
// ./session/. A child process (Inherit) opens its parent's store,
// whichever it is.
//
// # Cleanup order
//
// New registers its cleanups in the order that makes them run right (last
// registered, first run): the Manager a test opens after Open is closed
// first, then the journal and the store, then every local box left is
// destroyed and the providers closed, then the sessions' disks are
// unmounted, then the directories are removed, the sim stops and, last,
// the docker backend's boxes are destroyed.
//
// # Goroutines
//
// A Stack starts the sim's HTTP server (stopped by a cleanup) and whatever
// the journal and the providers start (closed by cleanups). Its event
// watchers start none. Packages that use it run goleak in TestMain;
// apitest also checks each test on its own.
package stacktest
