package shim

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// child is a process the shim started (bwrap), waited for through the
// netpoller on its pidfd: a wait4 blocked in the kernel (os/exec's Wait)
// would hold an OS thread for the box's whole life, a kernel task of every
// idle box, and pid_max bounds a node's tasks.
//
// Nothing pins the thread that forks it: no shim thread ever exits (the
// claim's thread goes back to the host's namespaces, see applyClaim), so
// --die-with-parent, which follows the forking thread, fires only when the
// shim itself is gone.
type child struct {
	pid   int
	pidfd *os.File // nonblocking, registered with the netpoller
}

// start forks and execs path with args; files are the child's fds 0, 1, 2...
func start(path string, args []string, files []*os.File, attr *syscall.SysProcAttr) (*child, error) {
	if filepath.Base(path) == path {
		lp, err := exec.LookPath(path)
		if err != nil {
			return nil, err
		}
		path = lp
	}
	fds := make([]uintptr, len(files))
	for i, f := range files {
		fds[i] = f.Fd()
	}
	pidfd := -1
	sys := *attr
	sys.PidFD = &pidfd
	pid, err := syscall.ForkExec(path, append([]string{path}, args...), &syscall.ProcAttr{Env: os.Environ(), Files: fds, Sys: &sys})
	if err != nil {
		return nil, err
	}
	if pidfd < 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_, _ = syscall.Wait4(pid, nil, 0, nil)
		return nil, fmt.Errorf("the kernel gave no pidfd for %s (Linux 5.3 or newer is required)", path)
	}
	if err := unix.SetNonblock(pidfd, true); err != nil {
		unix.Close(pidfd)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_, _ = syscall.Wait4(pid, nil, 0, nil)
		return nil, err
	}
	return &child{pid: pid, pidfd: os.NewFile(uintptr(pidfd), "pidfd")}, nil
}

// kill sends SIGKILL through the pidfd: never to a recycled pid.
func (c *child) kill() {
	if rc, err := c.pidfd.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.PidfdSendSignal(int(fd), unix.SIGKILL, nil, 0) })
	}
}

// wait returns a channel that gets the child's status once it exited and was
// reaped, with whatever it left the shim (a subreaper): no zombie outlives
// the box.
func (c *child) wait() <-chan syscall.WaitStatus {
	done := make(chan syscall.WaitStatus, 1)
	go func() { // owned: the shim waits on done before it exits
		var ws syscall.WaitStatus
		rc, err := c.pidfd.SyscallConn()
		if err == nil {
			// The pidfd turns readable when the child exits; until then
			// the goroutine is parked in the netpoller, not on a thread.
			err = rc.Read(func(uintptr) bool {
				pid, err := syscall.Wait4(c.pid, &ws, syscall.WNOHANG, nil)
				return pid == c.pid || (err != nil && err != syscall.EINTR)
			})
		}
		if err != nil { // no poller: wait in the kernel
			for {
				if _, err := syscall.Wait4(c.pid, &ws, 0, nil); err != syscall.EINTR {
					break
				}
			}
		}
		c.pidfd.Close()
		// The box is over: the agent died with bwrap; reap it and anything
		// else bwrap left us.
		for {
			if _, err := unix.Wait4(-1, nil, 0, nil); err != unix.EINTR && err != nil {
				break
			}
		}
		done <- ws
	}()
	return done
}
