package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Dir is an object store in a directory: the object under key "a/b" is the
// file a/b below it. An object is written as a temporary file (".tmp-"
// and a random suffix, beside it), fsynced, renamed over its name, and its
// directory fsynced: a crash leaves the old object or the new one, and at
// worst a temporary file, which List does not show and Sweep removes.
type Dir struct {
	root string
}

// tmpPrefix starts the names of files being written.
const tmpPrefix = ".tmp-"

// NewDir opens (creating it, mode 0700) the directory store at root, an
// absolute path.
func NewDir(root string) (*Dir, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("checkpoint directory %q: give an absolute path", root)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("creating the checkpoint directory: %w", err)
	}
	return &Dir{root: filepath.Clean(root)}, nil
}

func (d *Dir) String() string { return d.root }

func (d *Dir) path(key string) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	return filepath.Join(d.root, filepath.FromSlash(key)), nil
}

// Put writes the object atomically.
func (d *Dir) Put(ctx context.Context, key string, r io.Reader, size int64) (ref Ref, err error) {
	p, err := d.path(key)
	if err != nil {
		return Ref{}, err
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Ref{}, fmt.Errorf("storing %s: %w", key, err)
	}
	f, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return Ref{}, fmt.Errorf("storing %s: %w", key, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	hr := newHashingReader(&sizedReader{r: r, left: size, key: key})
	if _, err := io.Copy(f, ctxReader{ctx, hr}); err != nil {
		return Ref{}, fmt.Errorf("storing %s: %w", key, err)
	}
	if err := f.Sync(); err != nil {
		return Ref{}, fmt.Errorf("storing %s: %w", key, err)
	}
	if err := f.Close(); err != nil {
		return Ref{}, fmt.Errorf("storing %s: %w", key, err)
	}
	if err := os.Rename(f.Name(), p); err != nil {
		return Ref{}, fmt.Errorf("storing %s: %w", key, err)
	}
	if err := syncDir(dir); err != nil {
		return Ref{}, fmt.Errorf("storing %s: %w", key, err)
	}
	return Ref{Key: key, Size: hr.n, SHA256: hr.sum()}, nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// ctxReader stops reading when ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Open opens the object's file.
func (d *Dir) Open(ctx context.Context, ref Ref) (io.ReadCloser, error) {
	p, err := d.path(ref.Key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("object %s in %s: %w", ref.Key, d.root, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading object %s: %w", ref.Key, err)
	}
	return verify(readCloser{ctxReader{ctx, f}, f}, ref), nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// Delete removes the object's file.
func (d *Dir) Delete(ctx context.Context, key string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("deleting object %s: %w", key, err)
	}
	return nil
}

// List walks the directory; temporary files are not listed.
func (d *Dir) List(ctx context.Context, prefix string, fn func(Info) error) error {
	if err := checkPrefix(prefix); err != nil {
		return err
	}
	// Walk from the deepest directory the prefix names whole.
	start := d.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		start = filepath.Join(d.root, filepath.FromSlash(prefix[:i]))
	}
	err := filepath.WalkDir(start, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if e.IsDir() || !e.Type().IsRegular() || strings.HasPrefix(e.Name(), tmpPrefix) {
			return nil
		}
		rel, err := filepath.Rel(d.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		return fn(Info{Key: key, Size: fi.Size(), Modified: fi.ModTime()})
	})
	if err != nil {
		return fmt.Errorf("listing %s in %s: %w", prefix, d.root, err)
	}
	return nil
}

// SweepTemp removes the temporary files that writers which died left
// (last written before before: not ones being written); List does not
// show them. It returns how many it removed.
func (d *Dir) SweepTemp(ctx context.Context, before time.Time) (int, error) {
	n := 0
	err := filepath.WalkDir(d.root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || ctx.Err() != nil {
			return ctx.Err()
		}
		if e.IsDir() || !strings.HasPrefix(e.Name(), tmpPrefix) {
			return nil
		}
		if fi, err := e.Info(); err == nil && fi.ModTime().Before(before) && os.Remove(p) == nil {
			n++
		}
		return nil
	})
	return n, err
}

var _ Store = (*Dir)(nil)
