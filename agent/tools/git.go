package tools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
)

// The git tools run git inside the box, never on the host: the repository is
// agent-written, and its config, hooks and attributes could run commands.
// Even inside the box they disable what could run code on a read
// (core.fsmonitor, hooks, external diff and textconv drivers), never prompt,
// and take no optional locks (so git status does not rewrite the index while
// the agent works).

// gitTimeout bounds one git command.
const gitTimeout = time.Minute

var gitConfig = []string{
	"-c", "core.fsmonitor=",
	"-c", "core.hooksPath=/dev/null",
	"-c", "core.quotePath=false",
	"-c", "color.ui=false",
	"-c", "core.pager=cat",
	"-c", "diff.external=",
	"-c", "safe.directory=*",
}

var gitEnv = []string{"GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0", "GIT_PAGER=cat", "GIT_ASKPASS=", "SSH_ASKPASS="}

type gitStatusInput struct {
	Path string `json:"path"`
}

var gitStatusTool = &builtin[gitStatusInput]{
	name:        "git_status",
	description: `Show the state of the git repository containing path (default: the working directory): the branch, and changed, staged and untracked files in short format (XY PATH: X is the index, Y the work tree; ?? untracked). Paths are relative to the repository root, which the result names.`,
	schema: schema(
		field{name: "path", typ: "string", desc: "A directory or file in the repository; limits the status to it when given. Default: the working directory."},
	),
	readOnly: true,
	run: func(ctx context.Context, env *Env, in *gitStatusInput) Result {
		g, r := openRepo(ctx, env, in.Path)
		if r != nil {
			return *r
		}
		out, r := g.run(ctx, env, []string{"status", "--short", "--branch", "--untracked-files=normal"}, false)
		if r != nil {
			return *r
		}
		text, cut := out.String()
		lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
		body := text
		if len(lines) <= 1 {
			body = strings.TrimRight(text, "\n") + "\nnothing to commit, working tree clean\n"
		}
		return Result{Output: g.header() + body + g.cutNote(cut, "Limit it with path."), Truncated: cut}
	},
}

type gitDiffInput struct {
	Staged bool   `json:"staged"`
	Path   string `json:"path"`
	Ref    string `json:"ref"`
	Stat   bool   `json:"stat"`
}

var gitDiffTool = &builtin[gitDiffInput]{
	name: "git_diff",
	description: `Show changes in the git repository containing path (default: the working directory) as a unified diff: by default the work tree against the index (unstaged changes); staged: true for the index against HEAD (what would be committed); ref to compare the work tree with a commit or branch instead. stat: true for a summary of changed files and line counts. Untracked files are not in diffs (see git_status).
Long diffs are cut at 30,000 bytes; use stat or path to narrow.`,
	schema: schema(
		field{name: "staged", typ: "boolean", desc: "Show staged changes (index vs HEAD). Default false."},
		field{name: "path", typ: "string", desc: "Limit the diff to this file or directory."},
		field{name: "ref", typ: "string", desc: "A commit, branch or tag to compare against (e.g. HEAD~1, main)."},
		field{name: "stat", typ: "boolean", desc: "Show only a summary (files and line counts). Default false."},
	),
	readOnly: true,
	run: func(ctx context.Context, env *Env, in *gitDiffInput) Result {
		if in.Ref != "" && !validRef(in.Ref) {
			return errorf("ref %q is not a commit, branch or tag name (it may not start with - or contain spaces).", in.Ref)
		}
		g, r := openRepo(ctx, env, in.Path)
		if r != nil {
			return *r
		}
		args := []string{"diff", "--no-ext-diff", "--no-textconv"}
		if in.Staged {
			args = append(args, "--cached")
		}
		if in.Stat {
			args = append(args, "--stat")
		}
		if in.Ref != "" {
			args = append(args, in.Ref)
		}
		out, r := g.run(ctx, env, args, true)
		if r != nil {
			return *r
		}
		text, cut := out.String()
		if text == "" {
			what := "unstaged changes (work tree vs index)"
			switch {
			case in.Ref != "":
				what = "differences between the work tree and " + in.Ref
			case in.Staged:
				what = "staged changes (index vs HEAD)"
			}
			hint := ""
			if !in.Staged && in.Ref == "" {
				hint = " Staged changes show with staged: true; untracked files show in git_status."
			}
			return Result{Output: g.header() + "No " + what + "." + hint}
		}
		return Result{Output: g.header() + text + g.cutNote(cut, "Use stat: true for an overview, or path to narrow the diff."), Truncated: cut}
	},
}

type gitLogInput struct {
	N    int    `json:"n"`
	Path string `json:"path"`
}

// defaultGitLog is git_log's n when the model gives none.
const defaultGitLog = 20

var gitLogTool = &builtin[gitLogInput]{
	name:        "git_log",
	description: `Show recent commits of the git repository containing path (default: the working directory), newest first, one line each: short hash, date, author, subject. n is how many (default 20, at most 200); path limits the log to commits touching it.`,
	schema: schema(
		field{name: "n", typ: "integer", min: ptr(1), desc: "How many commits. Default 20, at most 200."},
		field{name: "path", typ: "string", desc: "Only commits that touch this file or directory."},
	),
	readOnly: true,
	run: func(ctx context.Context, env *Env, in *gitLogInput) Result {
		n := in.N
		if n <= 0 {
			n = defaultGitLog
		}
		if max := env.Limits().GitLogMax; n > max {
			return errorf("n is %d; at most %d commits can be listed at once.", n, max)
		}
		g, r := openRepo(ctx, env, in.Path)
		if r != nil {
			return *r
		}
		out, r := g.run(ctx, env, []string{"log", fmt.Sprintf("-n%d", n), "--date=short", "--format=%h %ad %an: %s"}, true)
		if r != nil {
			if strings.Contains(r.Output, "does not have any commits yet") {
				return Result{Output: g.header() + "No commits yet."}
			}
			return *r
		}
		text, cut := out.String()
		if text == "" {
			return Result{Output: g.header() + "No commits touch that path."}
		}
		return Result{Output: g.header() + text + g.cutNote(cut, "Ask for fewer commits."), Truncated: cut}
	},
}

// repo is a git repository found in the box, and the path the model named.
type repo struct {
	top      string // the work tree's root
	pathspec string // "" for the whole repository
}

func (g repo) header() string {
	if g.pathspec != "" {
		return fmt.Sprintf("[repository %s, limited to %s]\n", g.top, g.pathspec)
	}
	return fmt.Sprintf("[repository %s]\n", g.top)
}

func (g repo) cutNote(cut bool, hint string) string {
	if !cut {
		return ""
	}
	return "\n[output cut to fit the output cap. " + hint + "]"
}

// openRepo finds the repository containing the model's path (resolved and
// checked like any file tool's path).
func openRepo(ctx context.Context, env *Env, p string) (repo, *Result) {
	target := env.Workdir()
	if p != "" {
		real, denied := env.resolve(ctx, p, accessRead)
		if denied != nil {
			return repo{}, denied
		}
		target = real
	}
	fi, err := env.sb.Stat(ctx, target)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			r := errorf("%s does not exist.", target)
			return repo{}, &r
		}
		r := fileError(ctx, "stat", target, err)
		return repo{}, &r
	}
	dir := target
	if !fi.IsDir() {
		dir = path.Dir(target)
	}
	out := newHeadTail(4096)
	errOut := newHeadTail(4096)
	st, res := runGitCmd(ctx, env, dir, []string{"rev-parse", "--show-toplevel"}, out, errOut)
	if res != nil {
		return repo{}, res
	}
	stderr, _ := errOut.String()
	if !st.Success() {
		if strings.Contains(stderr, "not a git repository") {
			r := errorf("%s is not inside a git repository (git found no .git in it or any directory above it). Repositories are checked out under %s/NAME; give a path inside one, or run git init with bash to create one.", dir, env.Root())
			return repo{}, &r
		}
		r := errorf("git rev-parse failed in %s (%s): %s", dir, st, strings.TrimSpace(stderr))
		return repo{}, &r
	}
	top, _ := out.String()
	top = strings.TrimSpace(top)
	if top == "" {
		r := errorf("%s is inside a git directory, not a work tree; give a path in the repository's files.", dir)
		return repo{}, &r
	}
	g := repo{top: top}
	if p != "" && target != top {
		g.pathspec = target
	}
	return g, nil
}

// run runs git with args in the repository. headOnly keeps the beginning of
// long output (a diff's start), else its beginning and end.
func (g repo) run(ctx context.Context, env *Env, args []string, headOnly bool) (*headTail, *Result) {
	max := env.Limits().MaxOutputBytes
	out := newHeadTail(max)
	if headOnly {
		out = &headTail{headCap: max}
	}
	errOut := newHeadTail(4096)
	if g.pathspec != "" {
		args = append(args, "--", g.pathspec)
	}
	st, res := runGitCmd(ctx, env, g.top, args, out, errOut)
	if res != nil {
		return nil, res
	}
	if !st.Success() {
		stderr, _ := errOut.String()
		r := errorf("git %s failed (%s): %s", args[0], st, strings.TrimSpace(stderr))
		return nil, &r
	}
	return out, nil
}

func runGitCmd(ctx context.Context, env *Env, dir string, args []string, stdout, stderr *headTail) (sandbox.ExitStatus, *Result) {
	cmd := &sandbox.Cmd{
		Args:        append(append([]string{"git"}, gitConfig...), args...),
		Env:         gitEnv,
		Dir:         dir,
		Stdout:      stdout,
		Stderr:      stderr,
		Timeout:     gitTimeout,
		OutputLimit: env.Limits().BashTransferBytes,
	}
	st, err := env.sb.Run(ctx, cmd)
	if err != nil {
		if ctx.Err() != nil {
			r := errorf("git %s was cancelled.", args[0])
			return st, &r
		}
		if errors.Is(err, fs.ErrNotExist) {
			r := errorf("git is not installed in this sandbox, so the git tools cannot work here.")
			return st, &r
		}
		r := errorf("running git %s failed: %v", args[0], err)
		return st, &r
	}
	if st.TimedOut {
		r := errorf("git %s took longer than %s and was stopped.", args[0], gitTimeout)
		return st, &r
	}
	return st, nil
}

// validRef accepts what git accepts as a revision and nothing that could
// be read as an option.
func validRef(s string) bool {
	if s == "" || strings.HasPrefix(s, "-") || len(s) > 200 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._/~^@{}:-+", c)) {
			return false
		}
	}
	return true
}
