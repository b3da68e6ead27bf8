package carry

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// racyWindow: a file whose ctime is this close to the snapshot's start may
// change again without its ctime changing (timestamps are taken from a
// coarse clock), so its identity is not trusted by the next snapshot.
var racyWindow = time.Second

// Snapshot walks root and returns its manifest, storing new file data in
// packs. A regular file whose device, inode, size, mtime and ctime equal
// its entry in prev (same path) keeps prev's extents without being read;
// prev may be nil. See doc.go for what is carried and how the walk stays
// inside root while the tree changes under it.
//
// Packs stored before an error are left in packs; the caller's garbage
// collection removes packs no manifest references.
func Snapshot(ctx context.Context, root string, prev *Manifest, packs Packs, opt Options) (*Manifest, error) {
	rootfd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("snapshot: opening root %s: %w", root, err)
	}
	defer unix.Close(rootfd)
	var st unix.Stat_t
	if err := unix.Fstat(rootfd, &st); err != nil {
		return nil, fmt.Errorf("snapshot: stat root %s: %w", root, err)
	}
	s := &snapshotter{
		ctx:   ctx,
		opt:   opt,
		dev:   st.Dev,
		start: time.Now(),
		prev:  map[string]*Entry{},
		links: map[[2]uint64]int{},
		pw:    newPackWriter(ctx, packs, opt.packSize()),
		buf:   make([]byte, 64<<10),
	}
	defer s.pw.close()
	if prev != nil {
		for i := range prev.Entries {
			if e := &prev.Entries[i]; e.Type == TypeFile && e.Ino != 0 {
				s.prev[e.Path] = e
			}
		}
	}
	s.m.Root = Entry{Type: TypeDir}
	fillAttrs(&s.m.Root, &st)
	if s.m.Root.Xattrs, err = readXattrs(rootfd); err != nil {
		return nil, fmt.Errorf("snapshot: root %s: %w", root, err)
	}
	if err := s.walk(rootfd, ""); err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", root, err)
	}
	if s.over {
		return nil, fmt.Errorf("snapshot of %s: the workspace holds about %d bytes of file data, over the limit of %d: %w",
			root, s.bytes, opt.MaxBytes, ErrTooLarge)
	}
	if err := s.pw.finish(&s.m); err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", root, err)
	}
	return &s.m, nil
}

type snapshotter struct {
	ctx   context.Context
	opt   Options
	dev   uint64
	start time.Time
	prev  map[string]*Entry
	links map[[2]uint64]int // (dev, ino) of a multiply-linked file → its index in m.Entries
	pw    *packWriter
	m     Manifest
	bytes int64 // file data so far
	over  bool  // past MaxBytes: keep walking to report the size, read nothing more
	buf   []byte
}

func fillAttrs(e *Entry, st *unix.Stat_t) {
	e.Mode = st.Mode & 0o7777
	e.UID = st.Uid
	e.GID = st.Gid
	e.Mtime = st.Mtim.Nano()
}

// readNames lists a directory, sorted.
func (s *snapshotter) readNames(dirfd int) ([]string, error) {
	var names []string
	for {
		n, err := unix.ReadDirent(dirfd, s.buf)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(s.buf[:n], -1, names)
		if len(names) > s.opt.maxEntries() {
			return nil, fmt.Errorf("a directory has over %d entries: %w", s.opt.maxEntries(), ErrTooLarge)
		}
	}
	sort.Strings(names)
	return names, nil
}

func (s *snapshotter) walk(dirfd int, rel string) error {
	names, err := s.readNames(dirfd)
	if err != nil {
		if isGone(err) {
			return nil
		}
		return fmt.Errorf("listing %q: %w", rel, err)
	}
	for _, name := range names {
		if err := s.ctx.Err(); err != nil {
			return err
		}
		child := name
		if rel != "" {
			child = rel + "/" + name
		}
		if err := s.entry(dirfd, name, child); err != nil {
			return err
		}
	}
	return nil
}

// entry records one directory entry. It opens the name itself (O_PATH,
// not following a symlink, not crossing a mount), and takes every
// attribute from that descriptor, so a swap between listing and opening
// gives a consistent view of whichever object was opened.
func (s *snapshotter) entry(dirfd int, name, rel string) error {
	fd, err := openBeneath(dirfd, name, unix.O_PATH, 0)
	if err != nil {
		if isGone(err) || errors.Is(err, unix.EXDEV) {
			return nil // vanished, or a mount point: not ours
		}
		return fmt.Errorf("opening %q: %w", rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %q: %w", rel, err)
	}
	if st.Dev != s.dev {
		return nil // another filesystem (checked again in case openat2 was missing)
	}
	var typ Type
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		typ = TypeDir
	case unix.S_IFREG:
		typ = TypeFile
	case unix.S_IFLNK:
		typ = TypeSymlink
	case unix.S_IFIFO:
		typ = TypeFifo
	case unix.S_IFCHR:
		typ = TypeChar
	case unix.S_IFBLK:
		typ = TypeBlock
	default:
		return nil // sockets are not carried
	}
	if s.opt.skip(rel, typ == TypeDir) {
		return nil
	}
	if len(rel) > maxPath {
		return fmt.Errorf("path %q... is over %d bytes; such a tree can not be carried", rel[:64], maxPath)
	}
	if len(s.m.Entries) >= s.opt.maxEntries() {
		return fmt.Errorf("the workspace has over %d entries: %w", s.opt.maxEntries(), ErrTooLarge)
	}
	e := Entry{Path: rel, Type: typ}
	fillAttrs(&e, &st)
	if e.Xattrs, err = readXattrs(fd); err != nil {
		return fmt.Errorf("%q: %w", rel, err)
	}
	switch typ {
	case TypeDir:
		dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if isGone(err) {
				return nil
			}
			return fmt.Errorf("opening directory %q: %w", rel, err)
		}
		defer unix.Close(dfd)
		s.m.Entries = append(s.m.Entries, e)
		return s.walk(dfd, rel)
	case TypeFile:
		if err := s.file(fd, &st, &e); err != nil {
			if isGone(err) {
				return nil
			}
			return fmt.Errorf("reading %q: %w", rel, err)
		}
	case TypeSymlink:
		buf := make([]byte, maxTarget+1)
		n, err := unix.Readlinkat(fd, "", buf)
		if err != nil {
			return fmt.Errorf("reading symlink %q: %w", rel, err)
		}
		if n == 0 || n > maxTarget {
			return nil // empty or longer than Linux allows: not a link we can recreate
		}
		e.Target = string(buf[:n])
	case TypeChar, TypeBlock:
		e.Rdev = st.Rdev
	}
	s.m.Entries = append(s.m.Entries, e)
	return nil
}

// file fills a regular file's data: prev's extents if its identity is
// unchanged, the first link's if it is another link to a file already
// read, else what reading it gives.
func (s *snapshotter) file(fd int, st *unix.Stat_t, e *Entry) error {
	e.Size = st.Size
	e.Dev, e.Ino, e.Ctime = st.Dev, st.Ino, st.Ctim.Nano()
	if p := s.prev[e.Path]; p != nil && p.Dev == e.Dev && p.Ino == e.Ino &&
		p.Size == e.Size && p.Mtime == e.Mtime && p.Ctime == e.Ctime {
		e.Extents = p.Extents
		return s.count(e.Extents)
	}
	key := [2]uint64{st.Dev, st.Ino}
	if st.Nlink > 1 {
		if i, ok := s.links[key]; ok {
			o := &s.m.Entries[i]
			if o.Ino == e.Ino && o.Size == e.Size && o.Mtime == e.Mtime && o.Ctime == e.Ctime {
				e.Extents = o.Extents
				return s.count(e.Extents)
			}
		}
	}
	if s.over {
		s.bytes += min(st.Size, st.Blocks*512)
		return nil
	}
	// Reopen the very inode the O_PATH descriptor holds, for reading. It
	// is a regular file on our filesystem (checked above), so opening it
	// has no side effect and can not block.
	rfd, err := unix.Open(procPath(fd), unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(rfd)
	var rst unix.Stat_t
	if err := unix.Fstat(rfd, &rst); err != nil {
		return err
	}
	if rst.Ino != st.Ino || rst.Dev != st.Dev || rst.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("reopened a different object (inode %d, not %d)", rst.Ino, st.Ino)
	}
	if err := s.read(rfd, e); err != nil {
		return err
	}
	// Trust the identity next time only if the file did not change while
	// read and its ctime is old enough that a later change must move it.
	if err := unix.Fstat(rfd, &rst); err != nil {
		return err
	}
	if rst.Size != st.Size || rst.Mtim != st.Mtim || rst.Ctim != st.Ctim ||
		st.Ctim.Nano() >= s.start.Add(-racyWindow).UnixNano() {
		e.Ino = 0
	}
	if st.Nlink > 1 && e.Ino != 0 {
		s.links[key] = len(s.m.Entries)
	}
	return nil
}

func (s *snapshotter) count(xs []Extent) error {
	for _, x := range xs {
		s.bytes += x.Length
	}
	if s.opt.MaxBytes > 0 && s.bytes > s.opt.MaxBytes {
		s.over = true
	}
	return nil
}

// read appends fd's data to packs, skipping holes, reading at most e.Size
// bytes: a file that grows while read is cut at the size fstat gave, one
// that shrinks ends where reading did.
func (s *snapshotter) read(fd int, e *Entry) error {
	size := e.Size
	var off int64
	sparse := true
	for off < size {
		start, end := off, size
		if sparse {
			d, err := unix.Seek(fd, off, unix.SEEK_DATA)
			switch {
			case err == unix.ENXIO:
				return nil // a hole up to the end (or the file shrank)
			case err != nil:
				sparse = false // no SEEK_DATA here: read everything
			default:
				start = d
				if h, err := unix.Seek(fd, d, unix.SEEK_HOLE); err == nil && h < end {
					end = h
				}
			}
		}
		if start >= size {
			return nil
		}
		for pos := start; pos < end; {
			if err := s.ctx.Err(); err != nil {
				return err
			}
			space, err := s.pw.space()
			if err != nil {
				return err
			}
			want := int(min(int64(len(space)), end-pos, 1<<20))
			n, err := unix.Pread(fd, space[:want], pos)
			if err == unix.EINTR || err == unix.EAGAIN {
				continue
			}
			if err != nil {
				return err
			}
			if n == 0 { // shrank: keep what was read
				e.Size = pos
				return nil
			}
			pack, poff := s.pw.commit(n)
			s.addExtent(e, Extent{Pack: pack, Offset: poff, Length: int64(n), At: pos})
			pos += int64(n)
			s.bytes += int64(n)
			if s.opt.MaxBytes > 0 && s.bytes > s.opt.MaxBytes {
				s.over = true
				s.bytes += size - pos // the rest of this file, for the message
				return nil
			}
		}
		off = end
	}
	return nil
}

func (s *snapshotter) addExtent(e *Entry, x Extent) {
	if n := len(e.Extents); n > 0 {
		l := &e.Extents[n-1]
		if l.Pack == x.Pack && l.Offset+l.Length == x.Offset && l.At+l.Length == x.At {
			l.Length += x.Length
			return
		}
	}
	e.Extents = append(e.Extents, x)
}
