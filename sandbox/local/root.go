package local

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
)

// A box's root filesystem is one read-only bind of a directory Harvest builds
// per box user (RunDir/root/HASH): the curated /etc (copies of the allowlisted
// host entries, etcEntries, plus generated passwd, group and hosts), a copy of
// the in-box agent at /.harvest/bin/harvest-agent, the merged-/usr symlinks,
// and empty mount points for /usr, /proc, /dev, /tmp, HOME, /workspace and the
// cgroup, and for the box's read-only mounts (mounts.go). One mount replaces a tmpfs root, ~30 binds (one per /etc entry, the
// agent, ...) and a read-only remount: every bind costs bwrap two mount calls,
// and together they were the largest part of creating a box.
//
// Only what any unprivileged host user may read is copied (world-readable
// files, world-searchable directories), so the copy never exposes more than
// the host's own permissions did: /etc/ssl/private stays out. The agent is a
// copy, so it works wherever the installed binary lives and an upgrade of it
// never changes a running box.
//
// Roots are named by a hash of their content and never changed once built:
// running boxes keep theirs while a new one is built for new boxes when the
// host's /etc or the agent binary changes (checked at most once a minute).
// Roots no box uses any more are pruned when a provider starts.

const rootRecheck = time.Minute

type rootKey struct {
	user   sandbox.User
	home   string
	mounts string // mountPointsKey of its mount points
}

type rootCache struct {
	mu      sync.Mutex
	entries map[rootKey]rootEntry
}

type rootEntry struct {
	dir     string
	checked time.Time
}

// dir returns the built root for a box user, HOME and mount points (see
// mounts.go), building it if needed.
func (c *rootCache) dir(runDir, agent string, cgroupV2 bool, u sandbox.User, home string, mps []mountPoint) (string, error) {
	key := rootKey{u, home, mountPointsKey(mps)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok && time.Since(e.checked) < rootRecheck {
		return e.dir, nil
	}
	dir, err := buildRoot(filepath.Join(runDir, "root"), agent, cgroupV2, home, generatedEtc(u, home), mps)
	if err != nil {
		return "", err
	}
	if c.entries == nil {
		c.entries = map[rootKey]rootEntry{}
	}
	c.entries[key] = rootEntry{dir: dir, checked: time.Now()}
	return dir, nil
}

func generatedEtc(u sandbox.User, home string) map[string]string {
	return map[string]string{
		"passwd": fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\nuser:x:%d:%d:Harvest box user:%s:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", u.UID, u.GID, home),
		"group":  fmt.Sprintf("root:x:0:\nuser:x:%d:\nnogroup:x:65534:\n", u.GID),
		"hosts":  "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	}
}

// buildRoot returns base/<hash>, building it if it does not exist yet.
func buildRoot(base, agent string, cgroupV2 bool, home string, generated map[string]string, mps []mountPoint) (string, error) {
	h := sha256.New()
	afi, err := os.Stat(agent)
	if err != nil {
		return "", fmt.Errorf("the agent binary: %w", err)
	}
	fmt.Fprintf(h, "agent %s %d %d\ncgroup2 %v\nhome %s\n", agent, afi.Size(), afi.ModTime().UnixNano(), cgroupV2, home)
	for _, d := range systemDirs {
		if t, err := os.Readlink("/" + d); err == nil {
			fmt.Fprintf(h, "link %s %s\n", d, t)
		}
	}
	for _, e := range etcEntries {
		_ = filepath.WalkDir("/etc/"+e, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if fi, err := d.Info(); err == nil {
				fmt.Fprintf(h, "%s %o %d %d\n", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
			}
			return nil
		})
	}
	for _, name := range []string{"group", "hosts", "passwd"} {
		fmt.Fprintf(h, "%s\n%s\n", name, generated[name])
	}
	h.Write([]byte(mountPointsKey(mps)))
	dir := filepath.Join(base, hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(base, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	cgroupDir := boxCgroupV1
	if cgroupV2 {
		cgroupDir = boxCgroupV2
	}
	for _, d := range []string{"etc", "usr", "proc", "dev", "tmp", "var", "workspace", ".harvest/bin", home, cgroupDir} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			return "", err
		}
	}
	if err := os.Symlink("../tmp", filepath.Join(tmp, "var/tmp")); err != nil {
		return "", err
	}
	for _, d := range systemDirs {
		fi, err := os.Lstat("/" + d)
		switch {
		case err != nil:
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink("/" + d)
			if err != nil {
				return "", err
			}
			if err := os.Symlink(t, filepath.Join(tmp, d)); err != nil {
				return "", err
			}
		case fi.IsDir(): // a mount point for its bind (no merged /usr)
			if err := os.Mkdir(filepath.Join(tmp, d), 0o755); err != nil {
				return "", err
			}
		}
	}
	for _, e := range etcEntries {
		if err := copyWorldReadable("/etc/"+e, filepath.Join(tmp, "etc", e)); err != nil {
			return "", fmt.Errorf("copying /etc/%s: %w", e, err)
		}
	}
	for name, content := range generated {
		if err := os.WriteFile(filepath.Join(tmp, "etc", name), []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	if err := copyFile(agent, filepath.Join(tmp, ".harvest/bin/harvest-agent"), 0o755); err != nil {
		return "", fmt.Errorf("copying the agent: %w", err)
	}
	for _, mp := range mps {
		if err := makeMountPoint(tmp, mp); err != nil {
			return "", err
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(dir); serr == nil {
			return dir, nil // built concurrently
		}
		return "", err
	}
	return dir, nil
}

// copyWorldReadable copies src to dst (symlinks as symlinks, directories
// recursively), skipping anything an unprivileged user could not read.
// A missing src is not an error.
func copyWorldReadable(src, dst string) error {
	fi, err := os.Lstat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case fi.IsDir():
		if fi.Mode().Perm()&0o005 != 0o005 {
			return nil
		}
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
		ents, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := copyWorldReadable(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode().IsRegular():
		if fi.Mode().Perm()&0o004 == 0 {
			return nil
		}
		return copyFile(src, dst, 0o644)
	}
	return nil // devices, fifos, sockets: never
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Chmod(mode); err != nil { // past the umask
		out.Close()
		return err
	}
	return out.Close()
}

// pruneRoots removes built roots that no box in runDir uses and that are
// over an hour old. The age guard covers boxes whose handle is not written
// yet: warm ones, and those another Harvest sharing the run dir is starting.
// (Removing a root under a running box would empty its filesystem.)
func pruneRoots(runDir string, inUse map[string]bool) {
	ents, err := os.ReadDir(filepath.Join(runDir, "root"))
	if err != nil {
		return
	}
	for _, e := range ents {
		dir := filepath.Join(runDir, "root", e.Name())
		fi, err := e.Info()
		if err != nil || inUse[dir] || time.Since(fi.ModTime()) < time.Hour || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		os.RemoveAll(dir)
	}
}
