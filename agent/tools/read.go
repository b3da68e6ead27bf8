package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"github.com/harvest-dev/harvest/sandbox"
)

type readInput struct {
	Path   string `json:"path"`
	Offset int    `json:"offset"`
	Limit  int    `json:"limit"`
}

var readTool = &builtin[readInput]{
	name: "read",
	description: `Read a text file from the workspace. Lines come numbered like cat -n ("     1\t..."); the numbers are not part of the file.
By default up to 2000 lines from the start; use offset (first line, 1-based) and limit (number of lines) for other parts of long files. Long lines are clipped. Output is capped (64 KiB); when it is cut, the result says which offset to continue from.
Binary files are not shown; the result says what the file seems to be. Reading a directory lists it.
Read a file before you overwrite it with write.`,
	schema: schema(
		field{name: "path", typ: "string", required: true, desc: "The file to read: absolute (under the workspace) or relative to the working directory."},
		field{name: "offset", typ: "integer", min: ptr(1), desc: "The line number to start at (1-based). Default 1."},
		field{name: "limit", typ: "integer", min: ptr(1), desc: "How many lines to read. Default 2000."},
	),
	readOnly: true,
	run:      runRead,
}

// binarySniff is how much of a file decides whether it is binary: a NUL byte
// in it means binary, as for git and grep.
const binarySniff = 8000

func runRead(ctx context.Context, env *Env, in *readInput) Result {
	p, denied := env.resolve(ctx, in.Path, accessRead)
	if denied != nil {
		return *denied
	}
	fi, failed := statExisting(ctx, env, p, in.Path)
	if failed != nil {
		return *failed
	}
	if fi.IsDir() {
		return listDir(ctx, env, p)
	}
	if !fi.Mode.IsRegular() {
		return errorf("%s is not a regular file (%s); read only reads regular files.", p, fi.Mode.Type())
	}
	if fi.Size == 0 {
		env.remember(p, fi)
		return Result{Output: fmt.Sprintf("[%s is empty: 0 bytes]", p)}
	}
	lim := env.Limits()
	offset := max(in.Offset, 1)
	limit := in.Limit
	if limit <= 0 {
		limit = lim.ReadLines
	}

	var (
		out       strings.Builder
		lineNo    = 0    // lines completed so far
		cur       []byte // the current line (clipped)
		curLen    int    // its real length
		shown     = 0
		firstShow = 0
		pos       int64
		crlf      bool
		stopped   string // why output stopped
		more      bool   // lines remain after the ones shown
	)
	emit := func() bool {
		lineNo++
		if lineNo < offset {
			return true
		}
		line := bytes.TrimSuffix(cur, []byte{'\r'})
		if len(line) < len(cur) {
			crlf = true
		}
		text := clean(string(line))
		if curLen > lim.ReadLineBytes {
			text += fmt.Sprintf("… [line clipped: %d bytes]", curLen)
		}
		entry := fmt.Sprintf("%6d\t%s\n", lineNo, text)
		if out.Len()+len(entry) > lim.ReadMaxBytes && shown > 0 {
			stopped = fmt.Sprintf("output capped at %d bytes", lim.ReadMaxBytes)
			lineNo--
			return false
		}
		if shown == 0 {
			firstShow = lineNo
		}
		out.WriteString(entry)
		shown++
		if shown == limit {
			stopped = "limit reached"
			return false
		}
		return true
	}
	chunk := int64(256 << 10)
scan:
	for pos < fi.Size {
		if lineNo < offset-1 && pos >= lim.ReadScanBytes {
			return errorf("line %d of %s is beyond the first %d bytes, which is as far as read scans. Use bash to reach it, e.g. sed -n '%d,%dp' %s",
				offset, p, lim.ReadScanBytes, offset, offset+limit-1, shellQuote(p))
		}
		data, size, err := env.sb.ReadAt(ctx, p, pos, chunk)
		if err != nil {
			return fileError(ctx, "reading", p, err)
		}
		if pos == 0 && bytes.IndexByte(data[:min(len(data), binarySniff)], 0) >= 0 {
			return errorf("%s is a binary file (%d bytes, looks like %s); read only shows text. Inspect it with bash instead, e.g. file %s, or xxd %s | head.",
				p, size, http.DetectContentType(data), shellQuote(p), shellQuote(p))
		}
		if len(data) == 0 {
			break // the file shrank under us
		}
		pos += int64(len(data))
		chunk = 4 << 20
		for len(data) > 0 {
			i := bytes.IndexByte(data, '\n')
			part := data
			if i >= 0 {
				part = data[:i]
			}
			if room := lim.ReadLineBytes - len(cur); room > 0 {
				cur = append(cur, part[:min(room, len(part))]...)
			}
			curLen += len(part)
			if i < 0 {
				break
			}
			data = data[i+1:]
			if !emit() {
				more = stopped != "limit reached" || len(data) > 0 || pos < fi.Size
				break scan
			}
			cur, curLen = cur[:0], 0
		}
	}
	if stopped == "" && curLen > 0 {
		if !emit() && stopped != "limit reached" {
			more = true // a last line without a newline, over the cap
		}
	}
	env.remember(p, fi)
	if shown == 0 {
		return errorf("%s has %d lines; offset %d is past the end. Read from an offset up to %d.", p, lineNo, offset, max(lineNo, 1))
	}
	res := Result{Output: out.String()}
	last := firstShow + shown - 1
	var notes []string
	if more {
		res.Truncated = true
		notes = append(notes, fmt.Sprintf("showing lines %d-%d (%s); the file continues: read on with offset=%d", firstShow, last, stopped, last+1))
	}
	if crlf {
		notes = append(notes, "this file uses CRLF (\\r\\n) line endings; they are not shown")
	}
	if len(notes) > 0 {
		res.Output += "[" + strings.Join(notes, "; ") + "]\n"
	}
	return res
}

// statExisting stats p (already resolved). When it does not exist, the
// Result says so and suggests similar names from its directory.
func statExisting(ctx context.Context, env *Env, p, asGiven string) (sandbox.FileInfo, *Result) {
	fi, err := env.sb.Stat(ctx, p)
	if err == nil {
		return fi, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		r := fileError(ctx, "stat", p, err)
		return fi, &r
	}
	dir := path.Dir(p)
	entries, derr := env.sb.ReadDir(ctx, dir)
	if derr != nil {
		r := errorf("%s does not exist (nor does its directory %s). Use glob to find files.", p, dir)
		return fi, &r
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name)
	}
	msg := fmt.Sprintf("%s does not exist.", p)
	if asGiven != p && !path.IsAbs(asGiven) {
		msg += fmt.Sprintf(" (Relative paths start at %s.)", env.Workdir())
	}
	if sim := similarNames(path.Base(p), names, 3); len(sim) > 0 {
		for i := range sim {
			sim[i] = path.Join(dir, sim[i])
		}
		msg += " Did you mean " + strings.Join(sim, " or ") + "?"
	} else {
		msg += " Use glob to find files."
	}
	r := errorf("%s", msg)
	return fi, &r
}

// maxListing caps how many entries reading a directory lists.
const maxListing = 100

func listDir(ctx context.Context, env *Env, p string) Result {
	entries, err := env.sb.ReadDir(ctx, p)
	if err != nil {
		return fileError(ctx, "listing", p, err)
	}
	var names []string
	for _, e := range entries {
		n := e.Name
		switch {
		case e.IsDir():
			n += "/"
		case e.Mode&fs.ModeSymlink != 0:
			n += " -> " + e.Link
		}
		names = append(names, n)
	}
	msg := fmt.Sprintf("%s is a directory, not a file; it has %d entries", p, len(entries))
	if len(names) > maxListing {
		msg += fmt.Sprintf(" (the first %d shown)", maxListing)
		names = names[:maxListing]
	}
	msg += ":\n" + strings.Join(names, "\n") + "\nRead one of its files, or use glob to search it."
	return Result{Output: clean(msg), IsError: true}
}

// fileError turns a sandbox file error into a message for the model.
func fileError(ctx context.Context, op, p string, err error) Result {
	switch {
	case ctx.Err() != nil:
		return errorf("%s %s was cancelled.", op, p)
	case errors.Is(err, fs.ErrNotExist):
		return errorf("%s %s: it does not exist.", op, p)
	case errors.Is(err, fs.ErrPermission):
		return errorf("%s %s: permission denied (the sandbox user may not access it).", op, p)
	}
	return errorf("%s %s failed: %v", op, p, err)
}

// shellQuote quotes s for a POSIX shell when needed.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+:@%=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
