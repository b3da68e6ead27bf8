package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/disk"
	"github.com/harvest-dev/harvest/store"
)

// A session's disk (package sandbox/disk) bounds what its box may write,
// like its memory limit bounds what it may hold: its workspace directory
// (DataDir/workspaces/session/{id}) is the mount point of an ext4 image of
// limits.disk_bytes and limits.disk_inodes, kept at
// DataDir/disks/session/{id}.img, and the box's /tmp and HOME live on it
// too (the workspace directory's .box, sandbox.Spec.DiskDir).
//
// The mount outlives boxes and Harvest restarts; prepareWorkspaces mounts
// it again (after a reboot) before it looks for the workspaces, so a
// suspended session resumes on its disk. Delete unmounts it and deletes
// the image.
//
// Config.Disks turns disks on (harvest serve does). Not covered yet: sessions in a workflow (their workspaces are shared, or
// copies under the workflow's runs directory) and sessions created before
// disks existed (a workspace directory with files and no image) run
// without a disk, as do all sessions where disks cannot be made (not root,
// no loop devices: `harvest doctor` says), with a warning in the log.

// diskBoxDir is the directory on a session's disk that holds its box's
// /tmp and HOME.
const diskBoxDir = ".box"

// sessionDisk is where s's disk is (or would be), or false when s has none
// by design. A disk made while Config.Disks was on is found (and removed
// with its session) when it is off.
func (m *Manager) sessionDisk(s *store.Session) (disk.Disk, bool) {
	if s.Collab.Workflow != "" {
		return disk.Disk{}, false
	}
	dir, err := WorkspaceDir(m.cfg.DataDir, Scope{Session: s.ID})
	if err != nil {
		return disk.Disk{}, false
	}
	return disk.Disk{Image: filepath.Join(m.cfg.DataDir, "disks", "session", s.ID+".img"), Dir: dir}, true
}

// disksUsable says once whether this machine can make disks, and warns if not.
func (m *Manager) disksUsable(ctx context.Context) bool {
	m.disks.once.Do(func() {
		if err := disk.Check(ctx, ""); err != nil {
			m.log.Warn("sessions run without disk limits: their workspaces, /tmp and HOME can fill the host's disk", "err", err)
			m.disks.err = err
		}
	})
	return m.disks.err == nil
}

// diskState is the Manager's memo of disksUsable.
type diskState struct {
	once sync.Once
	err  error
}

// ensureDisk makes or mounts s's disk before its workspaces are looked at.
func (m *Manager) ensureDisk(ctx context.Context, s *store.Session) error {
	d, ok := m.sessionDisk(s)
	if !ok {
		return nil
	}
	_, err := os.Stat(d.Image)
	if errors.Is(err, fs.ErrNotExist) && !m.cfg.Disks {
		return nil
	}
	if !m.disksUsable(ctx) {
		if err == nil {
			return fatal(fmt.Errorf("the session's workspaces are on the disk image %s, which cannot be mounted here: %w", d.Image, m.disks.err))
		}
		return nil
	}
	if err == nil {
		if err := d.Mount(ctx); err != nil {
			return fmt.Errorf("mounting the session's disk: %w", err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("the session's disk: %w", err)
	} else {
		if ents, err := os.ReadDir(d.Dir); err == nil && len(ents) > 0 {
			return nil // a workspace from before disks: left as it is
		}
		size := disk.Size{Bytes: s.Limits.DiskBytes, Inodes: s.Limits.DiskInodes}
		if err := disk.Create(ctx, d, size); err != nil {
			return fatal(fmt.Errorf("creating the session's disk (limits.disk_bytes %s): %w", sandbox.FormatSize(size.WithDefaults().Bytes), err))
		}
	}
	if err := os.MkdirAll(filepath.Join(d.Dir, diskBoxDir), 0o700); err != nil {
		return fmt.Errorf("the session's disk: %w", m.diskFull(s, err))
	}
	return nil
}

// boxDiskDir is the Spec.DiskDir of s's box: "" when s has no disk mounted.
func (m *Manager) boxDiskDir(s *store.Session) string {
	d, ok := m.sessionDisk(s)
	if !ok {
		return ""
	}
	if mounted, err := d.Mounted(); err != nil || !mounted {
		return ""
	}
	return filepath.Join(d.Dir, diskBoxDir)
}

// removeDisk unmounts s's disk and deletes its image, if it has one.
func (m *Manager) removeDisk(s *store.Session) error {
	d, ok := m.sessionDisk(s)
	if !ok {
		return nil
	}
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
	if d, ok := m.sessionDisk(s); !ok {
		return err
	} else if mounted, _ := d.Mounted(); !mounted {
		return err
	}
	size := disk.Size{Bytes: s.Limits.DiskBytes, Inodes: s.Limits.DiskInodes}.WithDefaults()
	return fmt.Errorf("%w: the repositories do not fit the session's disk limit (%s, %d files; limits.disk_bytes and limits.disk_inodes): start the session with a larger one, like `harvest session new --disk 40g`, or raise the server's default with `harvest serve --disk`",
		err, sandbox.FormatSize(size.Bytes), size.Inodes)
}
