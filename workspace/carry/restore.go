package carry

import (
	"context"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Restore recreates m's tree under root, which must be an existing
// directory, empty apart from entries opt.Skip skips. It validates m first
// (a manifest is untrusted input) and creates every entry relative to a
// directory descriptor opened without following symlinks, files with
// O_EXCL, so nothing is written outside root whatever m says.
//
// It returns a copy of m whose files carry the restored files' identities
// (device, inode, ctime), so that the next Snapshot of root, given it as
// prev, reads only what changed since. On error root holds a partial tree:
// the caller should remove it (or the image holding it) and not use it.
func Restore(ctx context.Context, root string, m *Manifest, packs Packs, opt Options) (*Manifest, error) {
	need, err := m.validate(opt.maxEntries())
	if err != nil {
		return nil, fmt.Errorf("restore into %s: %w", root, err)
	}
	rootfd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("restore: opening root %s: %w", root, err)
	}
	defer unix.Close(rootfd)
	if err := checkEmpty(rootfd, opt); err != nil {
		return nil, fmt.Errorf("restore into %s: %w", root, err)
	}
	pr, err := newPackReader(packs, need)
	if err != nil {
		return nil, err
	}
	defer pr.close()
	r := &restorer{ctx: ctx, opt: opt, rootfd: rootfd, pr: pr,
		stack: []openDir{{"", rootfd}}, skipped: map[string]bool{}}
	defer r.closeStack()
	out := &Manifest{Root: m.Root, Entries: make([]Entry, len(m.Entries))}
	copy(out.Entries, m.Entries)
	var dirs []int
	for i := range out.Entries {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("restore into %s: %w", root, err)
		}
		e := &out.Entries[i]
		created, err := r.entry(e)
		if err != nil {
			return nil, fmt.Errorf("restore into %s: %q: %w", root, e.Path, err)
		}
		if created && e.Type == TypeDir {
			dirs = append(dirs, i)
		}
	}
	r.closeStack()
	// Directories last, deepest first, so creating their contents does
	// not move their mtimes and a read-only mode does not get in the way.
	for k := len(dirs) - 1; k >= 0; k-- {
		e := &out.Entries[dirs[k]]
		fd, err := openBeneath(rootfd, e.Path, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return nil, fmt.Errorf("restore into %s: reopening %q: %w", root, e.Path, err)
		}
		err = setAttrs(fd, e)
		if err == nil {
			err = setTimes(fd, e.Mtime)
		}
		unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("restore into %s: %q: %w", root, e.Path, err)
		}
	}
	if err := setAttrs(rootfd, &m.Root); err != nil {
		return nil, fmt.Errorf("restore into %s: the root: %w", root, err)
	}
	if err := setTimes(rootfd, m.Root.Mtime); err != nil {
		return nil, fmt.Errorf("restore into %s: the root: %w", root, err)
	}
	return out, nil
}

// checkEmpty refuses a root holding anything Skip does not skip: restoring
// over existing entries would mix two trees (and O_EXCL would fail midway).
func checkEmpty(rootfd int, opt Options) error {
	s := snapshotter{buf: make([]byte, 16<<10), opt: opt}
	names, err := s.readNames(rootfd)
	if err != nil {
		return fmt.Errorf("listing the root: %w", err)
	}
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(rootfd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stat %q: %w", n, err)
		}
		if !opt.skip(n, st.Mode&unix.S_IFMT == unix.S_IFDIR) {
			return fmt.Errorf("the root is not empty (it holds %q): restore needs a fresh directory", n)
		}
	}
	return nil
}

type openDir struct {
	path string
	fd   int
}

type restorer struct {
	ctx     context.Context
	opt     Options
	rootfd  int
	pr      *packReader
	stack   []openDir // root at the bottom, never closed here
	skipped map[string]bool
}

func (r *restorer) closeStack() {
	for len(r.stack) > 1 {
		unix.Close(r.stack[len(r.stack)-1].fd)
		r.stack = r.stack[:len(r.stack)-1]
	}
}

// parent returns a descriptor for the directory parent. In walk order it
// is on the stack; otherwise it is opened beneath the root.
func (r *restorer) parent(parent string) (int, error) {
	for len(r.stack) > 1 && r.stack[len(r.stack)-1].path != parent {
		unix.Close(r.stack[len(r.stack)-1].fd)
		r.stack = r.stack[:len(r.stack)-1]
	}
	if top := r.stack[len(r.stack)-1]; top.path == parent {
		return top.fd, nil
	}
	fd, err := openBeneath(r.rootfd, parent, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, fmt.Errorf("opening parent %q: %w", parent, err)
	}
	r.stack = append(r.stack, openDir{parent, fd})
	return fd, nil
}

// entry creates e. It reports false if e was skipped.
func (r *restorer) entry(e *Entry) (bool, error) {
	parent, name := "", e.Path
	if j := strings.LastIndexByte(e.Path, '/'); j >= 0 {
		parent, name = e.Path[:j], e.Path[j+1:]
	}
	if r.skipped[parent] || r.opt.skip(e.Path, e.Type == TypeDir) {
		if e.Type == TypeDir {
			r.skipped[e.Path] = true
		}
		return false, nil
	}
	pfd, err := r.parent(parent)
	if err != nil {
		return false, err
	}
	switch e.Type {
	case TypeDir:
		if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
			return false, fmt.Errorf("creating directory: %w", err)
		}
		fd, err := openBeneath(pfd, name, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return false, fmt.Errorf("opening the new directory: %w", err)
		}
		r.stack = append(r.stack, openDir{e.Path, fd})
		return true, nil // attributes are set at the end
	case TypeFile:
		return true, r.file(pfd, name, e)
	case TypeSymlink:
		if err := unix.Symlinkat(e.Target, pfd, name); err != nil {
			return false, fmt.Errorf("creating symlink: %w", err)
		}
	case TypeFifo:
		if err := unix.Mknodat(pfd, name, unix.S_IFIFO|0o600, 0); err != nil {
			return false, fmt.Errorf("creating fifo: %w", err)
		}
	case TypeChar, TypeBlock:
		kind := uint32(unix.S_IFCHR)
		if e.Type == TypeBlock {
			kind = unix.S_IFBLK
		}
		if err := unix.Mknodat(pfd, name, kind|0o600, int(e.Rdev)); err != nil {
			return false, fmt.Errorf("creating device node: %w", err)
		}
	}
	fd, err := openBeneath(pfd, name, unix.O_PATH, 0)
	if err != nil {
		return false, fmt.Errorf("opening the new %s: %w", e.Type, err)
	}
	defer unix.Close(fd)
	if err := setAttrs(fd, e); err != nil {
		return false, err
	}
	return true, setTimes(fd, e.Mtime)
}

func (r *restorer) file(pfd int, name string, e *Entry) error {
	fd, err := openBeneath(pfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("creating file: %w", err)
	}
	defer unix.Close(fd)
	for _, x := range e.Extents {
		data, err := r.pr.get(r.ctx, x.Pack)
		if err != nil {
			return err
		}
		b := data[x.Offset : x.Offset+x.Length]
		for at := x.At; len(b) > 0; {
			n, err := unix.Pwrite(fd, b, at)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return fmt.Errorf("writing: %w", err)
			}
			b, at = b[n:], at+int64(n)
		}
	}
	if err := unix.Ftruncate(fd, e.Size); err != nil {
		return fmt.Errorf("setting the size: %w", err)
	}
	if err := setAttrs(fd, e); err != nil {
		return err
	}
	if err := setTimes(fd, e.Mtime); err != nil {
		return fmt.Errorf("setting mtime: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	e.Dev, e.Ino, e.Ctime = st.Dev, st.Ino, st.Ctim.Nano()
	return nil
}

// setAttrs sets owner, xattrs and mode, in that order: chown clears
// setuid and setgid, so the mode comes after it.
func setAttrs(fd int, e *Entry) error {
	if err := unix.Fchownat(fd, "", int(e.UID), int(e.GID), unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("setting owner %d:%d: %w", e.UID, e.GID, err)
	}
	if err := writeXattrs(fd, e.Xattrs); err != nil {
		return err
	}
	if e.Type == TypeSymlink {
		return nil // a symlink's mode is fixed
	}
	if err := unix.Fchmodat(unix.AT_FDCWD, procPath(fd), e.Mode, 0); err != nil {
		return fmt.Errorf("setting mode %#o: %w", e.Mode, err)
	}
	return nil
}
