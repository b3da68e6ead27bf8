package session

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/disk"
	"github.com/harvest-dev/harvest/sandbox/owner"
	"github.com/harvest-dev/harvest/store"
)

// A session's disk (package sandbox/disk) bounds what its box may write,
// like its memory limit bounds what it may hold: the directory its
// repositories live in is the mount point of an ext4 image of
// limits.disk_bytes and limits.disk_inodes, and its box's /tmp and HOME
// live on it too (sandbox.Spec.DiskDir):
//
//	session      DataDir/workspaces/session/{id}       image DataDir/disks/session/{id}.img
//	             its box's /tmp and HOME in .box/
//	workflow wf  DataDir/workspaces/workflow/{owner}/{wf}  image DataDir/disks/workflow/{owner}/{wf}.img
//	             (the shared repositories and runs/, the parallel copies)
//	             each session's /tmp and HOME in .box/{session}/
//
// The sessions of a workflow share its disk, with the limits of the
// session that made it: a workflow's copies are bounded together.
//
// A new disk costs about 0.3 MiB of the host's disk, an idle session's
// (after a first turn) under 1 MiB, a used one what it holds plus at most
// its journal (package sandbox/disk; TestIdleSessionsDiskCost). The mount
// outlives boxes and Harvest restarts; after a reboot Recover mounts again
// the disks of the live and suspended sessions before any runner starts,
// and prepareWorkspaces (ensureDisk) before it looks for the workspaces,
// so nothing ever reads or writes a workspace on the empty mount point
// (see "Disks after a reboot, and at a session's end" below). A session
// that ends lets go of its disk: unmounted and kept, or removed when
// nothing ran on it. Delete unmounts it and deletes the image (a
// workflow's, when its last session is deleted). Making or mounting a
// disk holds a lock per image, so two sessions of a workflow provisioning
// at once never mount it twice. Admission (admission.go) keeps a floor of
// free space on the data directory's filesystem, which holds the images.
//
// With Config.DiskPool, disks of the default size are made ahead of
// demand (disk.Pool, in DataDir/disks/pool, named by an instance the
// Manager holds): a session asking for that size takes one with a rename
// and a mount move instead of a mkfs.ext4 and a loop mount. They count
// against admission like every image in DataDir/disks, none is made while
// the data directory is below its floor, and Close removes them.
//
// Config.Disks turns disks on (harvest serve does, unless told
// --no-disk-limits; it refuses to start where disks cannot be made: not
// root, no loop devices, no mkfs.ext4, as `harvest doctor` says). With
// disks on, a session whose disk cannot be made fails, saying why; one
// whose directory already holds files with no image (made before disks,
// or with disks off) goes on without one. Either way the session says
// whether its disk limit holds: limits_enforced.disk (enforcement in
// provision.go) is true only when its box's /tmp and HOME are on its
// mounted disk.

// diskBoxDir is the directory on a disk that holds its boxes' /tmp and
// HOME.
const diskBoxDir = ".box"

// sessionDisk is where s's disk is (or would be), and the DiskDir of its
// boxes on it. A disk made while Config.Disks was on is found (and removed
// with its session) when it is off.
func (m *Manager) sessionDisk(s *store.Session) (d disk.Disk, boxDir string, ok bool) {
	if wf := s.Collab.Workflow; wf != "" {
		d = disk.Disk{
			Image: filepath.Join(m.cfg.DataDir, "disks", "workflow", ownerDir(s.Owner), wf+".img"),
			Dir:   workflowDir(m.cfg.DataDir, s.Owner, wf),
		}
		return d, filepath.Join(d.Dir, diskBoxDir, s.ID), true
	}
	dir, err := WorkspaceDir(m.cfg.DataDir, Scope{Session: s.ID})
	if err != nil {
		return disk.Disk{}, "", false
	}
	d = disk.Disk{Image: filepath.Join(m.cfg.DataDir, "disks", "session", s.ID+".img"), Dir: dir}
	return d, filepath.Join(dir, diskBoxDir), true
}

// disksUsable says once whether this machine can make disks, and warns if not.
func (m *Manager) disksUsable(ctx context.Context) bool {
	m.disks.once.Do(func() {
		if err := disk.Check(ctx, ""); err != nil {
			m.log.Warn("disks cannot be made here: sessions that need one fail", "err", err)
			m.disks.err = err
		}
	})
	return m.disks.err == nil
}

// diskState is the Manager's memo of disksUsable and its per-image locks.
type diskState struct {
	once sync.Once
	err  error

	mu    sync.Mutex
	locks map[string]*sync.Mutex // by image path; never shrinks (a few bytes per disk)

	// low: the data directory was below its floor at the last look
	// (admission.go), to log its crossings once.
	low atomic.Bool

	// pool keeps disks of the default size ready (Config.DiskPool;
	// startDiskPool), held by inst; nil without one.
	pool *disk.Pool
	inst *owner.Hold
}

// startDiskPool starts keeping Config.DiskPool disks of the default size
// ready (Recover, once disks are known to work here). A pool that cannot
// start is logged: sessions make their disks as they come.
func (m *Manager) startDiskPool(ctx context.Context) {
	if !m.cfg.Disks || m.cfg.DiskPool <= 0 || !m.disksUsable(ctx) {
		return
	}
	if m.diskPool() != nil || m.isClosed() {
		return
	}
	ownersDir := cmp.Or(m.cfg.OwnersDir, owner.DefaultDir())
	inst, err := owner.NewInstance(ownersDir)
	if err != nil {
		m.log.Warn("keeping disks ready: new sessions make theirs", "err", err)
		return
	}
	p, err := disk.NewPool(disk.PoolConfig{
		Dir:  filepath.Join(m.cfg.DataDir, "disks", "pool"),
		Size: m.defaultDiskSize(), Count: m.cfg.DiskPool,
		Owner: inst.ID(), OwnersDir: ownersDir,
		Room: func() error {
			if low, se, err := m.belowFloor(); err != nil {
				return err
			} else if low {
				return se
			}
			return nil
		},
		Logger: m.log,
	})
	if err != nil {
		inst.Release()
		m.log.Warn("keeping disks ready: new sessions make theirs", "err", err)
		return
	}
	m.disks.mu.Lock()
	if m.disks.pool == nil {
		m.disks.pool, m.disks.inst = p, inst
		p, inst = nil, nil
	}
	m.disks.mu.Unlock()
	p.Close() // (a second Recover's: the first one's stays)
	inst.Release()
	if m.isClosed() { // Close ran meanwhile, and may have missed it
		m.closeDiskPool()
	}
}

// defaultDiskSize is the disk a session gets when it asks for no size.
func (m *Manager) defaultDiskSize() disk.Size {
	return disk.Size{Bytes: m.cfg.Defaults.DiskBytes, Inodes: m.cfg.Defaults.DiskInodes}.WithDefaults()
}

// closeDiskPool removes the ready disks and lets go of the pool's
// instance (Close).
func (m *Manager) closeDiskPool() {
	m.disks.mu.Lock()
	p, inst := m.disks.pool, m.disks.inst
	m.disks.pool, m.disks.inst = nil, nil
	m.disks.mu.Unlock()
	if err := p.Close(); err != nil {
		m.log.Warn("removing the disks kept ready", "err", err)
	}
	inst.Release()
}

// diskPool is the pool of ready disks, or nil.
func (m *Manager) diskPool() *disk.Pool {
	m.disks.mu.Lock()
	defer m.disks.mu.Unlock()
	return m.disks.pool
}

// lock takes the lock of one image and returns its release.
func (ds *diskState) lock(image string) func() {
	ds.mu.Lock()
	if ds.locks == nil {
		ds.locks = map[string]*sync.Mutex{}
	}
	l := ds.locks[image]
	if l == nil {
		l = &sync.Mutex{}
		ds.locks[image] = l
	}
	ds.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// ensureDisk makes or mounts s's disk before its workspaces are looked at.
func (m *Manager) ensureDisk(ctx context.Context, s *store.Session) error {
	d, boxDir, ok := m.sessionDisk(s)
	if !ok {
		return nil
	}
	defer m.disks.lock(d.Image)()
	_, err := os.Stat(d.Image)
	if errors.Is(err, fs.ErrNotExist) && !m.cfg.Disks {
		return nil
	}
	if !m.disksUsable(ctx) {
		if err == nil {
			return fatal(fmt.Errorf("the session's workspaces are on the disk image %s, which cannot be mounted here: %w", d.Image, m.disks.err))
		}
		// Disks are on (the server's operator asked for them) and cannot
		// be made: the session fails rather than run without its limit.
		return fatal(fmt.Errorf("the session's disk (limits.disk_bytes) cannot be made here: %w; the server's operator fixes that, or runs harvest serve --no-disk-limits", m.disks.err))
	}
	switch {
	case err == nil:
		if err := d.Mount(ctx); err != nil {
			return fmt.Errorf("mounting the session's disk: %w", err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("the session's disk: %w", err)
	default:
		if ents, err := os.ReadDir(d.Dir); err == nil && len(ents) > 0 {
			return nil // a workspace from before disks: left as it is
		}
		size := disk.Size{Bytes: s.Limits.DiskBytes, Inodes: s.Limits.DiskInodes}
		taken, err := m.diskPool().Take(ctx, d, size)
		if err == nil && !taken {
			err = disk.Create(ctx, d, size)
		}
		if err != nil {
			return fatal(fmt.Errorf("creating the session's disk (limits.disk_bytes %s): %w", sandbox.FormatSize(size.WithDefaults().Bytes), m.hostFull(err)))
		}
	}
	if err := os.MkdirAll(boxDir, 0o700); err != nil {
		return fmt.Errorf("the session's disk: %w", m.diskFull(s, err))
	}
	return nil
}

// boxDiskDir is the Spec.DiskDir of s's box: "" when s has no disk mounted.
func (m *Manager) boxDiskDir(s *store.Session) string {
	d, boxDir, ok := m.sessionDisk(s)
	if !ok {
		return ""
	}
	if mounted, err := d.Mounted(); err != nil || !mounted {
		return ""
	}
	return boxDir
}

// removeDisk unmounts s's own disk and deletes its image, if it has one.
// A workflow's disk goes with its last session (removeWorkflowDisk).
func (m *Manager) removeDisk(s *store.Session) error {
	if s.Collab.Workflow != "" {
		return nil
	}
	d, _, ok := m.sessionDisk(s)
	if !ok {
		return nil
	}
	return m.removeImage(d)
}

// leaveWorkflowDisk removes what s keeps on its workflow's disk (its
// box's /tmp and HOME), and the whole disk when s is the last session of
// the workflow.
func (m *Manager) leaveWorkflowDisk(s *store.Session, last bool) error {
	d, boxDir, ok := m.sessionDisk(s)
	if !ok || s.Collab.Workflow == "" {
		return nil
	}
	if last {
		return m.removeImage(d)
	}
	if mounted, _ := d.Mounted(); mounted {
		if err := os.RemoveAll(boxDir); err != nil {
			return fmt.Errorf("removing the session's /tmp and HOME: %w", err)
		}
	}
	return nil
}

func (m *Manager) removeImage(d disk.Disk) error {
	defer m.disks.lock(d.Image)()
	if _, err := os.Stat(d.Image); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return d.Remove()
}

// diskFull explains an error that is the session's disk being full: what
// the limit is and how to raise it.
func (m *Manager) diskFull(s *store.Session, err error) error {
	if !disk.IsFull(err) && !strings.Contains(err.Error(), "No space left on device") && !strings.Contains(err.Error(), "Disk quota exceeded") {
		return err
	}
	d, _, ok := m.sessionDisk(s)
	if !ok {
		return m.hostFull(err)
	}
	if mounted, _ := d.Mounted(); !mounted {
		return m.hostFull(err) // not the session's disk: the host's
	}
	// The disk's own size: a workflow's was set by the session that made it.
	size := disk.Size{Bytes: s.Limits.DiskBytes, Inodes: s.Limits.DiskInodes}.WithDefaults()
	if fi, err := os.Stat(d.Image); err == nil {
		size.Bytes = fi.Size()
	}
	if u, err := d.Usage(); err == nil {
		size.Inodes = u.Size.Inodes
	}
	whose := "the session's"
	if s.Collab.Workflow != "" {
		whose = "workflow " + s.Collab.Workflow + "'s shared"
	}
	return fmt.Errorf("%w: the repositories do not fit %s disk limit (%s, %d files; limits.disk_bytes and limits.disk_inodes): start the session with a larger one, like `harvest session new --disk 40g`, or raise the server's default with `harvest serve --disk`",
		err, whose, sandbox.FormatSize(size.Bytes), size.Inodes)
}

// Disks after a reboot, and at a session's end.
//
// A mount does not survive a reboot. Recover mounts again, before any
// runner starts, the disk of every session that may still use it: live
// ones (whatever their box: a reattached box finds its workspaces where
// they were) and suspended ones (a message resumes them; a carried
// checkpoint reads them). So no workspace is ever looked at, or written,
// on the empty mount point instead of the disk. Several nodes: the
// sessions a node takes over are mounted by their runners, as they
// provision (ensureDisk); a suspended one's disk waits for its resume.
//
// A session that ended (stopped or failed) is never written again: its
// disk is unmounted (endDisk, at the end and again at every Recover),
// releasing its loop device, mount and kernel threads, and its image
// kept until the session is deleted — the workspace may hold the agent's
// only copy of its work (a directory source's commits), which the server's
// operator can still mount and read. An image that holds nothing of the
// session's own — no box was ever started on it, no turn ran — is removed
// at once, with the workspace directory: a session that failed while
// provisioning costs nothing. A workflow's disk is left to its last
// session's delete: the workflow's other sessions use it.

// remountParallel bounds the disks Recover mounts at once.
const remountParallel = 4

// remountDisks mounts the disks of the live and suspended sessions in all
// that are not mounted (after a reboot), remountParallel at a time. A disk
// that cannot be mounted is logged: its runner tries again when it needs
// it (ensureDisk) and fails the session, saying why, if it still cannot.
func (m *Manager) remountDisks(ctx context.Context, all []*store.Session) {
	attached, err := disk.Attached()
	if err != nil {
		m.log.Warn("listing the loop devices to mount the sessions' disks again", "err", err)
		return
	}
	seen := map[string]bool{}
	var todo []*store.Session
	for _, s := range all {
		if !s.State.Live() && s.State != store.StateSuspended {
			continue
		}
		d, _, ok := m.sessionDisk(s)
		if !ok || seen[d.Image] {
			continue
		}
		seen[d.Image] = true
		if _, in := attached[realPath(d.Image)]; in {
			continue // mounted (or held by a box that outlived its mount)
		}
		if _, err := os.Stat(d.Image); err != nil {
			continue // no disk (made without disks, or not yet)
		}
		todo = append(todo, s)
	}
	if len(todo) == 0 || !m.disksUsable(ctx) { // (which says why not, once)
		return
	}
	m.log.Info("mounting the sessions' disks again (after a reboot?)", "disks", len(todo))
	work := make(chan *store.Session)
	var wg sync.WaitGroup
	for range min(remountParallel, len(todo)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				d, _, _ := m.sessionDisk(s)
				unlock := m.disks.lock(d.Image)
				err := d.Mount(ctx)
				unlock()
				if err != nil {
					m.log.Warn("mounting a session's disk again", "session", s.ID, "image", d.Image, "err", err)
				}
			}
		}()
	}
	for _, s := range todo {
		if ctx.Err() != nil {
			break
		}
		work <- s
	}
	close(work)
	wg.Wait()
}

// endDisk lets go of the disk of s, which ends (see above): unmounted
// and kept, or removed with its workspace directory when it holds nothing
// of the session's own. attached (disk.Attached; nil to look) saves a
// look at the mount table for each of many ended sessions.
func (m *Manager) endDisk(s *store.Session, attached map[string]string) error {
	if s.Collab.Workflow != "" {
		return nil
	}
	d, _, ok := m.sessionDisk(s)
	if !ok {
		return nil
	}
	defer m.disks.lock(d.Image)()
	if _, err := os.Stat(d.Image); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("the session's disk: %w", err)
	}
	if s.Turns == 0 && s.LimitsEnforced == nil && len(s.AgentState) == 0 {
		if err := d.Remove(); err != nil {
			return fmt.Errorf("removing the disk of an ended session that never ran: %w", err)
		}
		if err := os.RemoveAll(d.Dir); err != nil {
			return fmt.Errorf("removing the workspace of an ended session that never ran: %w", err)
		}
		return nil
	}
	if attached != nil {
		if _, in := attached[realPath(d.Image)]; !in {
			return nil
		}
	}
	if err := d.Unmount(); err != nil {
		return fmt.Errorf("unmounting the disk of an ended session: %w", err)
	}
	return nil
}

// realPath is p with its symbolic links resolved, as the kernel names a
// loop device's backing file (p itself when that fails).
func realPath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}
