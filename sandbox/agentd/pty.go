package agentd

import (
	"fmt"
	"os"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal whose master is non-blocking, in Go's
// poller, so that read deadlines work on it: a pump stops waiting for
// output exitLinger after its command exited (see pump.run) by a deadline.
//
// pty.Open alone gives a master in blocking mode (it takes its Fd for the
// ioctls), on which deadlines are silently ignored. On Linux that went
// unnoticed because the master reads EIO once the session leader exits
// (the kernel hangs the terminal up). gVisor does not hang it up: a read
// blocks for as long as the master is open, and the command's Wait never
// returned. With the deadline, both end the same way.
func openPTY(rows, cols uint16) (master, slave *os.File, err error) {
	m, s, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	m.Close()
	if err == nil {
		err = unix.SetNonblock(fd, true)
		if err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		s.Close()
		return nil, nil, fmt.Errorf("making the pty master non-blocking: %w", err)
	}
	// A non-blocking fd: os.NewFile puts it in the poller.
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := setSize(master, rows, cols); err != nil {
		master.Close()
		s.Close()
		return nil, nil, err
	}
	return master, s, nil
}

// setSize sets a terminal's window size through its raw fd (File.Fd would
// put the master back in blocking mode).
func setSize(master *os.File, rows, cols uint16) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}); err != nil {
		return err
	}
	return ierr
}
