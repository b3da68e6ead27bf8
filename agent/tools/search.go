package tools

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/harvest-dev/harvest/sandbox"
)

type globInput struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path"`
}

var globTool = &builtin[globInput]{
	name: "glob",
	description: `Find files by name with a glob pattern ("**/*.go", "src/**/*.{ts,tsx}", "*.md"), relative to path (default: the working directory). Returns absolute paths, sorted; files and directories that .gitignore excludes, and .git itself, are skipped.
At most 200 paths are returned; narrow the pattern or path when the result says it was cut.`,
	schema: schema(
		field{name: "pattern", typ: "string", required: true, desc: "A glob: * matches within a path component, ** across components, {a,b} alternatives."},
		field{name: "path", typ: "string", desc: "The directory to search from. Default: the working directory."},
	),
	readOnly: true,
	run:      runGlob,
}

func (in *globInput) validate(*Env) string {
	if strings.TrimSpace(in.Pattern) == "" {
		return "pattern is empty; for every file use \"**/*\""
	}
	if !doublestar.ValidatePattern(in.Pattern) {
		return fmt.Sprintf("pattern %q is not a valid glob (check brackets and braces)", in.Pattern)
	}
	if slices.Contains(strings.Split(in.Pattern, "/"), "..") {
		return "pattern may not contain \"..\"; set path to the directory to search instead"
	}
	return ""
}

func runGlob(ctx context.Context, env *Env, in *globInput) Result {
	root := in.Path
	if root == "" {
		root = env.Workdir()
	}
	pattern := strings.TrimPrefix(in.Pattern, "./")
	if path.IsAbs(pattern) {
		// An absolute pattern: its literal directory becomes the root.
		base, rest := doublestar.SplitPattern(pattern)
		root, pattern = base, rest
	}
	dir, denied := env.resolve(ctx, root, accessRead)
	if denied != nil {
		return *denied
	}
	if r := requireDir(ctx, env, dir, in.Path); r != nil {
		return *r
	}
	limit := env.Limits().GlobResults
	paths, truncated, err := env.sb.Glob(ctx, pattern, sandbox.GlobOptions{Root: dir, GitIgnore: true, Limit: limit})
	if err != nil {
		return searchError(ctx, "glob", err)
	}
	if len(paths) == 0 {
		return Result{Output: fmt.Sprintf("No files match %q under %s (files .gitignore excludes are skipped).", pattern, dir)}
	}
	out, cut := capLines(paths, env.Limits().MaxOutputBytes, "Narrow the pattern or path.")
	if truncated && !cut {
		out += fmt.Sprintf("\n[... more paths match; only the first %d are shown. Narrow the pattern or path.]", limit)
	}
	return Result{Output: out, Truncated: truncated || cut}
}

type grepInput struct {
	Pattern    string `json:"pattern"`
	Path       string `json:"path"`
	Include    string `json:"include"`
	IgnoreCase bool   `json:"ignore_case"`
	Literal    bool   `json:"literal"`
	OutputMode string `json:"output_mode"`
}

var grepTool = &builtin[grepInput]{
	name: "grep",
	description: `Search file contents with a regular expression (Go RE2 syntax: no lookaround or backreferences; escape literal braces and dots, or set literal) under path (a directory or one file; default: the working directory). Files .gitignore excludes, .git, binary files and files over 4 MiB are skipped.
output_mode "content" (default) lists matching lines with line numbers, grouped by file; "files" lists only the files that match.
include limits the search to files whose name matches a glob ("*.go", "*.{ts,tsx}", or "src/**/*.py" for a path).
At most 200 lines (or files) are returned and long lines are clipped; narrow the search when the result says it was cut.`,
	schema: schema(
		field{name: "pattern", typ: "string", required: true, desc: "The regular expression (or text, with literal) to search for."},
		field{name: "path", typ: "string", desc: "A directory or file to search. Default: the working directory."},
		field{name: "include", typ: "string", desc: "Only search files matching this glob."},
		field{name: "ignore_case", typ: "boolean", desc: "Match case-insensitively. Default false."},
		field{name: "literal", typ: "boolean", desc: "Treat pattern as plain text, not a regular expression. Default false."},
		field{name: "output_mode", typ: "string", enum: []string{"content", "files"}, desc: `"content" (default): matching lines; "files": matching file paths only.`},
	),
	readOnly: true,
	run:      runGrep,
}

func (in *grepInput) validate(*Env) string {
	if in.Pattern == "" {
		return "pattern is empty"
	}
	if !in.Literal {
		if _, err := regexp.Compile(in.Pattern); err != nil {
			return fmt.Sprintf("pattern is not a valid RE2 regular expression (%v); escape special characters or set literal: true", err)
		}
	}
	if in.Include != "" && !doublestar.ValidatePattern(in.Include) {
		return fmt.Sprintf("include %q is not a valid glob", in.Include)
	}
	return ""
}

// grepFilesScan is how many matching lines grep collects in files mode,
// where only distinct files are shown.
const grepFilesScan = 20000

func runGrep(ctx context.Context, env *Env, in *grepInput) Result {
	root := in.Path
	if root == "" {
		root = env.Workdir()
	}
	p, denied := env.resolve(ctx, root, accessRead)
	if denied != nil {
		return *denied
	}
	if _, r := statExisting(ctx, env, p, root); r != nil {
		return *r
	}
	lim := env.Limits()
	filesMode := in.OutputMode == "files"
	max := lim.GrepResults + 1
	if filesMode {
		max = grepFilesScan
	}
	res, err := env.sb.Grep(ctx, sandbox.GrepOptions{
		Root: p, Pattern: in.Pattern, Include: in.Include, IgnoreCase: in.IgnoreCase,
		Literal: in.Literal, GitIgnore: true, MaxResults: max,
	})
	if err != nil {
		return searchError(ctx, "grep", err)
	}
	if len(res.Matches) == 0 {
		return Result{Output: fmt.Sprintf("No matches for %q under %s (%d files searched; .gitignore'd, binary and files over 4 MiB are skipped).", in.Pattern, p, res.FilesScanned)}
	}
	if filesMode {
		var files []string
		for _, m := range res.Matches {
			if len(files) == 0 || files[len(files)-1] != m.Path {
				files = append(files, m.Path)
			}
		}
		cut := len(files) > lim.GrepResults
		if cut {
			files = files[:lim.GrepResults]
		}
		out, capped := capLines(files, lim.MaxOutputBytes, "Narrow the search with path or include.")
		if cut || (res.Truncated && !capped) {
			out += fmt.Sprintf("\n[... more files match; the first %d are shown. Narrow the search with path or include.]", len(files))
		}
		return Result{Output: out, Truncated: cut || capped || res.Truncated}
	}
	matches := res.Matches
	cut := len(matches) > lim.GrepResults || res.Truncated
	if len(matches) > lim.GrepResults {
		matches = matches[:lim.GrepResults]
	}
	var lines []string
	for i, m := range matches {
		if i == 0 || matches[i-1].Path != m.Path {
			if i > 0 {
				lines = append(lines, "")
			}
			lines = append(lines, m.Path)
		}
		lines = append(lines, fmt.Sprintf("%6d: %s", m.Line, clean(m.Text)))
	}
	out, capped := capLines(lines, lim.MaxOutputBytes, "Narrow the search with path, include or a more specific pattern.")
	if cut && !capped {
		out += fmt.Sprintf("\n[... more lines match; the first %d are shown. Narrow the search with path, include or a more specific pattern, or use output_mode \"files\".]", len(matches))
	}
	return Result{Output: out, Truncated: cut || capped}
}

func requireDir(ctx context.Context, env *Env, dir, asGiven string) *Result {
	fi, r := statExisting(ctx, env, dir, asGiven)
	if r != nil {
		return r
	}
	if !fi.IsDir() {
		r := errorf("%s is a file, not a directory; give a directory as path.", dir)
		return &r
	}
	return nil
}

func searchError(ctx context.Context, op string, err error) Result {
	if ctx.Err() != nil {
		return errorf("%s was cancelled.", op)
	}
	return errorf("%s failed: %v", op, err)
}
