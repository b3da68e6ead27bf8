package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// Allowed is the list of skips a run may have (.ci/allowed-skips): tests
// that skip by design, not for want of something the machine lacks.
//
// One entry a line: a package pattern, a test pattern and the reason,
// separated by blanks; blank lines and lines starting with # are ignored.
// Both patterns are regular expressions matched against the whole name:
// the package pattern against the end of the import path at a path
// element (sandbox/backends matches github.com/harvest-dev/harvest/sandbox/backends),
// the test pattern against the test's full name as go test -json gives it
// (subtests after a slash, blanks in their names as underscores).
//
//	sandbox/backends  TestIsolation/host  the host backend has no isolation by design
type Allowed struct {
	entries []*allowEntry
}

type allowEntry struct {
	where     string // file:line
	pkg, test string // the patterns as written
	pkgRE     *regexp.Regexp
	testRE    *regexp.Regexp
	reason    string
	seen      int // skips it allowed in this run
}

// ParseAllowed reads an allowed list; name is its file name, for errors.
func ParseAllowed(r io.Reader, name string) (*Allowed, error) {
	a := &Allowed{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		where := fmt.Sprintf("%s:%d", name, n)
		f := strings.Fields(line)
		if len(f) < 3 {
			return nil, fmt.Errorf("%s: %q: want a package pattern, a test pattern and the reason the test may skip", where, line)
		}
		e := &allowEntry{where: where, pkg: f[0], test: f[1], reason: strings.Join(f[2:], " ")}
		var err error
		if e.pkgRE, err = regexp.Compile(`(^|/)(?:` + e.pkg + `)$`); err != nil {
			return nil, fmt.Errorf("%s: package pattern %q: %w", where, e.pkg, err)
		}
		if e.testRE, err = regexp.Compile(`^(?:` + e.test + `)$`); err != nil {
			return nil, fmt.Errorf("%s: test pattern %q: %w", where, e.test, err)
		}
		a.entries = append(a.entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return a, nil
}

// match returns the first entry allowing test of pkg to skip, or nil.
func (a *Allowed) match(pkg, test string) *allowEntry {
	if a == nil {
		return nil
	}
	for _, e := range a.entries {
		if e.pkgRE.MatchString(pkg) && e.testRE.MatchString(test) {
			return e
		}
	}
	return nil
}
