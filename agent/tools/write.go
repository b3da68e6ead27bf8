package tools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
)

type writeInput struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

var writeTool = &builtin[writeInput]{
	name: "write",
	description: `Write a file in the workspace, replacing it if it exists; missing parent directories are created.
To change part of an existing file prefer edit. Overwriting an existing file requires having read it in this session (so nothing you have not seen is lost), and it must not have changed since.
Files inside .git cannot be written.`,
	schema: schema(
		field{name: "path", typ: "string", required: true, desc: "The file to write: absolute (under the workspace) or relative to the working directory."},
		field{name: "content", typ: "string", required: true, desc: "The whole new content of the file."},
	),
	run: runWrite,
}

func (in *writeInput) validate(env *Env) string {
	if int64(len(in.Content)) > env.Limits().MaxFileBytes {
		return fmt.Sprintf("content is %d bytes, over the %d byte limit for write; write large or generated files with a command (bash) instead", len(in.Content), env.Limits().MaxFileBytes)
	}
	return ""
}

func runWrite(ctx context.Context, env *Env, in *writeInput) Result {
	p, denied := env.resolve(ctx, in.Path, accessWrite)
	if denied != nil {
		return *denied
	}
	fi, err := env.sb.Stat(ctx, p)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fileError(ctx, "stat", p, err)
	}
	mode := fs.FileMode(0o644)
	if exists {
		if fi.IsDir() {
			return errorf("%s is a directory; give the path of a file inside it.", p)
		}
		if !fi.Mode.IsRegular() {
			return errorf("%s is not a regular file (%s); write only replaces regular files.", p, fi.Mode.Type())
		}
		if r := checkFresh(env, p, fi, "overwrite"); r != nil {
			return *r
		}
		mode = fi.Mode.Perm()
	}
	if err := env.sb.WriteFile(ctx, p, []byte(in.Content), mode); err != nil {
		return fileError(ctx, "writing", p, err)
	}
	after, err := env.sb.Stat(ctx, p)
	if err == nil {
		env.remember(p, after)
	}
	lines := strings.Count(in.Content, "\n")
	if in.Content != "" && !strings.HasSuffix(in.Content, "\n") {
		lines++
	}
	msg := fmt.Sprintf("Created %s: wrote %d bytes, %d lines.", p, len(in.Content), lines)
	if exists {
		msg = fmt.Sprintf("Overwrote %s (it had %d bytes): wrote %d bytes, %d lines.", p, fi.Size, len(in.Content), lines)
	}
	return Result{Output: msg, Paths: []string{p}}
}

// checkFresh refuses to replace a file the model has not read in this
// session, or that changed since it did (unless the policy allows it).
func checkFresh(env *Env, p string, fi sandbox.FileInfo, verb string) *Result {
	if env.Policy().OverwriteUnread {
		return nil
	}
	seen, ok := env.lastSeen(p)
	if !ok {
		r := errorf("%s already exists and you have not read it in this session: read it first, then %s it (or use edit to change part of it).", p, verb)
		return &r
	}
	if seen.size != fi.Size || !seen.modTime.Equal(fi.ModTime) {
		r := errorf("%s changed since you last read it (now %d bytes, modified %s): read it again before you %s it.",
			p, fi.Size, fi.ModTime.UTC().Format(time.RFC3339), verb)
		return &r
	}
	return nil
}
