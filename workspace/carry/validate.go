package carry

import (
	"fmt"
	"math"
	"strings"
)

// Limits on what a manifest may hold. They bound the memory Restore and
// UnmarshalManifest use whatever the manifest says, and match what Linux
// allows (PATH_MAX, NAME_MAX, XATTR_SIZE_MAX).
const (
	maxPath          = 4096
	maxName          = 255
	maxTarget        = 4095
	maxXattrName     = 255
	maxXattrValue    = 64 << 10
	maxXattrsPerItem = 128
	maxExtents       = 16 << 20
	// maxManifestBytes bounds an encoded manifest, uncompressed.
	maxManifestBytes = 1 << 30
)

// validate checks everything Restore relies on: paths that stay beneath the
// root, parents that are directories listed earlier, no duplicates, sane
// kinds and modes, extents inside the file and inside a pack of bounded
// size. It returns, per pack, the uncompressed length the manifest needs.
func (m *Manifest) validate(maxEntries int) (map[string]int64, error) {
	if len(m.Entries) > maxEntries {
		return nil, fmt.Errorf("manifest has %d entries, over the limit of %d: %w", len(m.Entries), maxEntries, ErrTooLarge)
	}
	if m.Root.Path != "" || m.Root.Type != TypeDir {
		return nil, fmt.Errorf("manifest root must be a directory with an empty path, got %s %q", m.Root.Type, m.Root.Path)
	}
	if err := m.Root.validateAttrs(); err != nil {
		return nil, fmt.Errorf("manifest root: %w", err)
	}
	dirs := make(map[string]bool, len(m.Entries)/4+1)
	dirs[""] = true
	seen := make(map[string]bool, len(m.Entries))
	packEnd := map[string]int64{}
	extents := 0
	for i := range m.Entries {
		e := &m.Entries[i]
		if err := validPath(e.Path); err != nil {
			return nil, fmt.Errorf("manifest entry %d: %w", i, err)
		}
		if seen[e.Path] {
			return nil, fmt.Errorf("manifest entry %d: path %q appears twice", i, e.Path)
		}
		seen[e.Path] = true
		parent := ""
		if j := strings.LastIndexByte(e.Path, '/'); j >= 0 {
			parent = e.Path[:j]
		}
		if !dirs[parent] {
			return nil, fmt.Errorf("manifest entry %q: its parent %q is not a directory listed before it", e.Path, parent)
		}
		if e.Type == TypeDir {
			dirs[e.Path] = true
		}
		if err := e.validateAttrs(); err != nil {
			return nil, fmt.Errorf("manifest entry %q: %w", e.Path, err)
		}
		extents += len(e.Extents)
		if extents > maxExtents {
			return nil, fmt.Errorf("manifest has over %d extents: %w", maxExtents, ErrTooLarge)
		}
		if err := e.validateData(packEnd); err != nil {
			return nil, fmt.Errorf("manifest entry %q: %w", e.Path, err)
		}
	}
	return packEnd, nil
}

func validPath(p string) error {
	if p == "" {
		return fmt.Errorf("empty path")
	}
	if len(p) > maxPath {
		return fmt.Errorf("path of %d bytes is over the %d limit", len(p), maxPath)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("path %q contains NUL", p)
	}
	if p[0] == '/' {
		return fmt.Errorf("path %q is absolute", p)
	}
	for c := range strings.SplitSeq(p, "/") {
		switch {
		case c == "", c == ".", c == "..":
			return fmt.Errorf("path %q has an empty, \".\" or \"..\" component", p)
		case len(c) > maxName:
			return fmt.Errorf("path %q has a component over %d bytes", p, maxName)
		}
	}
	return nil
}

func (e *Entry) validateAttrs() error {
	if e.Type < TypeDir || e.Type > TypeBlock {
		return fmt.Errorf("unknown type %d", e.Type)
	}
	if e.Mode&^0o7777 != 0 {
		return fmt.Errorf("mode %#o has bits outside 07777", e.Mode)
	}
	if len(e.Xattrs) > maxXattrsPerItem {
		return fmt.Errorf("%d xattrs, over the limit of %d", len(e.Xattrs), maxXattrsPerItem)
	}
	names := map[string]bool{}
	for _, x := range e.Xattrs {
		switch {
		case !carriedXattr(x.Name):
			return fmt.Errorf("xattr %q is not one carried (user.*, trusted.overlay.*)", x.Name)
		case len(x.Name) > maxXattrName || strings.IndexByte(x.Name, 0) >= 0:
			return fmt.Errorf("xattr name %q is too long or contains NUL", x.Name)
		case len(x.Value) > maxXattrValue:
			return fmt.Errorf("xattr %s has %d bytes, over the %d limit", x.Name, len(x.Value), maxXattrValue)
		case names[x.Name]:
			return fmt.Errorf("xattr %s appears twice", x.Name)
		}
		names[x.Name] = true
	}
	return nil
}

func (e *Entry) validateData(packEnd map[string]int64) error {
	if e.Type != TypeFile && (e.Size != 0 || len(e.Extents) != 0) {
		return fmt.Errorf("a %s has no data", e.Type)
	}
	if e.Type != TypeSymlink && e.Target != "" {
		return fmt.Errorf("a %s has no link target", e.Type)
	}
	if e.Type != TypeChar && e.Type != TypeBlock && e.Rdev != 0 {
		return fmt.Errorf("a %s has no device number", e.Type)
	}
	switch e.Type {
	case TypeSymlink:
		if e.Target == "" || len(e.Target) > maxTarget || strings.IndexByte(e.Target, 0) >= 0 {
			return fmt.Errorf("symlink target is empty, over %d bytes or contains NUL", maxTarget)
		}
	case TypeFile:
		if e.Size < 0 {
			return fmt.Errorf("negative size %d", e.Size)
		}
		var at int64
		for _, x := range e.Extents {
			if !validHash(x.Pack) {
				return fmt.Errorf("extent names pack %q, not a hex sha256", x.Pack)
			}
			if x.Length <= 0 || x.Offset < 0 || x.At < at ||
				x.Length > MaxPackSize || x.Offset > MaxPackSize-x.Length ||
				x.At > math.MaxInt64-x.Length || x.At+x.Length > e.Size {
				return fmt.Errorf("extent (pack %.12s, offset %d, length %d, at %d) is out of order, outside the file's %d bytes or past the %d-byte pack limit",
					x.Pack, x.Offset, x.Length, x.At, e.Size, MaxPackSize)
			}
			at = x.At + x.Length
			packEnd[x.Pack] = max(packEnd[x.Pack], x.Offset+x.Length)
		}
	}
	return nil
}

func validHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
