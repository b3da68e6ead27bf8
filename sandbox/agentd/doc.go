// Package agentd is the in-box agent: the small daemon that is PID 1 in every
// Harvest box (`harvest-agent sandbox-agent`, also `harvest sandbox-agent`).
//
// It serves the proto protocol on a listener the backend hands it (a unix socket
// fd or path) and does, inside the box, everything Harvest needs: run commands
// with pipes or a PTY, stream their output with flow control, signal and kill
// process trees, read and write files, glob and grep. Because it runs inside the
// box's namespaces, every path it touches is resolved inside the box: a symlink
// in a workspace can only ever point at something the box can already see.
//
// # Hardening at start (Main)
//
//   - as PID 1, not dumpable (PR_SET_DUMPABLE 0): no box process may
//     ptrace it or open its /proc/1/mem, fd or ns entries (see Fence).
//   - no_new_privs, then a seccomp filter on every thread (TSYNC), inherited by
//     every process in the box: TIOCSTI and TIOCLINUX ioctls, user-namespace
//     creation (clone/unshare with CLONE_NEWUSER; clone3 answers ENOSYS so libc
//     falls back to clone), keyrings, bpf, perf, module and mount syscalls are
//     refused with EPERM. The kernel here still allows TIOCSTI
//     (dev.tty.legacy_tiocsti=1), so this filter is what refuses it.
//   - every inherited fd above 2 (except the listener) is closed: a host
//     directory fd held by PID 1 would be a way out through /proc/1/fd.
//   - the pids limit counts threads, and the Go runtime aborts if it cannot
//     create one it needs: under a fork bomb the agent must keep room to
//     grow. With --nproc (the local backend) each command gets RLIMIT_NPROC
//     at the box's pids limit, below the cgroup's, so the commands stop
//     first (nproc.go); otherwise a handful of OS threads are created up
//     front and parked, and the agent lives on those.
//
// # Threads and signals
//
// Every kernel task of an idle box counts against the node's pid_max, so the
// agent idles on as few threads as the Go runtime allows: the main thread,
// sysmon and the one or two threads the scheduler started when it handed
// the P off from a thread in a syscall (the backend runs it with
// GOMAXPROCS=1 in its environment, so that holds from the runtime's start).
// Three things would each park threads for good, and the agent avoids them
// as a box's PID 1:
//
//   - os/signal: its loop waits in the runtime on a thread of its own, and
//     its first Notify starts a locked thread that keeps the signal masks,
//     and with it the runtime's template thread. With --no-signals (the
//     local backend) the agent catches nothing: SIGTERM, SIGINT and SIGHUP
//     are set back to SIG_DFL (rt_sigaction, behind the runtime's back),
//     which the kernel drops for a PID namespace's init from inside the box
//     and from the host alike; the backend ends a box through the protocol
//     (shutdown) or SIGKILL. Without it (docker, whose stop is a SIGTERM)
//     SIGTERM and SIGINT end the box and SIGPIPE and SIGHUP are caught.
//   - runtime.LockOSThread, which starts the template thread: the seccomp
//     filter is installed by retrying no_new_privs and seccomp until both
//     ran on the same thread (seccomp.go).
//   - SIGCHLD, for the same reason as os/signal: see the reaper below.
//
// # Processes and the reaper
//
// As PID 1 the agent must reap every zombie, including orphans it never
// started. One reaper goroutine collects every child and hands exit statuses
// to the processes it knows. As PID 1 it sits in a blocking wait4(-1) while
// the box has any process, and parks on a channel (no thread) once wait4
// says there is none, until the next fork: an idle box holds no thread for
// it, a busy one one. Outside a box (tests, --listen) it calls
// wait4(-1, WNOHANG) on each SIGCHLD instead, as it may share the process
// with children it must not wait for. To make both race-free, processes
// are forked with syscall.ForkExec while holding the reaper's lock and
// registered before the lock is released; the reaper takes the lock before
// it looks a pid up. Nothing else in the agent ever waits for a child (no
// os/exec Wait). The blocking wait4 cannot be interrupted, so Server.Close
// waits for the reaper only once the box has no process left: Main ends
// them first. Each command gets its own process group
// (a session, with a PTY); "kill" signals the group and every descendant found
// in /proc, repeated until none is left.
//
// # Output
//
// Each output fd has one pump goroutine. While a connection is attached, the pump
// reads only as much as the host has granted credit for, so a slow host blocks
// the command (pipe full), never the agent. While detached (Harvest restarting)
// it keeps reading into a bounded ring so the command never blocks; Attach
// replays the ring. OutputLimit switches a pump to read-and-drop. After the
// process exits, pumps drain what is buffered and stop waiting after a short
// linger, so a background grandchild holding the pipe cannot hold back the exit
// status; they keep draining (and dropping) in the background until EOF. The
// linger ends only on an empty pipe: a read whose deadline expired before the
// pump got to it (a loaded machine) says nothing about the pipe, so the pump
// then reads what is buffered without waiting, and delivers it.
//
// # Concurrency rules
//
//   - Server.mu guards the process table and the connection set.
//   - proc.mu guards a process's attachment, credits, ring and exit state; it is
//     never held while doing I/O on a pipe or the connection. proc.cond wakes
//     pumps when credit arrives, the attachment changes or the process exits.
//   - Lock order: Server.mu before proc.mu; reaper.mu is taken alone.
//   - Every connection has one reader and one writer goroutine; anything may
//     enqueue a frame (never blocking), only the writer touches the socket.
//   - Every goroutine is started through Server.goroutine and waited for in
//     Server.Close.
//
// # Fence (fence.go)
//
// The fence is a dead-man's switch the host keeps moving on: with several
// nodes, the node holding a session's lease arms it at its lease's
// deadline and moves it on at every renewal. If no call moves it on
// before the deadline (the node paused, died, or lost the store), the
// agent ends the box at once: every process SIGKILLed (kill -1 as PID 1),
// no grace, no drain of their output, and the agent exits, which ends the
// PID namespace (local) or the container (docker, gVisor). It lives in
// PID 1 because that is the one process whose end ends the box whatever
// happens to the host's process.
//
//   - Clocks: a call says "SentNS (the host's monotonic clock when it made
//     the call) plus LeftNS". The agent maps it onto its own clock with the
//     smallest offset (agent clock − SentNS) seen on that connection, so a
//     call that arrived late — the host paused between making and sending
//     it — counts from when it was made, never later. Only the clocks'
//     rates must agree (one kernel's CLOCK_MONOTONIC; gVisor's follows the
//     host's).
//   - The deadline only moves later (several calls may be in flight, and
//     a late one must not pull it back); Off disarms it. A box is never
//     armed unless the host arms it: a lone server never does.
//   - Only the host may call it. A connection is the host's when its peer
//     (SO_PEERCRED at accept) is outside the box's PID namespace (pid 0:
//     the local backend and runc, where a box process may connect to the
//     agent's socket and is refused), or is reported as the agent itself
//     (gVisor reports the host's connections so, and refuses box
//     processes the socket). The agent never connects to its own socket:
//     dial refuses a peer that is the agent. As PID 1 the agent is not
//     dumpable, so a box process of the same user cannot ptrace it or read
//     its memory; and the kernel drops SIGSTOP and SIGKILL sent to a PID
//     namespace's init from inside it, so it cannot be frozen either.
//
// # Box listeners (forward.go)
//
// listen opens a socket in the box; its accept goroutine accepts into a
// bounded channel (the kernel's backlog holds the rest). accept binds the
// next connection to a stream the host registered first: the call is
// registered on the reader goroutine, so a conn_close sent right after it
// always finds the stream, and waits on its own goroutine (bounded per
// connection). A bound connection (fwdConn) has two pumps: box → host reads
// only as much as the host granted credit for, host → box writes from a
// queue bounded by the window the agent grants. The second pump to stop sends
// Exit (with the I/O error, if any) and closes the socket. conn_close stops
// reading and lingers at most closeLinger writing what is queued; abort (and
// losing the host connection) closes at once. fwdConn.mu is taken alone and
// never held across socket I/O. Listeners and their connections belong to the
// host connection that opened them and end with it.
//
// # Box dials (dial.go)
//
// dial is the other direction: the host asks the agent to connect to a
// loopback TCP port or a unix socket in the box. Like accept, the call
// binds its stream (a fwdConn without a socket yet) on the reader goroutine,
// then connects on its own goroutine (bounded per connection, counted in
// conn.calls), with a context that ends when the host aborts the stream
// (conn_close), the host connection or the server ends, or dialTimeout
// passes. The connected socket becomes an ordinary fwdConn with the same two
// pumps. Only loopback addresses and unix sockets are dialed, checked here
// as well as on the host: dial must never become a way out of a box.
package agentd
