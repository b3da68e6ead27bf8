package carry

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// The manifest encoding (see doc.go): a magic, a version byte, then one
// zstd frame holding the body.
const (
	manifestMagic   = "hvcarry"
	manifestVersion = 1
)

var (
	encoder = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
		if err != nil {
			panic(err) // only bad options fail
		}
		return e
	})
	manifestDecoder = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(maxManifestBytes), zstd.WithDecoderConcurrency(1))
		if err != nil {
			panic(err)
		}
		return d
	})
)

// Marshal encodes m. It fails if m would not pass UnmarshalManifest.
func (m *Manifest) Marshal() ([]byte, error) {
	if _, err := m.validate(DefaultMaxEntries); err != nil {
		return nil, err
	}
	packs := m.Packs()
	index := make(map[string]uint64, len(packs))
	var w writer
	w.uvarint(uint64(len(packs)))
	for i, h := range packs {
		raw, _ := hex.DecodeString(h)
		w.b = append(w.b, raw...)
		index[h] = uint64(i)
	}
	prev := ""
	w.entry(&m.Root, &prev, index)
	w.uvarint(uint64(len(m.Entries)))
	for i := range m.Entries {
		w.entry(&m.Entries[i], &prev, index)
	}
	if len(w.b) > maxManifestBytes {
		return nil, fmt.Errorf("manifest encodes to %d bytes, over the %d limit: %w", len(w.b), maxManifestBytes, ErrTooLarge)
	}
	out := append([]byte(manifestMagic), manifestVersion)
	return encoder().EncodeAll(w.b, out), nil
}

// UnmarshalManifest decodes and validates a manifest Marshal wrote. It
// checks everything Restore relies on (see doc.go), so a manifest it
// returns can be restored without writing outside the root.
func UnmarshalManifest(b []byte) (*Manifest, error) {
	if len(b) < len(manifestMagic)+1 || string(b[:len(manifestMagic)]) != manifestMagic {
		return nil, fmt.Errorf("decoding manifest: not a carry manifest (bad magic)")
	}
	if v := b[len(manifestMagic)]; v != manifestVersion {
		return nil, fmt.Errorf("decoding manifest: version %d, this build reads version %d; restore with a matching harvest", v, manifestVersion)
	}
	body, err := manifestDecoder().DecodeAll(b[len(manifestMagic)+1:], nil)
	if err != nil {
		return nil, fmt.Errorf("decoding manifest: decompressing: %w", err)
	}
	r := reader{b: body}
	np := r.count(32)
	packs := make([]string, np)
	for i := range packs {
		packs[i] = hex.EncodeToString(r.bytes(32))
	}
	m := &Manifest{}
	prev := ""
	r.entry(&m.Root, &prev, packs)
	n := r.count(8)
	if n > DefaultMaxEntries {
		return nil, fmt.Errorf("decoding manifest: %d entries, over the limit of %d: %w", n, DefaultMaxEntries, ErrTooLarge)
	}
	m.Entries = make([]Entry, n)
	for i := range m.Entries {
		r.entry(&m.Entries[i], &prev, packs)
		if r.err != nil {
			break
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d trailing bytes", len(r.b))
	}
	if r.err != nil {
		return nil, fmt.Errorf("decoding manifest: %w", r.err)
	}
	if _, err := m.validate(DefaultMaxEntries); err != nil {
		return nil, err
	}
	return m, nil
}

type writer struct{ b []byte }

func (w *writer) uvarint(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *writer) varint(v int64)   { w.b = binary.AppendVarint(w.b, v) }
func (w *writer) str(s string)     { w.uvarint(uint64(len(s))); w.b = append(w.b, s...) }

func (w *writer) entry(e *Entry, prev *string, index map[string]uint64) {
	shared := 0
	for shared < len(e.Path) && shared < len(*prev) && e.Path[shared] == (*prev)[shared] {
		shared++
	}
	w.uvarint(uint64(shared))
	w.str(e.Path[shared:])
	*prev = e.Path
	w.b = append(w.b, byte(e.Type))
	w.uvarint(uint64(e.Mode))
	w.uvarint(uint64(e.UID))
	w.uvarint(uint64(e.GID))
	w.varint(e.Mtime)
	w.uvarint(uint64(len(e.Xattrs)))
	for _, x := range e.Xattrs {
		w.str(x.Name)
		w.str(string(x.Value))
	}
	switch e.Type {
	case TypeFile:
		w.uvarint(uint64(e.Size))
		w.uvarint(e.Dev)
		w.uvarint(e.Ino)
		w.varint(e.Ctime)
		w.uvarint(uint64(len(e.Extents)))
		var end int64
		for _, x := range e.Extents {
			w.uvarint(index[x.Pack])
			w.uvarint(uint64(x.Offset))
			w.uvarint(uint64(x.Length))
			w.uvarint(uint64(x.At - end)) // gap since the previous extent
			end = x.At + x.Length
		}
	case TypeSymlink:
		w.str(e.Target)
	case TypeChar, TypeBlock:
		w.uvarint(e.Rdev)
	}
}

// reader decodes the body; the first error sticks and later reads return
// zeros, so callers check r.err once per entry.
type reader struct {
	b   []byte
	err error
}

var errShort = errors.New("truncated")

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = errShort
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}

// count reads a count of items each at least min bytes long, refusing one
// the remaining input could not hold (so no allocation is larger than the
// input justifies).
func (r *reader) count(min int) int {
	v := r.uvarint()
	if r.err == nil && v > uint64(len(r.b)/min) {
		r.err = fmt.Errorf("count %d larger than the input", v)
		return 0
	}
	return int(v)
}

func (r *reader) str(limit int) string {
	n := r.uvarint()
	if r.err == nil && n > uint64(limit) {
		r.err = fmt.Errorf("string of %d bytes, over the %d limit", n, limit)
		return ""
	}
	return string(r.bytes(int(n)))
}

func (r *reader) u32(what string) uint32 {
	v := r.uvarint()
	if v > 1<<32-1 {
		r.fail("%s %d does not fit 32 bits", what, v)
	}
	return uint32(v)
}

func (r *reader) i63(what string) int64 {
	v := r.uvarint()
	if v > 1<<63-1 {
		r.fail("%s %d does not fit 63 bits", what, v)
	}
	return int64(v)
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *reader) entry(e *Entry, prev *string, packs []string) {
	shared := r.uvarint()
	if shared > uint64(len(*prev)) {
		r.fail("path shares %d bytes with a previous path of %d", shared, len(*prev))
		return
	}
	suffix := r.str(maxPath)
	e.Path = (*prev)[:shared] + suffix
	*prev = e.Path
	t := r.bytes(1)
	if r.err != nil {
		return
	}
	e.Type = Type(t[0])
	e.Mode = r.u32("mode")
	e.UID = r.u32("uid")
	e.GID = r.u32("gid")
	e.Mtime = r.varint()
	nx := r.count(2)
	if nx > maxXattrsPerItem {
		r.fail("%d xattrs, over the limit of %d", nx, maxXattrsPerItem)
		return
	}
	for range nx {
		name := r.str(maxXattrName)
		val := r.str(maxXattrValue)
		e.Xattrs = append(e.Xattrs, Xattr{Name: name, Value: []byte(val)})
	}
	switch e.Type {
	case TypeFile:
		e.Size = r.i63("size")
		e.Dev = r.uvarint()
		e.Ino = r.uvarint()
		e.Ctime = r.varint()
		n := r.count(4)
		if n > 0 {
			e.Extents = make([]Extent, n)
		}
		var end int64
		for i := range e.Extents {
			pi := r.uvarint()
			if r.err == nil && pi >= uint64(len(packs)) {
				r.fail("extent names pack %d of %d", pi, len(packs))
			}
			if r.err != nil {
				return
			}
			x := &e.Extents[i]
			x.Pack = packs[pi]
			x.Offset = r.i63("extent offset")
			x.Length = r.i63("extent length")
			gap := r.i63("extent gap")
			if gap > e.Size || end > e.Size-gap {
				r.fail("extent past the file's size")
				return
			}
			x.At = end + gap
			if x.Length > e.Size-x.At {
				r.fail("extent past the file's size")
				return
			}
			end = x.At + x.Length
		}
	case TypeSymlink:
		e.Target = r.str(maxTarget)
	case TypeChar, TypeBlock:
		e.Rdev = r.uvarint()
	}
}
