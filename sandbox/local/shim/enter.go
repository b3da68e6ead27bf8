package shim

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Enter sets the box's hostname and mounts its workspaces into it (the
// claim's Hostname and Workspaces; see the package doc, step 3). Harvest
// calls it, in its own process, before it sends the claim to the shim: a
// thread locked in the shim would cost every box the runtime's template
// thread for good (runtime.LockOSThread starts it), a kernel task of every
// idle box.
//
// The thread that enters the box's namespaces goes back to the host's
// (saved before) and is unlocked, not left to exit with them: bwrap's
// parent-death signals (bwrap's --die-with-parent, Pdeathsig) follow the
// thread that forked the child, and any thread may have been that one. Its
// filesystem attributes stay its own (unshare CLONE_FS, which setns
// requires): the same root and working directory as the others, and the
// umask it had (Harvest never changes its umask). Should the way back
// fail, the thread stays locked and exits, rather than run other goroutines
// in the box's mount namespace.
//
// agent is the box's PID 1 as the shim reported it: its namespaces are
// entered through a pidfd, checked against its start time, so a pid the
// kernel recycled after the box died is never entered.
func Enter(agent Proc, uid, gid int, c Claim) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		host, err := saveThreadState()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		err = enterAndMount(agent, uid, gid, c)
		if host.restore() {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// threadState is what enterAndMount changes of its thread: its mount and
// UTS namespaces and its working directory.
type threadState struct{ mnt, uts, cwd int }

func saveThreadState() (*threadState, error) {
	st := &threadState{mnt: -1, uts: -1, cwd: -1}
	for _, f := range []struct {
		fd   *int
		path string
	}{{&st.mnt, "/proc/thread-self/ns/mnt"}, {&st.uts, "/proc/thread-self/ns/uts"}, {&st.cwd, "."}} {
		fd, err := unix.Open(f.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			st.close()
			return nil, fmt.Errorf("saving the shim's %s: %w", f.path, err)
		}
		*f.fd = fd
	}
	return st, nil
}

// restore puts the thread back into the saved namespaces and directory;
// false if it could not.
func (st *threadState) restore() bool {
	defer st.close()
	return unix.Setns(st.mnt, unix.CLONE_NEWNS) == nil &&
		unix.Setns(st.uts, unix.CLONE_NEWUTS) == nil &&
		unix.Fchdir(st.cwd) == nil
}

func (st *threadState) close() {
	for _, fd := range []int{st.mnt, st.uts, st.cwd} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

func enterAndMount(agent Proc, uid, gid int, c Claim) error {
	// Detached copies of the workspaces, taken in the host's namespace.
	trees := make([]int, len(c.Workspaces))
	for i, m := range c.Workspaces {
		if m.Lower != "" {
			fd, err := overlay(m)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			trees[i] = fd
			continue
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, m.Source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return fmt.Errorf("workspace %s: %w", m.Source, err)
		}
		defer unix.Close(fd)
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			return fmt.Errorf("workspace %s: nosuid,nodev: %w", m.Source, err)
		}
		trees[i] = fd
	}
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare fs: %w", err)
	}
	pidfd, err := unix.PidfdOpen(agent.PID, 0)
	if err != nil {
		return fmt.Errorf("the box's PID 1 (%d): %w (did the box end?)", agent.PID, err)
	}
	defer unix.Close(pidfd)
	if now := lookup(agent.PID); now.Start != agent.Start {
		return fmt.Errorf("the box's PID 1 (%d) is gone: the box ended before its claim", agent.PID)
	}
	ns := func(kind string, flag int) error {
		if err := unix.Setns(pidfd, flag); err != nil {
			return fmt.Errorf("entering the box's %s namespace: %w", kind, err)
		}
		return nil
	}
	if c.Hostname != "" {
		if err := ns("uts", unix.CLONE_NEWUTS); err != nil {
			return err
		}
		if err := unix.Sethostname([]byte(c.Hostname)); err != nil {
			return fmt.Errorf("setting the hostname: %w", err)
		}
	}
	if err := ns("mnt", unix.CLONE_NEWNS); err != nil {
		return err
	}
	for i, m := range c.Workspaces {
		// The box's tmpfs has no inode owner for host root (EOVERFLOW):
		// create the mount point as the box user.
		if !m.Over {
			unix.Setfsgid(gid)
			unix.Setfsuid(uid)
			err := unix.Mkdir(m.Target, 0o755)
			unix.Setfsuid(0)
			unix.Setfsgid(0)
			if err != nil {
				return fmt.Errorf("creating %s in the box: %w", m.Target, err)
			}
		}
		if err := unix.MoveMount(trees[i], "", unix.AT_FDCWD, m.Target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("mounting %s at %s: %w", m.Source, m.Target, err)
		}
	}
	// /workspace is read-only like the rest of the root: a directory an agent
	// made there would vanish with the box.
	ro := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	if err := unix.MountSetattr(unix.AT_FDCWD, "/workspace", 0, &ro); err != nil {
		return fmt.Errorf("making /workspace read-only: %w", err)
	}
	return nil
}

// overlay makes a detached overlay mount of m (Lower under Source), in
// the host's namespace but attached nowhere in it: the caller moves it
// into the box. Its paths are resolved here, on the host. Options keep
// the overlay plain (no redirects, no metacopy, no index), so nothing of
// the upper can point into another layer.
func overlay(m Mount) (int, error) {
	fs, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("overlay for %s: %w (is overlayfs available?)", m.Target, err)
	}
	defer unix.Close(fs)
	for _, kv := range [][2]string{
		{"lowerdir", m.Lower}, {"upperdir", m.Source}, {"workdir", m.Work},
		{"redirect_dir", "off"}, {"metacopy", "off"}, {"index", "off"}, {"xino", "off"},
	} {
		if err := unix.FsconfigSetString(fs, kv[0], kv[1]); err != nil {
			return -1, fmt.Errorf("overlay for %s: %s=%s: %w", m.Target, kv[0], kv[1], err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, fmt.Errorf("overlay for %s (lower %s, upper %s): %w", m.Target, m.Lower, m.Source, err)
	}
	fd, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, fmt.Errorf("overlay for %s: fsmount: %w", m.Target, err)
	}
	return fd, nil
}
