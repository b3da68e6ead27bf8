package agentd

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/harvest-dev/harvest/sandbox/proto"
)

const (
	defaultGlobLimit   = 1000
	defaultGrepResults = 1000
	defaultGrepMaxFile = 4 << 20
	maxGrepLine        = 500
)

var errStopWalk = errors.New("stop walk")

// walk visits every entry under root (symlinks are not followed), skipping
// ignored ones when gitignore is set. fn gets the path relative to root.
func walk(root string, gitignore bool, fn func(rel string, d fs.DirEntry) error) error {
	var ig *ignorer
	if gitignore {
		ig = newIgnorer(root)
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return err
			}
			return nil // unreadable entries are skipped, like ripgrep does
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if ig != nil {
			full := ig.fromWalk(rel)
			if ig.ignored(full, d.IsDir()) {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.IsDir() {
				ig.enter(full)
			}
		}
		return fn(rel, d)
	})
}

func (s *Server) glob(prm proto.GlobParams) (proto.GlobReply, error) {
	root, err := s.resolve(orDefault(prm.Root, s.id().workdir))
	if err != nil {
		return proto.GlobReply{}, err
	}
	if !doublestar.ValidatePattern(prm.Pattern) {
		return proto.GlobReply{}, &proto.Error{Code: proto.CodeInvalid, Message: "glob: bad pattern " + prm.Pattern}
	}
	limit := prm.Limit
	if limit <= 0 {
		limit = defaultGlobLimit
	}
	pattern := strings.TrimPrefix(prm.Pattern, "./")
	// Walk only below the pattern's literal prefix.
	base, _ := doublestar.SplitPattern(pattern)
	start := root
	prefix := ""
	if base != "." && base != "" && !strings.HasPrefix(base, "/") {
		start = filepath.Join(root, base)
		prefix = base + "/"
	}
	out := proto.GlobReply{Paths: []string{}}
	if _, err := os.Stat(start); err != nil {
		if errors.Is(err, fs.ErrNotExist) && start != root {
			return out, nil
		}
		return out, errno(err)
	}
	err = walk(start, prm.GitIgnore, func(rel string, d fs.DirEntry) error {
		full := prefix + rel
		if ok, _ := doublestar.Match(pattern, full); ok {
			if len(out.Paths) == limit {
				out.Truncated = true
				return errStopWalk
			}
			out.Paths = append(out.Paths, filepath.Join(root, full))
		}
		return nil
	})
	if err != nil && err != errStopWalk {
		return out, errno(err)
	}
	return out, nil
}

func (s *Server) grep(prm proto.GrepParams) (proto.GrepReply, error) {
	root, err := s.resolve(orDefault(prm.Root, s.id().workdir))
	if err != nil {
		return proto.GrepReply{}, err
	}
	expr := prm.Pattern
	if prm.Literal {
		expr = regexp.QuoteMeta(expr)
	}
	if prm.IgnoreCase {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return proto.GrepReply{}, &proto.Error{Code: proto.CodeInvalid, Message: "grep: " + err.Error()}
	}
	if prm.Include != "" && !doublestar.ValidatePattern(prm.Include) {
		return proto.GrepReply{}, &proto.Error{Code: proto.CodeInvalid, Message: "grep: bad include pattern " + prm.Include}
	}
	maxResults := prm.MaxResults
	if maxResults <= 0 {
		maxResults = defaultGrepResults
	}
	maxSize := prm.MaxFileSize
	if maxSize <= 0 {
		maxSize = defaultGrepMaxFile
	}
	out := proto.GrepReply{Matches: []proto.GrepMatch{}}

	fi, err := os.Stat(root)
	if err != nil {
		return out, errno(err)
	}
	search := func(full, rel string) error {
		matches, err := grepFile(full, re, maxSize, maxResults-len(out.Matches))
		if err != nil {
			return nil
		}
		out.FilesScanned++
		for _, m := range matches {
			m.Path = full
			out.Matches = append(out.Matches, m)
		}
		if len(out.Matches) >= maxResults {
			out.Truncated = true
			return errStopWalk
		}
		return nil
	}
	if !fi.IsDir() {
		_ = search(root, filepath.Base(root))
		return out, nil
	}
	err = walk(root, prm.GitIgnore, func(rel string, d fs.DirEntry) error {
		if !d.Type().IsRegular() {
			return nil
		}
		if prm.Include != "" && !includeMatch(prm.Include, rel) {
			return nil
		}
		return search(filepath.Join(root, rel), rel)
	})
	if err != nil && err != errStopWalk {
		return out, errno(err)
	}
	return out, nil
}

// includeMatch matches like ripgrep's --glob: a pattern without "/" matches
// the file name at any depth.
func includeMatch(pattern, rel string) bool {
	if !strings.Contains(pattern, "/") {
		ok, _ := doublestar.Match(pattern, filepath.Base(rel))
		return ok
	}
	ok, _ := doublestar.Match(pattern, rel)
	return ok
}

// grepFile returns up to max matching lines; binary and oversized files give
// an error (skipped).
func grepFile(path string, re *regexp.Regexp, maxSize int64, max int) ([]proto.GrepMatch, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxSize {
		return nil, errors.New("too large")
	}
	br := bufio.NewReaderSize(f, 64<<10)
	head, _ := br.Peek(8 << 10)
	if bytes.IndexByte(head, 0) >= 0 {
		return nil, errors.New("binary")
	}
	var out []proto.GrepMatch
	line := 0
	for len(out) < max {
		b, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// An over-long line: read the rest and match what we kept.
			rest, _ := readRestOfLine(br)
			b = append(append([]byte{}, b...), rest...)
			err = nil
		}
		if len(b) == 0 && err != nil {
			break
		}
		line++
		text := bytes.TrimRight(b, "\r\n")
		if re.Match(text) {
			out = append(out, proto.GrepMatch{Line: line, Text: clip(text)})
		}
		if err != nil {
			break
		}
	}
	return out, nil
}

func readRestOfLine(br *bufio.Reader) ([]byte, error) {
	var rest []byte
	for {
		b, err := br.ReadSlice('\n')
		rest = append(rest, b...)
		if err != bufio.ErrBufferFull {
			if err == io.EOF {
				err = nil
			}
			return rest, err
		}
	}
}

func clip(b []byte) string {
	if len(b) <= maxGrepLine {
		return string(b)
	}
	b = b[:maxGrepLine]
	for len(b) > 0 && !utf8.Valid(b) {
		b = b[:len(b)-1]
	}
	return string(b) + "…"
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
