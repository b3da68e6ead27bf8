package disk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Check says whether disks can be made on this machine, and if not, why
// and how to fix it. With a dir, it also makes, mounts and removes a
// small disk there (dir must be writable; the data directory's filesystem
// is the one that matters).
func Check(ctx context.Context, dir string) error {
	if os.Geteuid() != 0 {
		return errors.New("disk limits need root (loop devices and mounts): run harvest as root")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return fmt.Errorf("no /dev/loop-control (%v): load the loop module (modprobe loop), or give the container the loop devices", err)
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		return errors.New("mkfs.ext4 not found: apt-get install -y e2fsprogs")
	}
	if fs, err := os.ReadFile("/proc/filesystems"); err == nil && !strings.Contains(string(fs), "\text4\n") {
		return errors.New("the kernel has no ext4 (not in /proc/filesystems): modprobe ext4")
	}
	if dir == "" {
		return nil
	}
	tmp, err := os.MkdirTemp(dir, ".disk-check-")
	if err != nil {
		return fmt.Errorf("trying a disk in %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp)
	d := Disk{Image: filepath.Join(tmp, "img"), Dir: filepath.Join(tmp, "mnt")}
	if err := Create(ctx, d, Size{Bytes: MinBytes}); err != nil {
		return fmt.Errorf("trying a disk in %s: %w", dir, err)
	}
	return d.Remove()
}
