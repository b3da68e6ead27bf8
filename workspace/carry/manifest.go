package carry

import (
	"context"
	"errors"
	"sort"
)

// Packs is where pack data goes: the store implements it, tests use a map.
type Packs interface {
	// PutPack stores data under hash (the hex sha256 of data). Storing the
	// same hash twice must succeed and keep one copy.
	PutPack(ctx context.Context, hash string, data []byte) error
	// GetPack returns what PutPack stored under hash. Restore checks the
	// hash itself.
	GetPack(ctx context.Context, hash string) ([]byte, error)
}

// ErrTooLarge is wrapped by Snapshot's error when the workspace is over
// Options.MaxBytes or Options.MaxEntries. Nothing is wrong with the
// workspace as such: the caller should report the size to the user (the
// error says it) and not carry the session, rather than retry.
var ErrTooLarge = errors.New("workspace too large to carry")

// Options tune Snapshot and Restore. The zero value is usable.
type Options struct {
	// MaxBytes bounds the file data a snapshot holds (holes in sparse files
	// do not count). Over it Snapshot fails with an error wrapping
	// ErrTooLarge that says the size and the limit. Zero means no limit.
	MaxBytes int64
	// MaxEntries bounds the number of entries (files, directories, links,
	// ...). Zero means DefaultMaxEntries; it can not be raised past it.
	MaxEntries int
	// PackSize is the uncompressed bytes per pack before it is flushed:
	// zero means DefaultPackSize; at most MaxPackSize.
	PackSize int
	// Skip names entries not carried: rel is slash-separated and relative
	// to the root; isDir says whether it is a directory (whose contents
	// are then skipped too). For example "lost+found" or ".box/.home-work".
	// Restore also uses it: skipped entries may exist in its root, and
	// skipped manifest entries are not restored. Nil skips nothing.
	Skip func(rel string, isDir bool) bool
}

const (
	// DefaultPackSize is the uncompressed size a pack grows to before it is
	// compressed and stored.
	DefaultPackSize = 8 << 20
	// MaxPackSize bounds a pack's uncompressed size. Restore refuses a
	// manifest with an extent past it, so it never holds more than a few
	// packs of this size in memory.
	MaxPackSize = 64 << 20
	// DefaultMaxEntries bounds the entries of a manifest.
	DefaultMaxEntries = 2_000_000
)

func (o *Options) packSize() int {
	if o.PackSize <= 0 {
		return DefaultPackSize
	}
	return min(o.PackSize, MaxPackSize)
}

func (o *Options) maxEntries() int {
	if o.MaxEntries <= 0 || o.MaxEntries > DefaultMaxEntries {
		return DefaultMaxEntries
	}
	return o.MaxEntries
}

func (o *Options) skip(rel string, isDir bool) bool {
	return o.Skip != nil && o.Skip(rel, isDir)
}

// Type is the kind of an entry.
type Type uint8

// The kinds of entry a manifest holds. Sockets are not carried.
const (
	TypeDir     Type = 1
	TypeFile    Type = 2
	TypeSymlink Type = 3
	TypeFifo    Type = 4
	TypeChar    Type = 5 // an overlayfs whiteout is a char device 0:0
	TypeBlock   Type = 6
)

func (t Type) String() string {
	switch t {
	case TypeDir:
		return "dir"
	case TypeFile:
		return "file"
	case TypeSymlink:
		return "symlink"
	case TypeFifo:
		return "fifo"
	case TypeChar:
		return "char device"
	case TypeBlock:
		return "block device"
	}
	return "unknown type"
}

// Xattr is one extended attribute.
type Xattr struct {
	Name  string
	Value []byte
}

// Extent is a run of a regular file's bytes: Length bytes at Offset in the
// uncompressed pack Pack, which go at At in the file. A file's extents are
// sorted by At and do not overlap; the gaps between them are holes.
type Extent struct {
	Pack   string // hex sha256 of the pack's stored (compressed) bytes
	Offset int64
	Length int64
	At     int64
}

// Entry is one object of the tree.
type Entry struct {
	// Path is slash-separated, relative to the root, with no empty, "."
	// or ".." component. The root itself (Manifest.Root) has Path "".
	Path string
	Type Type
	// Mode holds the permission bits plus setuid, setgid and sticky
	// (07777); the kind is Type.
	Mode     uint32
	UID, GID uint32
	Mtime    int64 // nanoseconds since the epoch
	Xattrs   []Xattr

	Size    int64    // TypeFile: the length
	Extents []Extent // TypeFile: the data
	Target  string   // TypeSymlink: the link's text, never followed
	Rdev    uint64   // TypeChar, TypeBlock: the device number

	// Identity of a regular file on the node that wrote the manifest: the
	// next Snapshot keeps Extents if the file at Path still has these and
	// the same Size and Mtime. Zero Ino means "always read again".
	Dev, Ino uint64
	Ctime    int64
}

// Manifest is a snapshot of a tree: its entries in walk order (a directory
// before its contents) and the packs holding the file data.
type Manifest struct {
	Root    Entry // the root directory's own mode, owner, mtime and xattrs
	Entries []Entry
}

// Packs returns the hashes of the packs m references, sorted and unique.
// The caller keeps these packs as long as it keeps m.
func (m *Manifest) Packs() []string {
	seen := map[string]bool{}
	for i := range m.Entries {
		for _, x := range m.Entries[i].Extents {
			seen[x.Pack] = true
		}
	}
	out := make([]string, 0, len(seen))
	for h := range seen {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}

// Bytes returns the file data m holds (holes excluded).
func (m *Manifest) Bytes() int64 {
	var n int64
	for i := range m.Entries {
		for _, x := range m.Entries[i].Extents {
			n += x.Length
		}
	}
	return n
}

// Files returns the number of regular files in m.
func (m *Manifest) Files() int {
	n := 0
	for i := range m.Entries {
		if m.Entries[i].Type == TypeFile {
			n++
		}
	}
	return n
}

func sortXattrs(xs []Xattr) {
	sort.Slice(xs, func(i, j int) bool { return xs[i].Name < xs[j].Name })
}
