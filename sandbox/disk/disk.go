// Package disk gives a box a disk of its own: a filesystem of a fixed size
// and a fixed number of inodes, so that a box that fills its disk gets
// ENOSPC inside while the host's disk, and every other box, is unharmed.
// It is the disk counterpart of the memory cgroup.
//
// # Mechanism: a loop-mounted ext4 image per session
//
// A Disk is a sparse file (Image) formatted ext4 with mkfs.ext4, attached
// to a loop device and mounted at Dir on the host, nosuid and nodev. The
// caller puts everything a box may write there: the workspaces (session
// copies repositories into Dir/NAME) and the box's /tmp and HOME (the
// backends bind Dir/.box/tmp and Dir/.box/home, sandbox.Spec.DiskDir). The
// kernel enforces both limits: ext4 has no more blocks than Size.Bytes and
// no more inodes than Size.Inodes, for the box user, for Harvest's own copy
// (which runs as root: the image is made with no reserved blocks, so root
// gets no more than the box) and for every process alike.
//
// Why not the alternatives:
//
//   - Project quotas (ext4/xfs prjquota) would cost nothing at create time,
//     but only where the data directory's filesystem was made (or mounted)
//     with them; it usually is not (ext4 needs `tune2fs -O project,quota` on
//     an unmounted filesystem and the prjquota mount option). A loop image
//     works on any filesystem that can hold a sparse file.
//   - Docker's --storage-opt size= covers only a container's writable layer
//     (the box's root is read-only and its workspaces are binds) and only
//     on overlay2 over xfs with pquota: not the workspaces, and rarely
//     available.
//   - A size-limited tmpfs for /tmp and HOME would be RAM charged to the
//     box's memory cgroup: filling it would end in the OOM killer rather
//     than ENOSPC, and it would not survive suspension. On the disk they are
//     bounded by the same limit as the workspaces, and HOME (agent CLIs keep
//     their state there) survives a box's destroy and recreate.
//
// # The filesystem: every feature named, none left to a config file
//
// mkfs.ext4 runs with MKE2FS_CONFIG=/dev/null and an explicit feature list
// (-O none,...), so what a disk is does not depend on the host's
// /etc/mke2fs.conf (a missing or old one once left disks ext2-like: no
// journal, 128-byte inodes, every inode table written at once — 166 MB of
// host disk for an empty 20 GiB image). The features (mkfsArgs):
//
//   - has_journal: metadata changes are journaled, so a disk is consistent
//     after a host crash (the journal is replayed at the next mount;
//     TestCrashReplay cuts the loop device off mid-write and checks it).
//     The journal is sized explicitly (journalBytes: 1/64 of the disk,
//     between 4 and 32 MiB) rather than mke2fs's 128 MiB for 20 GiB: once
//     written it stays allocated in the image, so it bounds what a disk
//     that has been used costs beyond its files. (Unpacking 25,000 files
//     took the same time with a 32, 64 or 128 MiB journal: BENCHMARKS.md.)
//     -e remount-ro: after an I/O error the filesystem stops taking writes
//     rather than go on (the superblock says so, whatever mounts it).
//   - metadata_csum rather than uninit_bg (they exclude each other):
//     checksums on every metadata block, the group descriptors included
//     (what uninit_bg's checksums covered, and what lets mke2fs leave
//     inode tables and bitmaps unwritten), and on the journal's blocks
//     (jbd2 checksum v3), so a torn or stale journal block is refused at
//     replay instead of being written over the filesystem.
//   - extent, flex_bg (16 groups), 64bit, huge_file, dir_nlink,
//     extra_isize, dir_index, filetype, ext_attr, large_file, sparse_super:
//     ext4 as every distribution makes it; 256-byte inodes (-I 256: room
//     for nanosecond times and inline extended attributes).
//   - no resize_inode: it reserves group descriptor blocks for growing the
//     filesystem 1024-fold, and mke2fs writes them (4 MiB of the image for
//     20 GiB). Disks are never grown today; if they are, the kernel grows
//     a filesystem without them (it switches to meta_bg).
//   - -m 0, -N inodes, -b 4096: see Size.
//
// And the extended options: assume_storage_prezeroed (e2fsprogs ≥ 1.47;
// lazy_itable_init and lazy_journal_init without it): inode tables, bitmaps
// and the journal are not written, and the groups are marked zeroed so the
// kernel does not zero them either at mount. That is exact, not a
// shortcut: the image is a new sparse file, whose holes read as the zeros
// mke2fs would write. The risk mke2fs's manual names for
// lazy_journal_init — a crash before the journal has been overwritten once,
// replaying stale transactions of an earlier filesystem on the same device —
// needs such stale blocks, and a new image has none (and metadata_csum's
// journal checksums would refuse them). nodiscard: there is nothing to
// discard in a new sparse file. With an older mke2fs the groups are not
// marked zeroed, and the noinit_itable mount option keeps the kernel from
// zeroing them (which would allocate them in the image).
//
// # Life of a disk
//
// The image is sparse: it takes host space only as the box writes, and the
// filesystem is mounted with discard, so files deleted inside give their
// blocks back to the host (the loop driver punches holes, once the
// deletion's transaction has committed: within seconds). A new 20 GiB
// disk costs about 0.3 MiB of host space (the superblocks and their
// backups, group descriptors, root directory and the journal's first
// blocks; 1.1 MiB for 100 GiB, 12 MiB for 1 TiB, where the backups grow;
// TestNewDiskCost, BENCHMARKS.md) and tens of milliseconds to create. A
// used one costs its files, the inode table blocks of every file it ever
// held (ext4 never gives those back) and at most its journal: emptied
// after holding 25,000 files, a 20 GiB disk holds 38 MB.
//
// A server does not make a session's disk when the session comes: a Pool
// (pool.go) keeps a few made and mounted ahead of demand, and a session
// takes one with a rename and a mount move (about a millisecond).
//
// A mount lasts until it is unmounted or the host reboots, so it survives a
// box's destroy and recreate and a restart of Harvest. Mount re-establishes
// it after a reboot (or finds it in place, matching the loop device's
// backing file against Image, and does nothing), replaying the journal if
// the host crashed; Unmount lets go of it and keeps the image; Remove
// unmounts it (lazily: a box still running keeps its view until it ends)
// and deletes the image. The loop device is set up with autoclear, so it
// is released with the last unmount. Nothing runs in the background but
// the kernel's own: each mounted disk has a jbd2 thread and an
// ext4-rsv-conversion rescuer (two kernel tasks).
//
// The host is overcommitted on purpose: disks are sparse, so many boxes with
// a 20 GiB limit may share a smaller host disk. Each box is bounded by its
// limit; the sum of what boxes actually write is bounded by the host's
// free space, as with any thin provisioning. Callers that admit work
// (package session) keep a floor of free space on the host; Stat says what
// an image holds. `harvest doctor` reports whether disks can be made here.
//
// Requirements: root (loop devices, mount), /dev/loop-control, mkfs.ext4
// (e2fsprogs) and ext4 in the kernel. Check says which is missing.
package disk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/sandbox"
)

// Defaults and bounds of a Size.
const (
	// DefaultBytes is a box's disk when nothing says otherwise.
	DefaultBytes = 20 << 30
	// BytesPerInode sets the default inode cap from the size: one inode per
	// 16 KiB, ext4's own default ratio (1,310,720 files on 20 GiB).
	BytesPerInode = 16 << 10
	// MinBytes is the smallest disk: ext4's journal and metadata need room.
	MinBytes = 16 << 20
	// blockSize is the filesystem's block size, which bounds Inodes from
	// above: ext4 holds at most one inode per block.
	blockSize = 4096
	// MinInodes is the smallest inode cap worth having.
	MinInodes = 1024
)

// Size is a disk's limits. Bytes is the filesystem's size: what files
// can use is about 2.5% less (ext4's journal, inode tables and bitmaps).
type Size struct {
	Bytes  int64 `json:"bytes"`
	Inodes int64 `json:"inodes"`
}

// WithDefaults fills in zero fields: DefaultBytes, and one inode per
// BytesPerInode.
func (s Size) WithDefaults() Size {
	if s.Bytes == 0 {
		s.Bytes = DefaultBytes
	}
	if s.Inodes == 0 {
		s.Inodes = max(s.Bytes/BytesPerInode, MinInodes)
	}
	return s
}

// Validate reports a size mkfs.ext4 cannot make, saying what to change.
func (s Size) Validate() error {
	if s.Bytes < MinBytes {
		return fmt.Errorf("disk %s: must be at least %s", sandbox.FormatSize(s.Bytes), sandbox.FormatSize(MinBytes))
	}
	if s.Inodes < MinInodes {
		return fmt.Errorf("disk inodes %d: must be at least %d", s.Inodes, MinInodes)
	}
	if s.Inodes > s.Bytes/blockSize {
		return fmt.Errorf("disk inodes %d: a %s disk holds at most %d (one per 4 KiB block): lower the inode cap or raise the disk size", s.Inodes, sandbox.FormatSize(s.Bytes), s.Bytes/blockSize)
	}
	if s.Inodes > 1<<32-1 {
		return fmt.Errorf("disk inodes %d: ext4 holds at most %d", s.Inodes, int64(1<<32-1))
	}
	return nil
}

// Disk is a filesystem image and where it is mounted on the host.
type Disk struct {
	Image string `json:"image"` // the sparse file holding the filesystem
	Dir   string `json:"dir"`   // its mount point
}

// mkfsTimeout bounds mkfs.ext4, which writes well under a MiB.
const mkfsTimeout = time.Minute

// Create makes the disk's image (unless it exists: then size is not
// checked against it) and mounts it at Dir, creating Dir. Dir must not
// hold anything: files there would be hidden under the mount. Create is
// idempotent: a disk already mounted is left as it is.
func Create(ctx context.Context, d Disk, size Size) error {
	if err := d.check(); err != nil {
		return err
	}
	size = size.WithDefaults()
	if err := size.Validate(); err != nil {
		return err
	}
	if _, err := os.Stat(d.Image); errors.Is(err, os.ErrNotExist) {
		if err := makeImage(ctx, d.Image, size, true); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("disk image %s: %w", d.Image, err)
	}
	return d.Mount(ctx)
}

// makeImage makes a new sparse image and formats it; prezeroed asks
// mkfs.ext4 to mark its groups zeroed (mkfsArgs), falling back to an
// mkfs that cannot.
func makeImage(ctx context.Context, image string, size Size, prezeroed bool) (err error) {
	if err := os.MkdirAll(filepath.Dir(image), 0o700); err != nil {
		return fmt.Errorf("creating the disk image's directory: %w", err)
	}
	tmp := image + ".new"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("creating disk image %s: %w", image, err)
	}
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	err = f.Truncate(size.Bytes) // sparse: no host space yet
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sizing disk image %s: %w", image, err)
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		return errors.New("mkfs.ext4 not found: install e2fsprogs (apt-get install -y e2fsprogs)")
	}
	ctx, cancel := context.WithTimeout(ctx, mkfsTimeout)
	defer cancel()
	out, err := runMkfs(ctx, mkfs, mkfsArgs(size, tmp, prezeroed))
	if err != nil && prezeroed && strings.Contains(out, "assume_storage_prezeroed") {
		// e2fsprogs before 1.47: the same disk, its groups not marked
		// zeroed (the noinit_itable mount option covers that).
		out, err = runMkfs(ctx, mkfs, mkfsArgs(size, tmp, false))
	}
	if err != nil {
		return fmt.Errorf("formatting disk image %s (mkfs.ext4): %w: %s", image, err, out)
	}
	if err := os.Rename(tmp, image); err != nil {
		return fmt.Errorf("creating disk image %s: %w", image, err)
	}
	return nil
}

// Features is the ext4 feature list of every disk, all of it: -O none
// first, so nothing comes from mke2fs's built-in defaults or a config file.
// See the package doc for why each is there (and resize_inode is not).
const Features = "none,has_journal,extent,flex_bg,metadata_csum,64bit,huge_file,dir_nlink,extra_isize,sparse_super,large_file,filetype,dir_index,ext_attr"

// Journal sizes: journalBytes is 1/64 of the disk within these.
const (
	minJournal = 4 << 20 // ext4's smallest (1024 blocks)
	maxJournal = 32 << 20
)

// journalBytes is the journal's size for a disk of size bytes. A used
// journal stays allocated in the image: it is a used disk's fixed cost.
func journalBytes(size int64) int64 {
	return min(max(size/64, minJournal), maxJournal)
}

// mkfsArgs is mkfs.ext4's command line for an image: every feature and
// size stated (with prezeroed, the groups are marked zeroed: e2fsprogs ≥
// 1.47).
func mkfsArgs(size Size, image string, prezeroed bool) []string {
	ext := "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=0:0"
	if prezeroed {
		ext += ",assume_storage_prezeroed=1"
	}
	return []string{"-q", "-F",
		"-O", Features,
		"-b", strconv.Itoa(blockSize),
		"-I", "256",
		"-G", "16", // flex_bg: 16 groups' metadata together
		"-J", "size=" + strconv.FormatInt(journalBytes(size.Bytes)>>20, 10),
		"-m", "0", // no blocks reserved for root: Harvest's copy gets no more than the box
		"-N", strconv.FormatInt(size.Inodes, 10),
		"-L", "harvest-disk",
		"-e", "remount-ro", // an I/O error stops writes rather than going on
		"-E", ext,
		image}
}

// runMkfs runs mkfs.ext4 with no configuration file (MKE2FS_CONFIG
// /dev/null: mkfsArgs says everything) and returns its output, less the
// warning that the empty configuration has no ext4 section.
func runMkfs(ctx context.Context, mkfs string, args []string) (string, error) {
	cmd := exec.CommandContext(ctx, mkfs, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "MKE2FS_CONFIG=/dev/null"}
	cmd.WaitDelay = 5 * time.Second
	b, err := cmd.CombinedOutput()
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.Contains(l, "mke2fs.conf") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "; "), err
}

// Mount mounts the disk's image at Dir (creating Dir) unless it is already
// mounted there. Use it to bring a disk back after a reboot.
func (d Disk) Mount(ctx context.Context) error {
	if err := d.check(); err != nil {
		return err
	}
	if _, err := os.Stat(d.Image); err != nil {
		return fmt.Errorf("disk image %s: %w", d.Image, err)
	}
	if err := os.MkdirAll(d.Dir, 0o711); err != nil {
		return fmt.Errorf("creating the disk's mount point: %w", err)
	}
	m, err := d.mounted()
	if err != nil || m {
		return err
	}
	if ents, err := os.ReadDir(d.Dir); err != nil {
		return fmt.Errorf("disk mount point %s: %w", d.Dir, err)
	} else if len(ents) > 0 {
		return fmt.Errorf("disk mount point %s is not empty (it holds %s): its files would be hidden under the disk; move them away", d.Dir, ents[0].Name())
	}
	return mountImage(d.Image, d.Dir)
}

// Mounted reports whether the disk's image is mounted at Dir.
func (d Disk) Mounted() (bool, error) { return d.mounted() }

// Remove unmounts the disk and deletes its image; Dir is left, an empty
// directory unless something else wrote there. Removing a disk that is
// gone is not an error. A box that still has the disk's
// directories mounted keeps them until it ends (the unmount is lazy).
func (d Disk) Remove() error {
	if err := d.Unmount(); err != nil {
		return err
	}
	if err := os.Remove(d.Image); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing disk image %s: %w", d.Image, err)
	}
	return nil
}

// Unmount unmounts the disk (lazily, as Remove) and keeps its image, for
// a disk nothing writes to any more that must still be kept: it then
// costs what its image holds, and no loop device, mount or kernel thread.
// Mount brings it back. Unmounting a disk that is not mounted is not an
// error.
func (d Disk) Unmount() error {
	if err := d.check(); err != nil {
		return err
	}
	for {
		m, err := d.mounted()
		if err != nil || !m {
			return err
		}
		if err := unix.Unmount(d.Dir, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmounting disk %s: %w", d.Dir, err)
		}
	}
}

// ImageStat is what an image costs the host.
type ImageStat struct {
	// Size is the image's length: the disk's limit (Size.Bytes).
	Size int64
	// Allocated is the host space it takes (st_blocks), what du reports.
	Allocated int64
}

// StatImage says what the image at path costs the host.
func StatImage(path string) (ImageStat, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return ImageStat{}, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return ImageStat{Size: st.Size, Allocated: st.Blocks * 512}, nil
}

// Usage is what a mounted disk holds.
type Usage struct {
	Size       Size
	UsedBytes  int64
	UsedInodes int64
}

// Usage reports the mounted disk's size and use (statfs of Dir).
func (d Disk) Usage() (Usage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(d.Dir, &st); err != nil {
		return Usage{}, fmt.Errorf("disk %s: %w", d.Dir, err)
	}
	bs := int64(st.Bsize)
	return Usage{
		Size:       Size{Bytes: int64(st.Blocks) * bs, Inodes: int64(st.Files)},
		UsedBytes:  int64(st.Blocks-st.Bfree) * bs,
		UsedInodes: int64(st.Files - st.Ffree),
	}, nil
}

func (d Disk) check() error {
	if !filepath.IsAbs(d.Image) || !filepath.IsAbs(d.Dir) {
		return fmt.Errorf("disk %q at %q: use absolute paths", d.Image, d.Dir)
	}
	if filepath.Clean(d.Dir) == "/" {
		return errors.New("disk: refusing to mount over /")
	}
	return nil
}

// IsFull reports whether err says a disk is out of space or inodes.
func IsFull(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)
}
