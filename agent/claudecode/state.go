package claudecode

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/harvest-dev/harvest/sandbox"
)

// What survives suspension (State, New): Claude Code's session id and the
// session's files in its project directory,
//
//	$CLAUDE_CONFIG_DIR/projects/<escaped cwd>/<session id>.jsonl   the transcript
//	$CLAUDE_CONFIG_DIR/projects/<escaped cwd>/<session id>/...     tool results kept
//	                                                               apart, subagent transcripts
//
// which is all `claude --resume <id>` needs (2.1.197: a config directory
// holding only the transcript resumes the whole conversation). The agent
// copies them out of the box at the end of every turn (only what changed:
// the transcript is append-only, so usually just its new tail), so State
// never touches the box.

const stateVersion = 1

// persisted is the state's JSON.
type persisted struct {
	Version int `json:"version"`
	// ClaudeSession is Claude Code's session id (a UUID Harvest chose).
	ClaudeSession string `json:"claude_session"`
	// Project is the name of the project directory the files were in.
	Project string `json:"project,omitempty"`
	// Files is a gzipped tar of the session's files, named relative to
	// the project directory.
	Files []byte `json:"files,omitempty"`
}

// files is the in-memory copy of the session's files.
type files struct {
	byName map[string]*file
	total  int64
	packed []byte // Files of the last State, until something changes
}

type file struct {
	data    []byte
	modTime time.Time
}

// projectDirName is the directory Claude Code keeps a working directory's
// sessions in (2.1.197: every character but ASCII letters and digits becomes
// '-', counted in UTF-16 code units; names over 200 are cut and get a hash).
func projectDirName(cwd string) string {
	var b strings.Builder
	for _, r := range cwd {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case r > 0xFFFF:
			b.WriteString("--") // a surrogate pair in JavaScript
		default:
			b.WriteByte('-')
		}
	}
	s := b.String()
	const limit = 200
	if len(s) <= limit {
		return s
	}
	// JavaScript's `h = (h << 5) - h + charCode | 0` over UTF-16 units,
	// then Math.abs(h).toString(36).
	var h int32
	for _, u := range utf16.Encode([]rune(cwd)) {
		h = (h << 5) - h + int32(u)
	}
	abs := int64(h)
	if abs < 0 {
		abs = -abs
	}
	return s[:limit] + "-" + strconv.FormatInt(abs, 36)
}

// newUUID returns a random (version 4) UUID, the form Claude Code's
// --session-id wants.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// pack returns the state to persist.
func (sf *files) pack(session, project string) ([]byte, error) {
	if sf.packed == nil && len(sf.byName) > 0 {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		tw := tar.NewWriter(zw)
		names := make([]string, 0, len(sf.byName))
		for n := range sf.byName {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			f := sf.byName[n]
			hdr := &tar.Header{Name: n, Mode: 0o600, Size: int64(len(f.data)), ModTime: f.modTime, Typeflag: tar.TypeReg}
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, err
			}
			if _, err := tw.Write(f.data); err != nil {
				return nil, err
			}
		}
		if err := tw.Close(); err != nil {
			return nil, err
		}
		if err := zw.Close(); err != nil {
			return nil, err
		}
		sf.packed = buf.Bytes()
	}
	return json.Marshal(persisted{Version: stateVersion, ClaudeSession: session, Project: project, Files: sf.packed})
}

// holds reports whether file name has the entry with uuid.
func (sf *files) holds(name, uuid string) bool {
	f := sf.byName[name]
	return f != nil && bytes.Contains(f.data, []byte(`"uuid":"`+uuid+`"`))
}

// unpack reads a state, checking it is one this package wrote.
func unpack(b []byte, maxBytes int64) (session, project string, sf *files, err error) {
	session, project, sf, err = unpackFiles(b, maxBytes)
	if err != nil {
		return "", "", nil, fmt.Errorf("claudecode agent: the saved state: %w", err)
	}
	return session, project, sf, nil
}

func unpackFiles(b []byte, maxBytes int64) (string, string, *files, error) {
	var p persisted
	if err := json.Unmarshal(b, &p); err != nil {
		return "", "", nil, fmt.Errorf("not readable: %w", err)
	}
	if p.Version != stateVersion {
		return "", "", nil, fmt.Errorf("it has version %d; this Harvest reads version %d", p.Version, stateVersion)
	}
	if _, err := uuidOK(p.ClaudeSession); err != nil {
		return "", "", nil, err
	}
	if p.Project != "" && (strings.ContainsAny(p.Project, "/\\") || p.Project == "." || p.Project == "..") {
		return "", "", nil, fmt.Errorf("project directory %q is not a directory name", p.Project)
	}
	sf := &files{byName: map[string]*file{}}
	if len(p.Files) == 0 {
		return p.ClaudeSession, p.Project, sf, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(p.Files))
	if err != nil {
		return "", "", nil, fmt.Errorf("the transcript: %w", err)
	}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", "", nil, fmt.Errorf("the transcript: %w", err)
		}
		if !validRel(hdr.Name, p.ClaudeSession) || hdr.Typeflag != tar.TypeReg {
			return "", "", nil, fmt.Errorf("it holds %q, which is not a file of session %s", hdr.Name, p.ClaudeSession)
		}
		if sf.total+hdr.Size > maxBytes {
			return "", "", nil, fmt.Errorf("its files are over %d bytes (MaxStateBytes)", maxBytes)
		}
		data, err := io.ReadAll(io.LimitReader(tr, hdr.Size))
		if err != nil {
			return "", "", nil, fmt.Errorf("the transcript: %w", err)
		}
		sf.byName[hdr.Name] = &file{data: data, modTime: hdr.ModTime}
		sf.total += int64(len(data))
	}
	sf.packed = p.Files
	return p.ClaudeSession, p.Project, sf, nil
}

func uuidOK(s string) (string, error) {
	if len(s) != 36 || strings.Count(s, "-") != 4 || strings.Trim(s, "0123456789abcdef-") != "" {
		return "", fmt.Errorf("session id %q is not a UUID", s)
	}
	return s, nil
}

// validRel reports a name of one of session's files: <id>.jsonl or under <id>/.
func validRel(name, session string) bool {
	if name == session+".jsonl" {
		return true
	}
	return strings.HasPrefix(name, session+"/") && path.Clean(name) == name && !strings.Contains(name, "..")
}

// restore writes the saved files into the box's project directory. Files
// are written by the box's agent, so they belong to the box user.
func (sf *files) restore(ctx context.Context, box *sandbox.Sandbox, dir string) error {
	for name, f := range sf.byName {
		p := path.Join(dir, name)
		if err := box.WriteFile(ctx, p, f.data, 0o600); err != nil {
			return fmt.Errorf("claudecode agent: restoring the transcript into the box: %w", err)
		}
	}
	return nil
}

// refresh brings the copy up to date with the session's files in the box
// dir. It reads only what changed: the transcript's new tail (checking the
// 4 KiB before it still match), other files whole when their size or time
// changed. A missing transcript (no turn has run) leaves the copy as it is.
func (sf *files) refresh(ctx context.Context, box *sandbox.Sandbox, dir, session string, maxBytes int64) error {
	main := session + ".jsonl"
	fi, err := box.Stat(ctx, path.Join(dir, main))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the transcript's size: %w", err)
	}
	seen := map[string]bool{main: true}
	if err := sf.refreshFile(ctx, box, dir, main, fi, true, maxBytes); err != nil {
		return err
	}
	var walk func(rel string, depth int) error
	walk = func(rel string, depth int) error {
		if depth > 8 {
			return nil
		}
		entries, err := box.ReadDir(ctx, path.Join(dir, rel))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, e := range entries {
			name := path.Join(rel, e.Name)
			switch {
			case e.IsDir():
				if err := walk(name, depth+1); err != nil {
					return err
				}
			case e.Mode.IsRegular():
				seen[name] = true
				if err := sf.refreshFile(ctx, box, dir, name, e, false, maxBytes); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(session, 0); err != nil {
		return fmt.Errorf("reading the session's files: %w", err)
	}
	for name, f := range sf.byName {
		if !seen[name] {
			sf.total -= int64(len(f.data))
			delete(sf.byName, name)
			sf.packed = nil
		}
	}
	return nil
}

func (sf *files) refreshFile(ctx context.Context, box *sandbox.Sandbox, dir, name string, fi sandbox.FileInfo, appendOnly bool, maxBytes int64) error {
	old := sf.byName[name]
	if old != nil && int64(len(old.data)) == fi.Size && old.modTime.Equal(fi.ModTime) {
		return nil
	}
	var oldLen int64
	if old != nil {
		oldLen = int64(len(old.data))
	}
	if sf.total-oldLen+fi.Size > maxBytes {
		return fmt.Errorf("the session's files in the box are over %d bytes (MaxStateBytes), too big to keep across suspension; raise the limit or start a new session", maxBytes)
	}
	p := path.Join(dir, name)
	var data []byte
	if appendOnly && old != nil && fi.Size >= oldLen {
		// Read from 4 KiB before the old end: if that overlap still
		// matches, the file only grew.
		from := max(oldLen-4096, 0)
		tailData, err := readRange(ctx, box, p, from, fi.Size-from)
		if err != nil {
			return err
		}
		if bytes.HasPrefix(tailData, old.data[from:]) {
			data = append(old.data[:oldLen:oldLen], tailData[oldLen-from:]...)
		}
	}
	if data == nil {
		var err error
		if data, err = box.ReadFile(ctx, p); err != nil {
			return err
		}
	}
	sf.total += int64(len(data)) - oldLen
	sf.byName[name] = &file{data: data, modTime: fi.ModTime}
	sf.packed = nil
	return nil
}

// readRange reads length bytes at offset, in the chunks ReadAt allows.
func readRange(ctx context.Context, box *sandbox.Sandbox, p string, offset, length int64) ([]byte, error) {
	const chunk = 4 << 20
	out := make([]byte, 0, length)
	for int64(len(out)) < length {
		n := min(length-int64(len(out)), chunk)
		b, _, err := box.ReadAt(ctx, p, offset+int64(len(out)), n)
		if err != nil {
			return nil, err
		}
		if len(b) == 0 {
			break
		}
		out = append(out, b...)
	}
	return out, nil
}
