// Package mountinfo reads this process's mount table
// (/proc/self/mountinfo): which mounts are at or below a directory, and
// which of them are loop devices (Harvest's session disks). It is a leaf:
// the disk and docker backends use it, and so does the tests' temporary
// directory clean-up (internal/testbin), which cannot import the disk
// package (whose own tests import testbin).
package mountinfo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Mount is one line of the mount table.
type Mount struct {
	// Point is where it is mounted (unescaped).
	Point string
	// Dev is its device's major:minor.
	Dev string
}

// Under lists the mounts at or below dir in this process's mount
// namespace, in the table's order (parents before children). dir is taken
// as given: resolve symbolic links first where they matter.
func Under(dir string) ([]Mount, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	dir = filepath.Clean(dir)
	var out []Mount
	for _, line := range strings.Split(string(b), "\n") {
		// id parent major:minor root mountpoint options ... - fstype source superoptions
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := Unescape(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, Mount{Point: mp, Dev: f[2]})
		}
	}
	return out, nil
}

// IsLoop says whether m's device is a loop device (a disk image).
func (m Mount) IsLoop() bool {
	_, err := os.Stat("/sys/dev/block/" + m.Dev + "/loop/backing_file")
	return err == nil
}

// UnmountLoopsUnder unmounts (lazily: a process still using one keeps it
// until it lets go) every loop device mounted at or below dir, the last
// mounted first, and returns how many. A dir that does not exist has
// nothing mounted below it (a mount point cannot be removed).
func UnmountLoopsUnder(dir string) (int, error) {
	root, err := filepath.EvalSymlinks(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	ms, err := Under(root)
	if err != nil {
		return 0, err
	}
	n := 0
	for i := len(ms) - 1; i >= 0; i-- {
		if !ms[i].IsLoop() {
			continue
		}
		if err := unix.Unmount(ms[i].Point, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return n, fmt.Errorf("unmounting %s: %w", ms[i].Point, err)
		}
		n++
	}
	return n, nil
}

// Unescape undoes the mount table's octal escapes (\040 for a space).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
