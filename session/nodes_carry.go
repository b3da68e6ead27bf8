package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/objstore"
	"github.com/harvest-dev/harvest/workspace/carry"
)

// Carrying workspaces between nodes that do not share a disk. See
// "Carrying workspaces" in nodes.go.

// instanceFile names the copy of a workspace directory, at its root (a
// disk's root is not mounted in the box).
const instanceFile = ".harvest-instance"

// DefaultCarryMax bounds the size of a workspace carried between nodes
// (Config.CarryMax).
const DefaultCarryMax int64 = 4 << 30

// carrier carries the workspaces of a node's sessions (nil on a lone
// server: nothing is carried).
type carrier struct {
	st      store.Store
	obj     objstore.Store // the checkpoint store (nodes_objects.go)
	packs   objectPacks
	dataDir string
	node    string
	opt     carry.Options
	log     *slog.Logger
	// ensureDisk mounts a session's disk (Manager.ensureDisk); hide
	// writes the data directory as DATA (Manager.hideDataDir).
	ensureDisk func(ctx context.Context, s *store.Session) error
	hide       func(string) string

	mu        sync.Mutex
	prev      map[string]carried // by session: this node's last checkpoint of it
	lastSweep time.Time
}

type carried struct {
	instance string
	m        *carry.Manifest
}

func newCarrier(m *Manager) (*carrier, error) {
	if m.node == nil || m.cfg.CarryMax < 0 {
		return nil, nil
	}
	max := m.cfg.CarryMax
	if max == 0 {
		max = DefaultCarryMax
	}
	obj := m.cfg.Checkpoints
	if obj == nil {
		d, err := objstore.NewDir(filepath.Join(m.cfg.DataDir, DefaultCheckpointDir))
		if err != nil {
			return nil, err
		}
		obj = d
	}
	return &carrier{st: m.st, obj: obj, packs: objectPacks{st: m.st, obj: obj}, dataDir: m.cfg.DataDir, node: m.node.cfg.ID, log: m.log,
		opt:        carry.Options{MaxBytes: max, Skip: carrySkip},
		ensureDisk: m.ensureDisk, hide: m.hideDataDir, prev: map[string]carried{}}, nil
}

// carries says whether s's workspace is carried between nodes.
func (c *carrier) carries(s *store.Session) bool {
	return c != nil && s.Collab.Workflow == ""
}

// carrySkip leaves out of a snapshot what is not the workspace's: the
// disk's lost+found, the HOME overlay's work directory (the kernel's) and
// the instance file.
func carrySkip(rel string, isDir bool) bool {
	return rel == "lost+found" || rel == instanceFile || rel == instanceFile+".new" || rel == diskBoxDir+"/.home-work"
}

// dir is the directory s's workspaces live in on this node.
func (c *carrier) dir(s *store.Session) (string, error) {
	return WorkspaceDir(c.dataDir, Scope{Session: s.ID})
}

// instanceHere is the instance id of s's directory on this node ("" when
// it has none: missing, or never carried).
func (c *carrier) instanceHere(s *store.Session) (string, error) {
	dir, err := c.dir(s)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(dir, instanceFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the workspace's instance: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// newInstance gives s's directory on this node a new instance id.
func (c *carrier) newInstance(s *store.Session) (string, error) {
	dir, err := c.dir(s)
	if err != nil {
		return "", err
	}
	var b [12]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", fmt.Errorf("creating %s: %w", c.hide(dir), err)
	}
	tmp := filepath.Join(dir, instanceFile+".new")
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing the workspace's instance: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, instanceFile)); err != nil {
		return "", fmt.Errorf("writing the workspace's instance: %w", err)
	}
	return id, nil
}

// here says whether the copy of s's workspace on this node is the current
// one (see the top of this file); cp is the checkpoint to restore when it
// is not.
func (c *carrier) here(ctx context.Context, s *store.Session) (here bool, cp *store.Checkpoint, err error) {
	if !c.carries(s) {
		return true, nil, nil
	}
	cp, err = c.st.GetCheckpoint(ctx, s.ID)
	if errors.Is(err, store.ErrNotFound) {
		return true, nil, nil
	}
	if err != nil {
		return false, nil, fmt.Errorf("reading the workspace's checkpoint: %w", err)
	}
	inst, err := c.instanceHere(s)
	if err != nil {
		return false, nil, err
	}
	return inst == cp.Instance, cp, nil
}

// sync makes the copy of s's workspace on this node the current one,
// restoring the checkpoint under f when it is not (provision calls it
// before it looks at the workspaces). It returns a reason for the
// session's state when it restored.
func (c *carrier) sync(ctx context.Context, f store.Fence, s *store.Session) (string, error) {
	here, cp, err := c.here(ctx, s)
	if err != nil || here {
		return "", err
	}
	b, err := c.manifest(ctx, cp)
	if err != nil {
		if ctx.Err() != nil {
			return "", err
		}
		return "", fmt.Errorf("reading the workspace's checkpoint (node %s, turn %q): %w", cp.Node, cp.Turn, err)
	}
	man, err := carry.UnmarshalManifest(b)
	if err != nil {
		return "", fatal(fmt.Errorf("the workspace's checkpoint (node %s, turn %q) cannot be read: %w", cp.Node, cp.Turn, err))
	}
	if err := c.ensureDisk(ctx, s); err != nil {
		return "", err
	}
	dir, err := c.dir(s)
	if err != nil {
		return "", err
	}
	start := time.Now()
	// Empty the stale copy, its instance file first: a crash midway
	// leaves a directory that is restored again.
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", fmt.Errorf("creating %s: %w", c.hide(dir), err)
	}
	if err := os.Remove(filepath.Join(dir, instanceFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("removing the stale workspace's instance: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", c.hide(dir), err)
	}
	for _, e := range ents {
		if e.Name() == "lost+found" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return "", fmt.Errorf("removing the stale workspace: %s", c.hide(err.Error()))
		}
	}
	restored, err := carry.Restore(ctx, dir, man, c.packs, c.opt)
	if err != nil {
		if ctx.Err() != nil {
			return "", err
		}
		return "", fmt.Errorf("restoring the workspace from its checkpoint (node %s, turn %q): %s", cp.Node, cp.Turn, c.hide(err.Error()))
	}
	inst, err := c.newInstance(s)
	if err != nil {
		return "", err
	}
	// The session's repositories are here now (what its view shows).
	if _, err := c.st.UpdateSessionFenced(ctx, f, func(st *store.Session) error {
		for i := range st.Repos {
			st.Repos[i].Path = filepath.Join(dir, st.Repos[i].Name)
		}
		return nil
	}); err != nil {
		return "", fmt.Errorf("recording where the restored workspace is: %w", err)
	}
	// The same checkpoint, now naming this copy: the node it came from
	// must not take its own copy, which may be newer, for the current one.
	moved := *cp
	moved.Instance, moved.Node = inst, c.node
	if err := c.st.PutCheckpoint(ctx, f, &moved); err != nil {
		return "", fmt.Errorf("recording the restored workspace: %w", err)
	}
	c.mu.Lock()
	c.prev[s.ID] = carried{instance: inst, m: restored} // the next snapshot reads what changed since
	c.mu.Unlock()
	after := "its first turn"
	if cp.Turn != "" {
		after = "the end of turn " + cp.Turn
	}
	c.log.Info("restored the workspace from its checkpoint", "session", s.ID, "from", cp.Node, "turn", cp.Turn, "files", cp.Files, "bytes", cp.Bytes, "took", time.Since(start).Round(time.Millisecond))
	return fmt.Sprintf("the session moved from node %s: its workspace was restored as it was at %s (%d files, %s); what changed after that is lost", cp.Node, after, cp.Files, sizeString(cp.Bytes)), nil
}

// checkpoint stores s's workspace as it is, under f (after turn, or after
// provisioning: turn ""), reading only the files that changed since this
// node's last checkpoint of it. A failure is logged: the session goes on,
// and a node taking it over restores an older checkpoint.
func (c *carrier) checkpoint(ctx context.Context, f store.Fence, s *store.Session, turn string) {
	if !c.carries(s) || ctx.Err() != nil {
		return
	}
	if err := c.store(ctx, f, s, turn); err != nil && ctx.Err() == nil {
		c.log.Warn("carrying the workspace to the store failed: if this node dies, another restores an older copy", "session", s.ID, "turn", turn, "err", c.hide(err.Error()))
	}
}

func (c *carrier) store(ctx context.Context, f store.Fence, s *store.Session, turn string) error {
	dir, err := c.dir(s)
	if err != nil {
		return err
	}
	inst, err := c.instanceHere(s)
	if err != nil {
		return err
	}
	if inst == "" {
		if inst, err = c.newInstance(s); err != nil {
			return err
		}
	}
	c.mu.Lock()
	prev := c.prev[s.ID]
	c.mu.Unlock()
	var pm *carry.Manifest
	if prev.instance == inst {
		pm = prev.m
	}
	start := time.Now()
	man, err := carry.Snapshot(ctx, dir, pm, c.packs, c.opt)
	if err != nil {
		return err
	}
	b, err := man.Marshal()
	if err != nil {
		return err
	}
	cp := &store.Checkpoint{Session: s.ID, Instance: inst, Node: c.node, Turn: turn,
		Packs: man.Packs(), Bytes: man.Bytes(), Files: man.Files()}
	if err := c.putManifest(ctx, cp, b); err != nil {
		return err
	}
	if err := c.st.PutCheckpoint(ctx, f, cp); err != nil {
		c.dropManifest(context.WithoutCancel(ctx), cp.ManifestObject)
		return err
	}
	c.mu.Lock()
	c.prev[s.ID] = carried{instance: inst, m: man}
	c.mu.Unlock()
	if cp.Replaced != cp.ManifestObject {
		c.dropManifest(ctx, cp.Replaced)
	}
	c.log.Debug("carried the workspace", "session", s.ID, "turn", turn, "files", cp.Files, "bytes", cp.Bytes, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// forget drops this node's memory of a session's last checkpoint
// (deleted, moved, or no longer run here).
func (c *carrier) forget(id string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	delete(c.prev, id)
	c.mu.Unlock()
}

// sweep removes, about every ten minutes, the packs no checkpoint
// references any more (those of deleted sessions, and of files changed
// since), sparing an hour's worth: a checkpoint being written stores its
// packs before it names them. The keeper calls it.
func (c *carrier) sweep(ctx context.Context) {
	if c == nil {
		return
	}
	c.mu.Lock()
	due := time.Since(c.lastSweep) >= 10*time.Minute
	if due {
		c.lastSweep = time.Now()
	}
	c.mu.Unlock()
	if !due {
		return
	}
	n, err := c.st.SweepPacks(ctx, time.Now().Add(-time.Hour))
	if err != nil {
		c.log.Warn("removing the workspace packs no checkpoint uses", "err", err)
		return
	}
	if n > 0 {
		c.log.Info("removed the workspace packs no checkpoint uses", "packs", n)
	}
	// Then their objects, and every other object nothing names.
	n, err = c.collectObjects(ctx)
	if err != nil {
		c.log.Warn("removing the checkpoint store's objects nothing uses", "store", c.obj.String(), "err", err)
		return
	}
	if n > 0 {
		c.log.Info("removed the checkpoint store's objects nothing uses", "store", c.obj.String(), "objects", n)
	}
}

// sizeString writes n bytes for a person.
func sizeString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
