package carry

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The system calls both directions use. Every open is relative to a
// directory descriptor that was itself opened without following a symlink,
// and names one component at a time (or, with openat2, a path the kernel
// resolves beneath the descriptor with no symlinks and no mount crossings).

const resolveStrict = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS |
	unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// noOpenat2 is set once openat2 turns out to be missing (ENOSYS, or EPERM
// from a seccomp filter); openBeneath then walks component by component.
var noOpenat2 atomic.Bool

// openBeneath opens rel (slash-separated, already validated: no "..", no
// empty or "." components) beneath dirfd without following any symlink and
// without leaving dirfd's mount. With O_PATH|O_NOFOLLOW a final symlink is
// opened itself; otherwise a symlink anywhere fails with ELOOP.
func openBeneath(dirfd int, rel string, flags int, mode uint32) (int, error) {
	flags |= unix.O_CLOEXEC | unix.O_NOFOLLOW
	if !noOpenat2.Load() {
		fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{
			Flags:   uint64(flags),
			Mode:    uint64(mode),
			Resolve: resolveStrict,
		})
		if err == nil || (err != unix.ENOSYS && err != unix.EPERM) {
			return fd, err
		}
		noOpenat2.Store(true)
	}
	// Fallback: one component at a time, each opened O_NOFOLLOW relative
	// to the previous descriptor, then the mount checked with fstat.
	var st unix.Stat_t
	if err := unix.Fstat(dirfd, &st); err != nil {
		return -1, err
	}
	dev := st.Dev
	parts := strings.Split(rel, "/")
	cur := dirfd
	for i, p := range parts {
		if p == "" || p == "." || p == ".." {
			if cur != dirfd {
				unix.Close(cur)
			}
			return -1, unix.EXDEV
		}
		f := unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW
		if i == len(parts)-1 {
			f = flags
		}
		fd, err := unix.Openat(cur, p, f, mode)
		if cur != dirfd {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, err
		}
		if st.Dev != dev {
			unix.Close(fd)
			return -1, unix.EXDEV
		}
		cur = fd
	}
	return cur, nil
}

// procPath names the object fd refers to through /proc. Path-based calls
// that follow the final link (getxattr, chmod, utimensat) reach exactly
// that object, even when it is a symlink opened with O_PATH|O_NOFOLLOW:
// the magic link is not followed any further.
func procPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// carriedXattr reports whether an extended attribute is carried: user.*
// (the agent's own, and overlayfs's with the userxattr option) and
// trusted.overlay.* (overlayfs's opaque markers and the like on an upper
// directory). security.* (SELinux labels, file capabilities) and system.*
// (POSIX ACLs) belong to the host, not the workspace, and are dropped.
func carriedXattr(name string) bool {
	return strings.HasPrefix(name, "user.") || strings.HasPrefix(name, "trusted.overlay.")
}

// readXattrs returns the carried extended attributes of the object fd
// refers to, sorted by name.
func readXattrs(fd int) ([]Xattr, error) {
	p := procPath(fd)
	buf := make([]byte, 1024)
	var n int
	for {
		var err error
		n, err = unix.Listxattr(p, buf)
		if err == unix.ERANGE {
			buf = make([]byte, len(buf)*4)
			if len(buf) > 1<<20 {
				return nil, fmt.Errorf("listing xattrs: list longer than 1 MiB")
			}
			continue
		}
		if err == unix.ENOTSUP || err == unix.EOPNOTSUPP {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("listing xattrs: %w", err)
		}
		break
	}
	var out []Xattr
	for name := range strings.SplitSeq(string(buf[:n]), "\x00") {
		if name == "" || !carriedXattr(name) {
			continue
		}
		val := make([]byte, 256)
		for {
			m, err := unix.Getxattr(p, name, val)
			if err == unix.ERANGE {
				sz, err2 := unix.Getxattr(p, name, nil)
				if err2 != nil {
					return nil, fmt.Errorf("reading xattr %s: %w", name, err2)
				}
				if sz > maxXattrValue {
					return nil, fmt.Errorf("reading xattr %s: value of %d bytes is over the %d limit", name, sz, maxXattrValue)
				}
				val = make([]byte, sz+1)
				continue
			}
			if err == unix.ENODATA {
				val = nil // removed meanwhile
				break
			}
			if err != nil {
				return nil, fmt.Errorf("reading xattr %s: %w", name, err)
			}
			val = val[:m]
			break
		}
		if val != nil {
			out = append(out, Xattr{Name: name, Value: val})
		}
	}
	sortXattrs(out)
	return out, nil
}

// writeXattrs sets xs on the object fd refers to.
func writeXattrs(fd int, xs []Xattr) error {
	p := procPath(fd)
	for _, x := range xs {
		if err := unix.Setxattr(p, x.Name, x.Value, 0); err != nil {
			return fmt.Errorf("setting xattr %s: %w", x.Name, err)
		}
	}
	return nil
}

// setTimes sets the object's atime and mtime to mtime (nanoseconds since
// the epoch). It goes through /proc so that it works on O_PATH descriptors,
// symlinks included.
func setTimes(fd int, mtime int64) error {
	ts := unix.NsecToTimespec(mtime)
	return unix.UtimesNanoAt(unix.AT_FDCWD, procPath(fd), []unix.Timespec{ts, ts}, 0)
}

// isGone reports errors that mean the entry vanished or changed kind while
// the walk looked at it: the agent may still be running.
func isGone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) ||
		errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ESTALE)
}
