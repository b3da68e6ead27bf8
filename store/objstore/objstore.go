// Package objstore keeps the objects of workspace checkpoints (store/carry.go)
// out of the database: the packs of file data and the manifests are objects
// in an object store, and the database holds only a reference to each (its
// key, size and sha256).
//
// Two implementations: a directory (Dir: the default, under the data
// directory, for nodes on one machine or on a shared filesystem) and a bucket
// of an S3-compatible object store (S3: AWS S3, MinIO, SeaweedFS, versitygw…;
// for nodes on separate machines). Both guarantee what the carry needs:
//
//   - Put is atomic: a reader sees the whole object or none, never a part
//     (Dir writes a temporary file, fsyncs it, renames it and fsyncs the
//     directory; S3 completes a multipart upload only after every part is
//     stored, so an upload that dies leaves no object).
//   - Put streams: the data is read from an io.Reader once, never held whole
//     (a multipart upload's parts are PartSize each).
//   - Open's reader checks the object against its reference: one whose size
//     or sha256 differ fails at its end with ErrCorrupt, and one longer than
//     its size fails as soon as it is.
//
// Keys are paths of "/"-separated names of letters, digits, '.', '_' and
// '-' (no empty, "." or ".." names). The S3 store's credentials are read
// from a file (or the environment) by this process only: they are never
// written to a log, an error or a box.
package objstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"time"
)

// ErrNotFound is returned by Open for a key no object has: the caller
// reports the reference as dangling (deleted, or in another store).
var ErrNotFound = errors.New("no such object")

// ErrCorrupt is returned by an Open reader whose object is not the one its
// reference names (size or sha256): the object must not be used.
var ErrCorrupt = errors.New("the object does not match its reference")

// Ref is what the database keeps of an object.
type Ref struct {
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // hex
}

// Info is an object as a listing shows it.
type Info struct {
	Key      string
	Size     int64
	Modified time.Time
}

// Store is an object store.
type Store interface {
	// Put stores size bytes read from r under key, replacing an object
	// there, and returns its reference. It is atomic (see the package doc);
	// r yielding more or fewer than size bytes is an error and stores
	// nothing.
	Put(ctx context.Context, key string, r io.Reader, size int64) (Ref, error)
	// Open reads the object ref names, checked against it (ErrCorrupt at
	// the end); ErrNotFound when there is none.
	Open(ctx context.Context, ref Ref) (io.ReadCloser, error)
	// Delete removes the object under key; none there is no error.
	Delete(ctx context.Context, key string) error
	// List calls fn with every object whose key starts with prefix, in no
	// particular order, until fn returns an error (which List returns).
	List(ctx context.Context, prefix string, fn func(Info) error) error
	// String says where the objects are, without credentials.
	String() string
}

// CheckKey says what is wrong with key, nil when it is a valid key.
func CheckKey(key string) error {
	if key == "" || len(key) > 512 {
		return fmt.Errorf("object key %q: give 1 to 512 characters", key)
	}
	for _, name := range strings.Split(key, "/") {
		if name == "" || name == "." || name == ".." {
			return fmt.Errorf("object key %q: empty, \".\" or \"..\" name", key)
		}
		for _, c := range name {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				return fmt.Errorf("object key %q: %q is not a letter, digit, '.', '_' or '-'", key, c)
			}
		}
	}
	return nil
}

// checkPrefix is CheckKey for a listing's prefix, which may be empty or
// end with "/".
func checkPrefix(prefix string) error {
	p := strings.TrimSuffix(prefix, "/")
	if p == "" {
		if prefix != "" {
			return fmt.Errorf("object prefix %q: give a key's beginning", prefix)
		}
		return nil
	}
	return CheckKey(p)
}

// hashingReader counts and hashes what is read through it.
type hashingReader struct {
	r io.Reader
	h hash.Hash
	n int64
}

func newHashingReader(r io.Reader) *hashingReader {
	return &hashingReader{r: r, h: sha256.New()}
}

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.n += int64(n)
	h.h.Write(p[:n])
	return n, err
}

func (h *hashingReader) sum() string { return hex.EncodeToString(h.h.Sum(nil)) }

// sizedReader yields exactly size bytes of r: fewer is io.ErrUnexpectedEOF,
// more is an error at the first byte past size.
type sizedReader struct {
	r    io.Reader
	left int64
	key  string
}

func (s *sizedReader) Read(p []byte) (int, error) {
	if s.left == 0 {
		var b [1]byte
		n, err := io.ReadFull(s.r, b[:])
		if n > 0 {
			return 0, fmt.Errorf("storing %s: the data is longer than its given size", s.key)
		}
		if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
			return 0, err
		}
		return 0, io.EOF
	}
	if int64(len(p)) > s.left {
		p = p[:s.left]
	}
	n, err := s.r.Read(p)
	s.left -= int64(n)
	if err == io.EOF && s.left > 0 {
		return n, fmt.Errorf("storing %s: the data ended %d bytes short of its given size: %w", s.key, s.left, io.ErrUnexpectedEOF)
	}
	if err == io.EOF {
		err = nil
	}
	return n, err
}

// verifier checks an object read against its reference.
type verifier struct {
	rc  io.ReadCloser
	hr  *hashingReader
	ref Ref
	err error
}

func verify(rc io.ReadCloser, ref Ref) io.ReadCloser {
	return &verifier{rc: rc, hr: newHashingReader(rc), ref: ref}
}

func (v *verifier) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.hr.Read(p)
	switch {
	case v.hr.n > v.ref.Size:
		v.err = fmt.Errorf("object %s: longer than its %d bytes: %w", v.ref.Key, v.ref.Size, ErrCorrupt)
		return 0, v.err
	case err == io.EOF && v.hr.n != v.ref.Size:
		v.err = fmt.Errorf("object %s: %d bytes, want %d: %w", v.ref.Key, v.hr.n, v.ref.Size, ErrCorrupt)
		return n, v.err
	case err == io.EOF && !strings.EqualFold(v.hr.sum(), v.ref.SHA256):
		v.err = fmt.Errorf("object %s: sha256 %.12s…, want %.12s…: %w", v.ref.Key, v.hr.sum(), v.ref.SHA256, ErrCorrupt)
		return n, v.err
	}
	if err != nil {
		v.err = err
	}
	return n, err
}

func (v *verifier) Close() error { return v.rc.Close() }

// ReadAll reads the object ref names whole, checked; for objects known to
// be small (a pack). max bounds it: a reference bigger is refused unread.
func ReadAll(ctx context.Context, s Store, ref Ref, max int64) ([]byte, error) {
	if ref.Size > max || ref.Size < 0 {
		return nil, fmt.Errorf("object %s: %d bytes, more than the %d expected", ref.Key, ref.Size, max)
	}
	rc, err := s.Open(ctx, ref)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b := make([]byte, 0, ref.Size)
	buf := b[:ref.Size]
	if _, err := io.ReadFull(rc, buf); err != nil {
		return nil, fmt.Errorf("reading object %s: %w", ref.Key, err)
	}
	// The verifier checks at EOF: read it.
	var one [1]byte
	if n, err := rc.Read(one[:]); n != 0 || err != io.EOF {
		if err == nil || err == io.EOF {
			err = fmt.Errorf("object %s: longer than its %d bytes: %w", ref.Key, ref.Size, ErrCorrupt)
		}
		return nil, err
	}
	return buf, nil
}
