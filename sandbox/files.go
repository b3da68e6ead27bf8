package sandbox

import (
	"context"
	"fmt"
	"io/fs"
	"time"

	"github.com/harvest-dev/harvest/sandbox/proto"
)

// File operations run inside the box, through its agent: paths are the box's
// paths and are resolved by the box's kernel view, so a symlink in a workspace
// can never lead to a host file. Errors wrap fs.ErrNotExist, fs.ErrExist and
// fs.ErrPermission where they apply.

// MaxReadFile bounds ReadFile. Larger files must be read in ranges.
const MaxReadFile = 256 << 20

// FileInfo describes a file in the box.
type FileInfo struct {
	Name    string
	Size    int64
	Mode    fs.FileMode
	ModTime time.Time
	// Link is the target of a symlink (Lstat and ReadDir only).
	Link string
}

// IsDir reports whether the file is a directory.
func (fi FileInfo) IsDir() bool { return fi.Mode.IsDir() }

func infoFromProto(p proto.FileInfo) FileInfo {
	return FileInfo{Name: p.Name, Size: p.Size, Mode: fs.FileMode(p.Mode), ModTime: p.ModTime, Link: p.Link}
}

func opErr(op, path string, err error) error {
	if err == nil {
		return nil
	}
	return &fs.PathError{Op: op, Path: path, Err: err}
}

// ReadFile reads a whole regular file (up to MaxReadFile bytes).
func (sb *Sandbox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	var out []byte
	var off int64
	for {
		var r proto.ReadReply
		blob, err := sb.c.call(ctx, proto.MethodRead, proto.ReadParams{Path: path, Offset: off, Length: proto.ChunkSize}, nil, &r)
		if err != nil {
			return nil, opErr("read", path, err)
		}
		if r.Size > MaxReadFile {
			return nil, opErr("read", path, fmt.Errorf("file is %d bytes, over the %d byte limit: read it in ranges with ReadAt", r.Size, MaxReadFile))
		}
		if out == nil {
			out = make([]byte, 0, r.Size)
		}
		out = append(out, blob...)
		off += int64(len(blob))
		if r.EOF || len(blob) == 0 {
			return out, nil
		}
	}
}

// ReadAt reads up to length bytes at offset (length at most 4 MiB).
func (sb *Sandbox) ReadAt(ctx context.Context, path string, offset, length int64) (data []byte, size int64, err error) {
	var r proto.ReadReply
	blob, err := sb.c.call(ctx, proto.MethodRead, proto.ReadParams{Path: path, Offset: offset, Length: length}, nil, &r)
	if err != nil {
		return nil, 0, opErr("read", path, err)
	}
	return blob, r.Size, nil
}

// WriteFile creates or replaces a file, creating missing parent directories.
func (sb *Sandbox) WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error {
	off := 0
	for first := true; first || off < len(data); first = false {
		end := off + proto.ChunkSize
		if end > len(data) {
			end = len(data)
		}
		prm := proto.WriteParams{Path: path, Offset: int64(off), Create: true, MkdirAll: first, Mode: uint32(mode.Perm())}
		if end == len(data) {
			prm.Truncate = true
		}
		var r proto.WriteReply
		if _, err := sb.c.call(ctx, proto.MethodWrite, prm, data[off:end], &r); err != nil {
			return opErr("write", path, err)
		}
		off = end
	}
	return nil
}

// AppendFile appends data to a file, creating it if needed.
func (sb *Sandbox) AppendFile(ctx context.Context, path string, data []byte) error {
	for off := 0; off < len(data) || off == 0; {
		end := min(off+proto.ChunkSize, len(data))
		if _, err := sb.c.call(ctx, proto.MethodWrite, proto.WriteParams{Path: path, Append: true, Create: true}, data[off:end], nil); err != nil {
			return opErr("write", path, err)
		}
		if end == len(data) {
			return nil
		}
		off = end
	}
	return nil
}

// Stat describes a file, following symlinks.
func (sb *Sandbox) Stat(ctx context.Context, path string) (FileInfo, error) {
	var r proto.FileInfo
	_, err := sb.c.call(ctx, proto.MethodStat, proto.PathParams{Path: path}, nil, &r)
	return infoFromProto(r), opErr("stat", path, err)
}

// Lstat describes a file without following a final symlink.
func (sb *Sandbox) Lstat(ctx context.Context, path string) (FileInfo, error) {
	var r proto.FileInfo
	_, err := sb.c.call(ctx, proto.MethodStat, proto.PathParams{Path: path, NoFollow: true}, nil, &r)
	return infoFromProto(r), opErr("lstat", path, err)
}

// ReadDir lists a directory, sorted by name.
func (sb *Sandbox) ReadDir(ctx context.Context, path string) ([]FileInfo, error) {
	var r proto.ListReply
	if _, err := sb.c.call(ctx, proto.MethodList, proto.ListParams{Path: path}, nil, &r); err != nil {
		return nil, opErr("readdir", path, err)
	}
	out := make([]FileInfo, len(r.Entries))
	for i, e := range r.Entries {
		out[i] = infoFromProto(e)
	}
	return out, nil
}

// Remove removes a file or an empty directory.
func (sb *Sandbox) Remove(ctx context.Context, path string) error {
	_, err := sb.c.call(ctx, proto.MethodRemove, proto.RemoveParams{Path: path}, nil, nil)
	return opErr("remove", path, err)
}

// RemoveAll removes a path and everything below it.
func (sb *Sandbox) RemoveAll(ctx context.Context, path string) error {
	_, err := sb.c.call(ctx, proto.MethodRemove, proto.RemoveParams{Path: path, Recursive: true}, nil, nil)
	return opErr("remove", path, err)
}

// Mkdir makes a directory; with parents, also the missing ones above it.
func (sb *Sandbox) Mkdir(ctx context.Context, path string, parents bool) error {
	_, err := sb.c.call(ctx, proto.MethodMkdir, proto.MkdirParams{Path: path, Parents: parents}, nil, nil)
	return opErr("mkdir", path, err)
}

// Rename renames (moves) a path within the box.
func (sb *Sandbox) Rename(ctx context.Context, from, to string) error {
	_, err := sb.c.call(ctx, proto.MethodRename, proto.RenameParams{From: from, To: to}, nil, nil)
	return opErr("rename", from, err)
}

// GlobOptions configure Glob.
type GlobOptions struct {
	// Root is the directory the pattern is relative to (default: the workdir).
	Root string
	// GitIgnore skips files .gitignore excludes, and .git itself.
	GitIgnore bool
	// Limit caps the results (default 1000).
	Limit int
}

// Glob returns the absolute paths under Root matching a doublestar pattern
// ("**/*.go"), sorted, and whether the list was truncated.
func (sb *Sandbox) Glob(ctx context.Context, pattern string, o GlobOptions) ([]string, bool, error) {
	var r proto.GlobReply
	_, err := sb.c.call(ctx, proto.MethodGlob, proto.GlobParams{Root: o.Root, Pattern: pattern, GitIgnore: o.GitIgnore, Limit: o.Limit}, nil, &r)
	if err != nil {
		return nil, false, fmt.Errorf("glob %s: %w", pattern, err)
	}
	return r.Paths, r.Truncated, nil
}

// GrepOptions configure Grep.
type GrepOptions = proto.GrepParams

// GrepResult holds Grep's matches.
type GrepResult = proto.GrepReply

// Grep searches file contents under o.Root for o.Pattern (a Go regexp).
func (sb *Sandbox) Grep(ctx context.Context, o GrepOptions) (GrepResult, error) {
	var r proto.GrepReply
	_, err := sb.c.call(ctx, proto.MethodGrep, o, nil, &r)
	if err != nil {
		return r, fmt.Errorf("grep %s: %w", o.Pattern, err)
	}
	return r, nil
}
