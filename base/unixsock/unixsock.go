// Package unixsock listens on and dials unix sockets at paths of any length.
//
// A sockaddr_un holds at most 107 bytes of path, and Harvest's runtime dirs
// (test temp dirs, deep $HARVEST_HOME) can be longer. Both functions go
// through /proc/self/fd/N/NAME, where N is an O_PATH descriptor of the socket's
// directory: short, and resolved by the kernel like the real path.
package unixsock

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

const maxPath = 107

// viaDir calls f with a short address for path.
func viaDir(path string, f func(addr string) error) error {
	if len(path) <= maxPath {
		return f(path)
	}
	fd, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: filepath.Dir(path), Err: err}
	}
	defer unix.Close(fd)
	return f("/proc/self/fd/" + strconv.Itoa(fd) + "/" + filepath.Base(path))
}

// Listen creates a listening unix socket at path, replacing a stale one, and
// makes it mode 0600. (Never through the umask: it is process-wide, and
// changing it races every other goroutine creating files.)
func Listen(path string) (*net.UnixListener, error) {
	_ = os.Remove(path)
	var l *net.UnixListener
	err := viaDir(path, func(addr string) error {
		var err error
		l, err = net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
		if err != nil {
			return err
		}
		if err := os.Chmod(addr, 0o600); err != nil {
			l.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The listener removes the file on Close by its (maybe /proc) name, which
	// would not resolve later; we remove it ourselves.
	l.SetUnlinkOnClose(false)
	return l, nil
}

// Dial connects to the unix socket at path.
func Dial(ctx context.Context, path string) (*net.UnixConn, error) {
	var c net.Conn
	err := viaDir(path, func(addr string) error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, "unix", addr)
		return err
	})
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}

// PeerPID returns the pid (in the caller's pid namespace) of the process that
// created the other end of a connected unix socket, for a listening socket the
// process that called listen().
func PeerPID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, serr
	}
	return int(cred.Pid), nil
}
