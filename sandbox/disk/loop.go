package disk

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/internal/mountinfo"
)

// mountOptions: discard gives deleted blocks back to the host (the loop
// driver punches holes in the image); noinit_itable keeps the kernel from
// zeroing inode tables the sparse image already reads as zeros (which would
// allocate them on the host) on a disk an older mke2fs could not mark
// zeroed; data=ordered (ext4's default, stated) writes a file's data before
// the metadata that points at it is committed, so a crash never shows a
// file holding another's old blocks; errors=remount-ro (as the superblock
// says) stops writes after an I/O error.
const mountOptions = "discard,noinit_itable,data=ordered,errors=remount-ro"

// attached returns a loop device that image is attached to, or "". A disk
// whose mount was detached lazily (Remove, or a reboot-like umount -l)
// stays attached while a box still holds it; attaching it a second time
// would mount one ext4 twice and corrupt it.
func attached(image string) (string, error) {
	img, err := filepath.EvalSymlinks(image)
	if err != nil {
		return "", err
	}
	devs, err := Attached()
	return devs[img], err
}

// rundownWait bounds how long attachedSettled waits for a loop device to
// let go of its image after its last unmount.
const rundownWait = 3 * time.Second

// attachedSettled is attached, after giving the kernel time to release a
// device that is on its way out: an autoclear loop device is released by
// a kernel worker after its last unmount (loop_rundown_workfn), so right
// after an umount returns it may still list the image for a moment, the
// longer the busier the machine. A device still there after rundownWait
// is held by something (a box's mount namespace after a lazy unmount).
func attachedSettled(image string) (string, error) {
	deadline := time.Now().Add(rundownWait)
	for {
		dev, err := attached(image)
		if err != nil || dev == "" || time.Now().After(deadline) {
			return dev, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Attached lists the files attached to loop devices, each with its
// device: the images of the disks that are mounted, or that a box still
// holds after a lazy unmount — the disks that can still be written.
func Attached() (map[string]string, error) {
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // detached meanwhile
		}
		out[strings.TrimSpace(string(b))] = "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
	}
	return out, nil
}

// UnmountUnder unmounts every disk mounted at or below dir (lazily) and
// returns how many. For tests and clean-up tools that remove a whole data
// directory; Harvest itself unmounts a disk with Disk.Remove.
func UnmountUnder(dir string) (int, error) { return mountinfo.UnmountLoopsUnder(dir) }

// mountImage attaches image to a free loop device (autoclear: released at
// the last unmount) and mounts it at dir, nosuid and nodev.
func mountImage(image, dir string) error {
	if dev, err := attachedSettled(image); err != nil {
		return fmt.Errorf("disk image %s: %w", image, err)
	} else if dev != "" {
		return fmt.Errorf("disk image %s is still in use on %s (a box from before an unmount still running on it?): destroy that box, or run losetup -d %s once it is gone", image, dev, dev)
	}
	f, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("opening disk image: %w", err)
	}
	defer f.Close()
	dev, loop, err := attachLoop(int(f.Fd()))
	if err != nil {
		return fmt.Errorf("disk image %s: %w", image, err)
	}
	defer loop.Close() // autoclear: the mount holds the device from here on
	err = unix.Mount(dev, dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, mountOptions)
	if err != nil {
		_ = unix.IoctlSetInt(int(loop.Fd()), unix.LOOP_CLR_FD, 0)
		return fmt.Errorf("mounting disk image %s at %s: %w", image, dir, err)
	}
	return nil
}

// attachLoop binds the open file fd to a free loop device and returns the
// device's path and an open handle on it. The kernel may hand out a device
// whose node does not exist (no udev in a container): it is made here.
func attachLoop(fd int) (string, *os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return "", nil, fmt.Errorf("loop devices: %w", err)
	}
	defer ctl.Close()
	for attempt := 0; attempt < 16; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", nil, fmt.Errorf("finding a free loop device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		if _, err := os.Stat(dev); errors.Is(err, os.ErrNotExist) {
			if err := unix.Mknod(dev, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(n)))); err != nil && !errors.Is(err, os.ErrExist) {
				return "", nil, fmt.Errorf("creating %s: %w", dev, err)
			}
		}
		loop, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return "", nil, fmt.Errorf("opening %s: %w", dev, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(fd)}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO // no second copy in the host's page cache
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		if errors.Is(err, unix.EINVAL) { // direct I/O unsupported by the image's filesystem
			cfg.Info.Flags &^= unix.LO_FLAGS_DIRECT_IO
			err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		}
		if err == nil {
			return dev, loop, nil
		}
		loop.Close()
		if !errors.Is(err, unix.EBUSY) { // EBUSY: another caller took it first
			return "", nil, fmt.Errorf("attaching %s: %w", dev, err)
		}
	}
	return "", nil, errors.New("no free loop device (all were taken while trying)")
}

// mounted reports whether d.Image is mounted at d.Dir: the mount at Dir
// (the last one there, per mountinfo) must be a loop device whose backing
// file is Image. Anything else mounted at Dir is an error.
func (d Disk) mounted() (bool, error) {
	dir, err := filepath.EvalSymlinks(d.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	devno := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source superoptions
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		if mountinfo.Unescape(fields[4]) == dir {
			devno = fields[2]
		}
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	if devno == "" {
		return false, nil
	}
	backing, err := os.ReadFile("/sys/dev/block/" + devno + "/loop/backing_file")
	if err != nil {
		return false, fmt.Errorf("%s has something mounted that is not a Harvest disk (device %s): unmount it", d.Dir, devno)
	}
	img, err := filepath.EvalSymlinks(d.Image)
	if err != nil {
		img = d.Image
	}
	if got := strings.TrimSpace(string(backing)); got != img {
		return false, fmt.Errorf("%s has another disk mounted (%s, not %s): unmount it", d.Dir, got, img)
	}
	return true, nil
}
