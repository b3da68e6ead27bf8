// Package procutil identifies host processes safely across pid reuse: a
// process is its pid plus its start time (field 22 of /proc/PID/stat, in clock
// ticks since boot), which together never repeat.
package procutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ID names one process instance.
type ID struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// ErrGone: the process has exited (or the pid now belongs to another one).
var ErrGone = errors.New("process is gone")

// Lookup returns the ID of a running pid.
func Lookup(pid int) (ID, error) {
	st, err := startTime(pid)
	if err != nil {
		return ID{}, err
	}
	return ID{PID: pid, Start: st}, nil
}

func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, ErrGone
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parsing /proc/%d/stat", pid)
	}
	f := bytes.Fields(b[i+1:])
	// After "(comm)": state is field 3 of the full line, starttime field 22.
	if len(f) < 20 {
		return 0, fmt.Errorf("parsing /proc/%d/stat", pid)
	}
	if f[0][0] == 'Z' || f[0][0] == 'X' {
		return 0, ErrGone
	}
	return strconv.ParseUint(string(f[19]), 10, 64)
}

// Alive reports whether id still runs (zombies count as gone).
func (id ID) Alive() bool {
	if id.PID <= 0 {
		return false
	}
	st, err := startTime(id.PID)
	return err == nil && st == id.Start
}

// Signal sends sig to id if it is still the same process.
func (id ID) Signal(sig syscall.Signal) error {
	if !id.Alive() {
		return ErrGone
	}
	if err := syscall.Kill(id.PID, sig); err != nil {
		if err == syscall.ESRCH {
			return ErrGone
		}
		return err
	}
	return nil
}

// WaitGone waits until id no longer runs or ctx ends.
func (id ID) WaitGone(ctx context.Context) error {
	d := 200 * time.Microsecond
	for id.Alive() {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if d < 20*time.Millisecond {
			d *= 2
		}
	}
	return nil
}

// GoneWithin reports whether id exits within d (or is gone already).
func (id ID) GoneWithin(ctx context.Context, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return id.WaitGone(ctx) == nil
}

// StartReaper waits for cmd (which must have started) on a goroutine and
// returns a channel closed once it exited and was reaped. The goroutine is
// owned by the process: it ends when the process does.
//
// An *exec.Cmd is first waited for on the netpoller (its pidfd turns readable
// when it exits), and only then reaped with Wait, which returns at once:
// Wait alone blocks in waitid and holds an OS thread for as long as the
// process lives, one kernel task in harvest serve per box (a shim lives as
// long as its session: 2,000 idle sessions were 2,000 threads).
func StartReaper(cmd interface{ Wait() error }) <-chan struct{} {
	reaped := make(chan struct{})
	go func() {
		if c, ok := cmd.(*exec.Cmd); ok && c.Process != nil {
			waitExited(c.Process.Pid)
		}
		_ = cmd.Wait()
		close(reaped)
	}()
	return reaped
}

// waitExited returns once pid, a child of ours not reaped yet (so the pid
// is still its own), has exited, waiting on the netpoller; or at once when
// it cannot (no pidfd here: the caller's Wait then blocks as it always did).
func waitExited(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		// Readable (POLLIN) once the process has exited; false: wait on the
		// poller and look again. A pidfd the poller cannot take makes Read
		// fail instead, and the caller's Wait blocks.
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		return err != nil && err != unix.EINTR || n > 0 && fds[0].Revents != 0
	})
}

// WaitChild waits until a process is gone: through reaped when we started
// it (so it is also reaped), else — a process some earlier Harvest started —
// by watching its pid.
func WaitChild(ctx context.Context, reaped <-chan struct{}, id ID) error {
	if reaped != nil {
		select {
		case <-reaped:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return id.WaitGone(ctx)
}
