package environment

import (
	"bytes"
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
func leakedSecrets(dir string, env []string) []string {
	type secret struct{ name, value string }
	var ss []secret
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && len(v) >= minScanned {
			ss = append(ss, secret{k, v})
		}
	}
	if len(ss) == 0 {
		return nil
	}
	var found []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || d.Name() == "build.log" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		for _, s := range ss {
			if bytes.Contains(b, []byte(s.value)) {
				found = append(found, fmt.Sprintf("%s in %s", s.name, rel))
			}
		}
		return nil
	})
	return found
}
