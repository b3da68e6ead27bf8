package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// NewID returns a fresh box id: "box-" and 12 random hex digits.
func NewID() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return "box-" + hex.EncodeToString(b[:])
}

// DefaultRunDir is where a backend keeps per-box runtime state (sockets, pid
// records, logs) when not configured: $HARVEST_RUN_DIR/BACKEND when set (to
// keep separate Harvests apart: each one's "sandbox ls" and "rm --all" see
// only its own boxes), else /run/harvest/BACKEND as root, else
// $XDG_RUNTIME_DIR/harvest/BACKEND, else $TMPDIR/harvest-UID/BACKEND.
func DefaultRunDir(backend string) string {
	if d := os.Getenv("HARVEST_RUN_DIR"); d != "" {
		return filepath.Join(d, backend)
	}
	if os.Geteuid() == 0 {
		return filepath.Join("/run/harvest", backend)
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "harvest", backend)
	}
	return filepath.Join(os.TempDir(), "harvest-"+strconv.Itoa(os.Geteuid()), backend)
}

// PrepareSpec applies defaults, assigns an id and validates: every backend's
// Start begins with it.
func PrepareSpec(spec Spec) (Spec, error) {
	spec = spec.WithDefaults()
	if spec.ID == "" {
		spec.ID = NewID()
	}
	if err := spec.Validate(); err != nil {
		return spec, err
	}
	return spec, nil
}

// MkdirRunDir creates a backend's run dir (and parents) with mode 0711: box
// users may traverse it to reach their own box's directory but not list it.
// It fails if dir is a symlink or not owned by us.
func MkdirRunDir(dir string) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if uid, _ := ownerOf(fi); uid != os.Geteuid() {
		return fmt.Errorf("%s is owned by uid %d, not by us (%d)", dir, uid, os.Geteuid())
	}
	return os.Chmod(dir, 0o711)
}
