package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/moby/moby/api/types/mount"

	"github.com/harvest-dev/harvest/sandbox"

	"github.com/harvest-dev/harvest/internal/mountinfo"
)

// A slot is the host side of a warm box's changing mounts (see pool.go):
//
//	<RunDir>/.slots/<warm name>/            a bind mount of itself, shared
//	<RunDir>/.slots/<warm name>/workspace/  a bind of itself, read-only:
//	                                        the box's /workspace (rslave)
//	<RunDir>/.slots/<warm name>/tmp/        the box's /tmp (rslave; not
//	                                        under runsc: lateRoots)
//	<RunDir>/.slots/<warm name>/home/       the box's HOME (likewise)
//
// The container binds workspace, tmp and home with rslave propagation, so
// what the host mounts below them at the claim (the workspaces at
// workspace/NAME, /tmp and HOME from the box's disk or fresh tmpfs) shows
// up in the running box, and nothing the box mounts goes the other way (it
// cannot mount anything anyway: no capabilities). The slot itself is a
// shared mount because that is what propagation follows; the run dir's
// filesystem may well be private (it is on this machine).
//
// workspace is read-only on the host when the container starts: runc's
// bind of it keeps the flag, and under gVisor the gofer's does (a
// read-only docker mount would make gVisor refuse writes below it, in the
// workspaces mounted later, too). The claim makes it writable on the host
// for a moment to create the mount points; the container's copy stays
// read-only, so /workspace itself is as read-only as a cold box's.
//
// A claimed box's workspaces are thus mounted on the host, under the run
// dir (a cold box's are mounted only in its container): removing a run
// dir by hand (rm -rf) while boxes live would delete the workspaces'
// files through them. Destroy, discard and reapDead release slots with
// releaseSlot, and `harvest sandbox prune` destroys boxes one by one.
//
// Slots are named after the warm box, not the box id: they are never
// renamed (a mount point cannot be). The handle records the warm name
// (handleData.Pool); Destroy releases the slot after removing the
// container: a recursive lazy unmount of the slot, a check that nothing
// is mounted below it any more, and only then its removal (never a
// RemoveAll through a mounted workspace).

const slotsDir = ".slots"

// slotPath is the slot of warm box name.
func (p *Provider) slotPath(name string) string {
	return filepath.Join(p.cfg.RunDir, slotsDir, name)
}

// makeSlot creates and mounts the slot of warm box name.
func (p *Provider) makeSlot(name string) (string, error) {
	dir := p.slotPath(name)
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return "", fmt.Errorf("creating the warm boxes' slots: %w", err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating the slot of warm box %s: %w", name, err)
	}
	fail := func(err error) (string, error) {
		_ = releaseSlot(dir)
		return "", fmt.Errorf("preparing the slot of warm box %s: %w", name, err)
	}
	for _, d := range []string{"workspace", "tmp", "home"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return fail(err)
		}
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return fail(fmt.Errorf("bind-mounting %s: %w", dir, err))
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		return fail(fmt.Errorf("making %s a shared mount: %w", dir, err))
	}
	ws := filepath.Join(dir, "workspace")
	if err := unix.Mount(ws, ws, "", unix.MS_BIND, ""); err != nil {
		return fail(fmt.Errorf("bind-mounting %s: %w", ws, err))
	}
	if err := remount(ws, true); err != nil {
		return fail(err)
	}
	return dir, nil
}

func remount(dir string, readOnly bool) error {
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND)
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount("", dir, "", flags, ""); err != nil {
		return fmt.Errorf("remounting %s (read-only %v): %w", dir, readOnly, err)
	}
	return nil
}

// slotMounts are the container's mounts of a slot (rslave: see above):
// /workspace, and /tmp and HOME unless the runtime cannot see a mount
// made at a bind's root after the start (lateRoots).
func slotMounts(slot string, lateRoots bool) []mount.Mount {
	bind := func(src, dst string) mount.Mount {
		return mount.Mount{Type: mount.TypeBind, Source: filepath.Join(slot, src), Target: dst,
			BindOptions: &mount.BindOptions{NonRecursive: true, Propagation: mount.PropagationRSlave}}
	}
	if !lateRoots {
		return []mount.Mount{bind("workspace", sandbox.WorkspaceRoot)}
	}
	return []mount.Mount{bind("workspace", sandbox.WorkspaceRoot), bind("tmp", "/tmp"), bind("home", defaultHome)}
}

// lateRoots reports whether the provider's runtime sees a mount made on
// the host at the root of a bind (the slot's tmp or home) after the
// container started. runc does: the box's processes look paths up in the
// kernel. gVisor does not: its gofer holds the bind's root directory
// open from the start, and a mount on top of it is not what that
// directory is (a mount below it, a workspace at workspace/NAME, is seen:
// the gofer's lookups from the root cross it). Under runsc a warm box's
// /tmp and HOME are therefore dockerd's tmpfs, as a cold box's without a
// disk, and the pool serves no box with a disk (Spec.DiskDir).
func (p *Provider) lateRoots() bool { return p.cfg.Runtime != "runsc" }

// fillSlot mounts a claimed box's workspaces, /tmp and HOME into its slot:
// the workspaces recursively, as dockerd binds a cold box's; /tmp and HOME
// from the box's disk (disk: diskMounts), else fresh tmpfs like a cold
// box's (charged to the box's memory cgroup: the box's processes fault
// their pages in).
func fillSlot(slot string, spec sandbox.Spec, disk []mount.Mount, lateRoots bool) (err error) {
	ws := filepath.Join(slot, "workspace")
	if err := remount(ws, false); err != nil {
		return err
	}
	for _, w := range spec.Workspaces {
		dst := filepath.Join(ws, w.Name)
		if err := os.Mkdir(dst, 0o755); err != nil {
			return fmt.Errorf("creating the mount point of workspace %s: %w", w.Name, err)
		}
		if err := bindPrivate(w.HostPath, dst, unix.MS_REC); err != nil {
			return fmt.Errorf("mounting workspace %s (%s): %w", w.Name, w.HostPath, err)
		}
	}
	if err := remount(ws, true); err != nil {
		return err
	}
	if !lateRoots {
		if len(disk) > 0 {
			return errors.New("a warm box under this runtime cannot take a disk") // serves refuses it
		}
		return nil // dockerd's tmpfs since the start
	}
	tmp, home := filepath.Join(slot, "tmp"), filepath.Join(slot, "home")
	if len(disk) == 2 { // diskMounts: /tmp, then HOME
		if err := bindPrivate(disk[0].Source, tmp, 0); err != nil {
			return fmt.Errorf("mounting the box's /tmp from its disk: %w", err)
		}
		if err := bindPrivate(disk[1].Source, home, 0); err != nil {
			return fmt.Errorf("mounting the box's HOME from its disk: %w", err)
		}
		return nil
	}
	const fl = unix.MS_NOSUID | unix.MS_NODEV
	if err := unix.Mount("tmpfs", tmp, "tmpfs", fl, "mode=1777"); err != nil {
		return fmt.Errorf("mounting the box's /tmp: %w", err)
	}
	opts := fmt.Sprintf("mode=0700,uid=%d,gid=%d", spec.User.UID, spec.User.GID)
	if err := unix.Mount("tmpfs", home, "tmpfs", fl, opts); err != nil {
		return fmt.Errorf("mounting the box's HOME: %w", err)
	}
	return nil
}

// bindPrivate binds src at dst (in the slot: the box gets its copy now)
// and makes the new mount private, as dockerd's binds of a cold box are
// (rprivate): nothing later mounted below src on the host reaches the box.
func bindPrivate(src, dst string, rec uintptr) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|rec, ""); err != nil {
		return err
	}
	return unix.Mount("", dst, "", unix.MS_PRIVATE|unix.MS_REC, "")
}

// releaseSlot unmounts everything in a slot and removes it. It removes
// nothing while anything is still mounted below it: a workspace bound
// there would be emptied. A slot that does not exist is not an error.
func releaseSlot(slot string) error {
	if _, err := os.Lstat(slot); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	// MNT_DETACH takes a mount and everything below it; the innermost
	// first all the same (mountsUnder lists parents first).
	pts, err := mountsUnder(slot)
	if err != nil {
		return err
	}
	for i := len(pts) - 1; i >= 0; i-- {
		if err := unix.Unmount(pts[i], unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmounting %s: %w", pts[i], err)
		}
	}
	left, err := mountsUnder(slot)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("releasing slot %s: still mounted: %s (not removed)", slot, strings.Join(left, ", "))
	}
	if err := os.RemoveAll(slot); err != nil {
		return fmt.Errorf("removing slot %s: %w", slot, err)
	}
	return nil
}

// mountsUnder lists the mount points at or below dir in this process's
// mount namespace, in mountinfo order (parents before children).
func mountsUnder(dir string) ([]string, error) {
	ms, err := mountinfo.Under(dir)
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Point
	}
	return out, err
}
