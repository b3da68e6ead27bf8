package owner

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// RecordFile, in a box's run dir (root's: the box cannot reach it), names
// the owner the box was made or claimed under: both backends keep it there,
// a docker container's labels being fixed at its create.
const RecordFile = "owner"

// Record writes id as the owner of the box whose run dir is dir,
// atomically.
func Record(dir, id string) error {
	tmp := filepath.Join(dir, RecordFile+".tmp")
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err != nil {
		return fmt.Errorf("recording the box's owner: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, RecordFile)); err != nil {
		return fmt.Errorf("recording the box's owner: %w", err)
	}
	return nil
}

// Recorded is the owner Record wrote in the run dir dir, or "" (none, or
// not an owner id).
func Recorded(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, RecordFile))
	if err != nil {
		return ""
	}
	id := strings.TrimSpace(string(b))
	if CheckID(id) != nil {
		return ""
	}
	return id
}
