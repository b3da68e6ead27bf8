package environment

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/harvest-dev/harvest/secrets"
)

// minScanned is the shortest secret value searched for in a built
// environment: shorter ones would match by chance.
const minScanned = 6

// lineRedactor writes whole lines through a Redactor, so a secret split
// across two writes is still masked; Flush writes what is left.
type lineRedactor struct {
	mu  sync.Mutex
	w   io.Writer
	r   *secrets.Redactor
	buf []byte
}

func (l *lineRedactor) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if i := bytes.LastIndexByte(l.buf, '\n'); i >= 0 {
		if _, err := io.WriteString(l.w, l.r.Redact(string(l.buf[:i+1]))); err != nil {
			return 0, err
		}
		l.buf = append(l.buf[:0], l.buf[i+1:]...)
	}
	if len(l.buf) > 64<<10 { // a very long line: let it through, masked
		io.WriteString(l.w, l.r.Redact(string(l.buf)))
		l.buf = l.buf[:0]
	}
	return len(p), nil
}

func (l *lineRedactor) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		io.WriteString(l.w, l.r.Redact(string(l.buf)))
		l.buf = nil
	}
}

// leakedSecrets lists where a built environment holds a setup secret's
// value (its HOME's files, the tar of its checkout's files), as
// "NAME in PATH": a secret kept there would reach every session on it.
//
// It fails closed: a directory it cannot list, a file it cannot read (a
// path too long to open, a mode the scan may not pass) is an error naming
// it, and the build fails, since what was not read may hold a secret. A
// symbolic link's target is searched too (a setup could write the value
// there); other special files (fifos, sockets, devices) hold no data and
// are skipped.
func leakedSecrets(dir string, env []string) ([]string, error) {
	var ss []secret
	longest := 0
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && len(v) >= minScanned {
			ss = append(ss, secret{k, v})
			longest = max(longest, len(v))
		}
	}
	if len(ss) == 0 {
		return nil, nil
	}
	var found, unread []string
	rel := func(p string) string {
		r, err := filepath.Rel(dir, p)
		if err != nil {
			r = p
		}
		return shortPath(r)
	}
	buf := make([]byte, scanChunk+longest)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			unread = append(unread, fmt.Sprintf("%s (%v)", rel(p), unwrapPath(err)))
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				unread = append(unread, fmt.Sprintf("%s (%v)", rel(p), unwrapPath(err)))
				return nil
			}
			for _, s := range ss {
				if strings.Contains(target, s.value) {
					found = append(found, fmt.Sprintf("%s in %s (the link's target)", s.name, rel(p)))
				}
			}
			return nil
		case !d.Type().IsRegular() || (d.Name() == "build.log" && filepath.Dir(p) == dir):
			return nil
		}
		names, err := scanFile(p, ss, buf)
		if err != nil {
			unread = append(unread, fmt.Sprintf("%s (%v)", rel(p), unwrapPath(err)))
			return nil
		}
		for _, n := range names {
			found = append(found, fmt.Sprintf("%s in %s", n, rel(p)))
		}
		return nil
	})
	if err != nil { // WalkDir's own: only what fn returned, which is nil
		return found, fmt.Errorf("searching the environment for setup secrets: %w", err)
	}
	if len(unread) > 0 {
		more := ""
		if len(unread) > maxListed {
			unread, more = unread[:maxListed], fmt.Sprintf(" and %d more", len(unread)-maxListed)
		}
		return found, fmt.Errorf("the environment could not be searched for setup secrets, so it is not kept: cannot read %s%s; "+
			"a setup must leave HOME and the checkout readable, with paths the host can open (at most %d bytes)",
			strings.Join(unread, ", "), more, pathMax)
	}
	return found, nil
}

type secret struct{ name, value string }

const (
	// scanChunk is how much of a file is read at a time.
	scanChunk = 256 << 10
	// maxListed bounds the unreadable paths an error lists.
	maxListed = 5
	// pathMax is Linux's PATH_MAX: longer paths cannot be opened whole.
	pathMax = 4096
)

// scanFile returns the names of the secrets whose values p holds, reading
// it a chunk at a time into buf (scanChunk plus the longest value), the
// tail of each chunk kept before the next so that no value is missed
// across two.
func scanFile(p string, ss []secret, buf []byte) ([]string, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	keep := len(buf) - scanChunk
	seen := make([]bool, len(ss))
	var names []string
	n := 0 // bytes in buf
	for {
		m, err := io.ReadFull(f, buf[n:])
		n += m
		for i, s := range ss {
			if !seen[i] && bytes.Contains(buf[:n], []byte(s.value)) {
				seen[i] = true
				names = append(names, s.name)
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return names, nil
		}
		if err != nil {
			return names, err
		}
		tail := min(keep, n)
		copy(buf, buf[n-tail:n])
		n = tail
	}
}

// unwrapPath drops the path an *fs.PathError repeats (the message names it
// already).
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// shortPath keeps a path readable in a message: a very long one (deep
// enough not to open) is cut in the middle.
func shortPath(p string) string {
	const most = 160
	if len(p) <= most {
		return p
	}
	return p[:most/2] + "…" + p[len(p)-most/2:] + fmt.Sprintf(" (%d bytes)", len(p))
}
