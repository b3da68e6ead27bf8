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
//
// # Read-only mounts
//
// Spec.Mounts shows host directories or files in the box read-only: the
// agent CLIs installed on the host (node and its modules), a toolchain, a
// package cache. Writes fail with EROFS whatever the files' modes; what the
// box user may read is still up to host permissions. Box paths are checked
// by Spec.Validate (not over /, /usr, /etc, /tmp, HOME..., not in
// /workspace, /proc, /dev, /sys or the agent's directory, not nested), and
// each backend adds its own rules: local refuses paths inside the host trees
// it shares (/usr, /bin, /lib...), docker binds non-recursively, and the host
// backend, which has no box filesystem, accepts only a mount whose box path
// is its host path (and it is not read-only there).
//
// # Disk limits
//
// Memory, pids and CPU are cgroup limits every backend sets from Limits.
// Disk is bounded differently, because what a box writes outlives it: a
// session's workspaces must survive suspension. So the bound is a
// filesystem of its own (package sandbox/disk: a sparse ext4 image,
// loop-mounted on the host, bytes and inodes enforced by the kernel),
// made by whoever owns the workspaces (package session) and given to the
// box through Spec.DiskDir: each backend puts the box's /tmp and HOME on
// it, and the workspaces the caller copied there are on it already. A box
// that fills it gets ENOSPC and lives on; the host loses no more than the
// disk's size. The isolation battery checks it on every backend.
//
// # Box listeners and dials
//
// A box has no network, yet a process in it often needs to reach something
// Harvest serves: an agent CLI calling a model API through Harvest's
// credential-holding proxy, a tool server. Sandbox.Listen opens a listening
// socket inside the box (TCP on the box's own loopback, or a unix socket in
// its filesystem) and returns a net.Listener on the host: http.Serve(l, h)
// on the host serves clients in the box. The bytes travel over the
// connection Harvest already has to the box's agent, as streams of the same
// protocol that carries process output (proto: listen, accept, conn_close),
// with the same credit-based flow control in both directions, so a slow
// reader on either side stops the writer, never the agent. Nothing in the
// box can reach the host except through a connection the host accepted, and
// the box's network stays "none" (the isolation tests check that while a
// listener is open).
//
// Sandbox.Dial is the other direction: the host reaches a server a process
// in the box runs (an agent CLI's HTTP API bound to the box's 127.0.0.1).
// The agent connects from inside the box and the connection travels as a
// stream of the same kind (proto: dial, conn_close), so a dialed connection
// is the same boxConn as an accepted one. Dial reaches only the box's own
// loopback (127.0.0.0/8, ::1) and its unix sockets, checked on the host and
// again by the agent: it serves the box's servers and is never a way out of
// the box, whatever network a backend gives it. A dial the caller abandons
// (its context ends) is aborted in the box; nothing listening is an error
// that errors.Is syscall.ECONNREFUSED.
//
// The life of a forwarded connection, host side (boxConn):
//
//	Accept/Dial ──► open ──CloseWrite──► host half-closed (box reads EOF)
//	                 │  ◄── box shuts its writing half: Read returns io.EOF
//	                 │  ◄── agent Exit (both directions done, or reset: error)
//	                 │  ◄── connection to the agent lost: Read/Write fail ErrClosed
//	                 └──Close──► closed (agent writes what it queued, bounded,
//	                             then closes the box socket)
//
// Read and Write honour deadlines (SetDeadline and friends) as net.Conn
// requires; http.Server relies on a past read deadline waking a blocked Read.
// A listener and every forwarded connection (accepted or dialed) belong to
// its Sandbox's connection: closing the Sandbox or losing the box closes
// them and fails pending Accepts, Dials, Reads and Writes with ErrClosed
// naming the box. A recovered Sandbox must listen (and dial) again.
//
// # Fence
//
// Sandbox.Fence arms a box's dead-man's switch, kept in its agent (PID 1,
// package agentd's "Fence"): unless a later call moves it on, the agent
// ends the box at the deadline, every process killed, even if the
// process that armed it is paused, killed or cut off. Several nodes use
// it so that a node which can no longer renew a session's lease cannot
// leave that session's tools running (package session's "Self-fencing").
// Only the host may arm, move or disarm it (a process in the box is
// refused, on every backend); the deadline only moves later; Fence with a
// zero deadline disarms it. A box nobody arms never ends that way. It
// works the same on every backend: the agent's exit ends the box (local:
// its PID namespace; docker and gVisor: its container). What is left (a
// stopped container, a run dir) is released by Destroy as for any box
// that died.
//
// # Measured
//
// Observe wraps a Provider so that an Observer (harvest serve's metrics)
// hears of every create, recover, stop and destroy, and of every command
// started in its boxes (the exec round trip): the backends know nothing
// of it. A provider with a warm pool says how it does (Pooler).
package sandbox
