// Package environment prepares repositories so sessions start warm: a
// repository's setup (its .harvest/setup.sh, or the usual install
// commands of what it is — go.work or go.mod; package.json with or
// without a lockfile, npm's, pnpm's or yarn's; uv.lock, poetry.lock,
// requirements.txt or pyproject.toml; Cargo.lock; Gemfile.lock:
// detectors.go has the rules) runs once, in a box with egress to the
// package registries and the repository's setup secrets, and what it
// leaves — the checkout with its installed dependencies (node_modules,
// .venv, vendor/bundle) and HOME with its caches (Go's module and build
// caches, npm's, pip's, corepack's package managers) — is kept as the
// repository's environment, keyed by a fingerprint of everything that
// decides it.
//
// A repository with nothing to install gets an environment all the same:
// no box runs, and its HOME is the empty directory a setup's box would
// have started with, so that a session or `harvest run` starts from it
// like from any other (a box's HOME layer must exist). Its build log says
// which files Harvest looked for.
//
//	Build: checkout (Harvest's) → Detect (reads files, runs nothing on the host)
//	       → fingerprint → ready one with it? done
//	       → box: workspace = the checkout, HOME = DIR/ID/home, egress, secrets
//	       → sh -c 'set -e; SETUP' (HARVEST_BOOT_MODE=setup), log to DIR/ID/build.log
//	       → ready (or failed, only its log kept)
//
// A session on the repository then starts from it (package session): its
// HOME is the environment's HOME under a copy-on-write layer of its own
// (sandbox.Spec.HomeLayer: an overlay in the box's mount namespace on the
// local backend; a copy on docker), and what the setup left in the
// checkout beyond the repository's own files (node_modules, .venv,
// target/) is its checkout's layer on the local backend: a tree of them
// (Builder.Layer, unpacked by the setup's box) shown under the session's
// fresh checkout by an overlay in the box (sandbox.Workspace.Layer), so a
// start costs one mount whatever their size, and the session's writes to
// them land in its checkout (copied up), never in the environment. On
// docker, and for environments built before layers, they are copied into
// the fresh checkout from a tar, in the box (Builder.Artifacts). Host code
// never runs the repository's code or git in a tree a box has written.
// `harvest run` starts from one the same way (use.go has the steps both
// take).
//
// Docker gets a copy of HOME on the session's disk rather than the
// committed image per environment seed 000 suggests: in an image, the
// session's writes to HOME would land in the container's writable layer,
// outside the disk limit that bounds the rest of the session, and be lost
// when a suspended session's container is removed. The copy is made once
// per session disk (sandbox.FillHome) and costs what BENCHMARKS.md shows.
//
// # Concurrency
//
// A Builder builds one environment at a time per repository and backend
// (a mutex per key; a second build of the same one waits and then finds
// the first's result by its fingerprint); builds of different
// repositories run at once. Build runs on the caller's goroutine and
// starts none that outlive it (the egress bridge it starts is closed
// before it returns).
package environment
