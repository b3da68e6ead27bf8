// Package sandbox defines what a Harvest sandbox ("box") is and the contract every
// backend implements.
//
// # Shape
//
// A box is an isolated place to run an agent's commands on one or more git
// workspaces. Every backend starts the same small static binary as PID 1 inside
// the box (harvest-agent, package agentd), and the host talks to it over ONE
// multiplexed connection (package proto). So above the Provider line every
// backend behaves the same: Exec, PTYs, files, glob and grep are implemented once,
// in this package, as a client of that connection (Sandbox).
//
//	          host (harvest)                           |  box
//	Provider.Start(Spec) ──► backend creates the box   |
//	                         (bwrap / container / ...)  |  harvest-agent (PID 1)
//	Sandbox ◄── one connection (unix socket) ──────────┼──►  exec, pty, files,
//	  Exec / ReadFile / Glob / Grep ...                 |     glob, grep, reaper
//
// # The Provider contract
//
// Modelled on Nomad's task drivers:
//
//   - Start creates a box from a validated Spec and returns a connected Sandbox.
//     Its Handle is plain JSON: persist it to recover the box later.
//   - Recover reattaches to a box that is still running, from a persisted Handle,
//     typically after `harvest serve` restarted. Boxes outlive the process that
//     created them on purpose (local: a per-box shim is bwrap's parent; docker:
//     dockerd is). Recover of a box that is gone returns ErrNotFound.
//   - Stop asks every process in the box to exit (SIGTERM), waits up to the grace
//     period, then kills what is left. The box no longer runs; Destroy still has
//     to release it.
//   - Destroy kills the whole process tree and releases every resource (cgroups,
//     containers, runtime directories). It is idempotent: destroying a box that is
//     already gone is not an error.
//   - Optional capabilities are separate small interfaces found by type assertion
//     (Lister, to find boxes a crashed Harvest left behind).
//
// # Security model
//
// The box never sees host credentials: its environment is built from the Spec
// only, HOME is empty, /etc is synthetic (no gitconfig, no host users), the
// network is "none", and the box user is an unprivileged uid with no
// capabilities and no_new_privs. File operations run inside the box through the
// agent, so a symlink the agent wrote can never make Harvest touch a host path:
// host-side code must not open files inside a workspace directly. The "host"
// backend has none of this; it exists for development, is refused unless the
// caller says --unsafe-host, and is labelled unsafe in every output.
package sandbox
