// Package doctest runs the shell blocks of Harvest's documentation, so the
// commands a reader copies cannot rot.
//
// A fenced block whose info string is "sh test" (in README.md and under
// docs/) is runnable: Extract finds it, with the file and the line of its
// opening fence, and a Runner runs it with bash (-e -o pipefail: the first
// command that fails fails the block) in its own process group, under a
// deadline (three minutes, or the block's own: "sh test timeout=5m"). When
// the block ends, whatever it left running in the background (a harvest sim
// it started with &) is ended with it: SIGTERM, then SIGKILL if the group
// is still there ten seconds later. A failure names the block's file:line
// and carries the end of its output.
//
// Why a marker instead of every sh block: some commands cannot run on the
// CI machine (creating a real GitHub App, a Kubernetes cluster, a model
// API key); those blocks stay plain "sh" and are read, not run. Every
// command that can run there is marked, and docs/development.md says so.
//
// The blocks run in the order they appear, file by file, against one
// harvest serve the test starts (TestDocs in this package): the real
// binaries built by the test, a server on 127.0.0.1 port 0 with a fresh
// data directory, and no model key, so sessions and harvest run play the
// bundled demo on harvest sim. Each block runs in a directory that mirrors
// the module's root (a symbolic link per top-level entry), so
// examples/calc and sim/examples resolve as they do in a checkout while
// files a block writes land in a temporary directory. The environment
// says where everything is: HOME (a fresh one: the data directory is
// ~/.harvest, its admin token ~/.harvest/admin-token), HARVEST_SERVER and
// HARVEST_TOKEN (the test's server and its admin token), HARVEST_RUN_DIR
// (the test's own box directory, so harvest sandbox ls and prune see only
// its boxes), and PATH with the test's harvest first.
package doctest
