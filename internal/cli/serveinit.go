package cli

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// PID 1
//
// In a container started without an init, `harvest serve` is PID 1 of its
// PID namespace, and the kernel makes it the parent of every orphan there:
// anything whose parent exits before it (a helper a git command left, a
// box process whose supervisor died) comes back to it as a zombie for it to
// reap. The server cannot reap them itself: Go's os/exec waits for each
// child it started by that child's pidfd, so a wait for any child (wait4
// of -1) would take the exit status of a command an exec.Cmd is about to
// Wait for, which then fails with ECHILD; and an orphan cannot be told
// from a child of os/exec without depending on how os/exec holds pidfds.
//
// So PID 1 becomes a minimal init, the way tini or docker --init do: it
// runs the same command line as its only child (which is not PID 1, and
// serves), passes it every signal a container gets (SIGTERM from docker
// stop, SIGINT, SIGHUP, ...), reaps every child that exits (the server's
// orphans reparented to it included), and exits with the server's status.
// The child is in its own process group, so a terminal's ^C reaches it once,
// through the init, and not twice. The init starts no other process, so its
// wait for any child steals nothing.

// forwarded are the signals the init passes to the server.
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// serveAsInit runs this process's command line as its child and reaps until
// that child exits; it returns the child's exit status as an exitError.
func serveAsInit(stderr io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return exitCode(exitHarvestError, fmt.Errorf("running as PID 1: finding my executable: %w", err))
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGCHLD}, forwarded...)...)
	defer signal.Stop(sigs)

	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return exitCode(exitHarvestError, fmt.Errorf("running as PID 1: starting the server: %w", err))
	}
	// The server is reaped below with every other child, not by cmd.Wait
	// (nothing else waits for it: no context, no copying goroutines).
	server := cmd.Process.Pid
	for {
		// Reap everything that has exited; a SIGCHLD arriving meanwhile
		// wakes the loop again.
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.EINTR {
				continue
			}
			if pid <= 0 || err != nil {
				break
			}
			if pid == server {
				switch {
				case ws.Signaled():
					return exitCode(128+int(ws.Signal()), nil)
				default:
					return exitCode(ws.ExitStatus(), nil)
				}
			}
		}
		if sig := <-sigs; sig != syscall.SIGCHLD {
			if err := cmd.Process.Signal(sig); err != nil {
				fmt.Fprintf(stderr, "harvest: PID 1: passing %v to the server: %v\n", sig, err)
			}
		}
	}
}
