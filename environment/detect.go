package environment

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Script paths in a repository.
const (
	SetupScript = ".harvest/setup.sh"
	StartScript = ".harvest/start.sh"
)

// maxScript bounds a setup or start script.
const maxScript = 256 << 10

// Plan is how a repository's environment is set up and started.
type Plan struct {
	// Setup is the shell script run once, when the environment is built
	// (HARVEST_BOOT_MODE=setup): the repository's .harvest/setup.sh, or
	// what was detected.
	Setup string
	// Start is the repository's .harvest/start.sh, run at every box start
	// (HARVEST_BOOT_MODE=start); a failure fails the start. Empty: none.
	Start string
	// Detected says, for people, what Setup does when it was detected
	// ("go.mod: go mod download and a build of the test binaries").
	Detected []string
	// Env is the server's settings for the setup (--repo-config's env:
	// KEY=VALUE, sorted), like a private package index's URL. Not secret:
	// credentials are setup secrets (Request.Env).
	Env []string
}

// Hash identifies the plan's scripts (part of an environment's
// fingerprint).
func (p Plan) Hash() string {
	h := sha256.New()
	io.WriteString(h, "setup\x00"+p.Setup+"\x00start\x00"+p.Start)
	for _, kv := range p.Env {
		io.WriteString(h, "\x00env\x00"+kv)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Detect reads a repository checkout Harvest made (never one an agent has
// written: it reads files only, never runs anything, and follows no
// symlink) and returns its plan. With .harvest/setup.sh, that script is
// the setup; without, the common kinds of repository are detected from
// their top-level files (detectors.go: go.work or go.mod; a JavaScript
// lockfile or package.json; uv.lock, poetry.lock, requirements.txt or
// pyproject.toml; Cargo.lock; Gemfile.lock) and their usual install
// commands become the setup, said in Detected. A repository with neither
// has an empty setup: nothing needs installing.
func Detect(dir string) (Plan, error) {
	var p Plan
	setup, err := readScript(dir, SetupScript)
	if err != nil {
		return Plan{}, err
	}
	if p.Start, err = readScript(dir, StartScript); err != nil {
		return Plan{}, err
	}
	if setup != "" {
		p.Setup = setup
		p.Detected = []string{SetupScript}
		return p, nil
	}
	var b strings.Builder
	for _, detect := range detectors {
		if s, ok := detect(checkout(dir)); ok {
			p.Detected = append(p.Detected, s.detected)
			b.WriteString(s.script)
		}
	}
	p.Setup = b.String()
	return p, nil
}

func contains(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// readScript reads a script of the repository, refusing a symlink (it
// could name any file of the host), a non-regular file and one too big.
// A missing script is "".
func readScript(dir, rel string) (string, error) {
	f, err := os.OpenFile(filepath.Join(dir, rel), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return "", fmt.Errorf("%s is a symlink: make it a file", rel)
		}
		return "", fmt.Errorf("reading %s: %w", rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", rel)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxScript+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxScript {
		return "", fmt.Errorf("%s is larger than %d KiB", rel, maxScript>>10)
	}
	return string(b), nil
}
