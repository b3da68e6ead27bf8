package tools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/harvest-dev/harvest/sandbox"
)

// Mode is the permission mode.
type Mode string

const (
	// ModeDefault runs every tool the policy allows.
	ModeDefault Mode = "default"
	// ModePlan runs read-only tools only: the agent investigates and plans.
	ModePlan Mode = "plan"
)

func (m Mode) validate() error {
	switch m {
	case "", ModeDefault, ModePlan:
		return nil
	}
	return fmt.Errorf("tools: permission mode %q: use %q or %q", m, ModeDefault, ModePlan)
}

// Action is what a bash rule does with a command it matches.
type Action string

const (
	Allow Action = "allow"
	Deny  Action = "deny"
)

// BashRule is one bash permission, in the style of seed 004's
// permissions.bash: a glob on the command and an action.
//
// Pattern syntax: "*" matches any run of characters (spaces and slashes
// included), "?" any one character, "\" makes the next character literal
// ("\*" is a star); everything else matches itself. A pattern must match a
// whole command; one ending in " *" also matches the command without
// arguments ("git push *" matches "git push").
type BashRule struct {
	Pattern string
	Action  Action
	// Source says where the rule came from ("agent fixer.md line 12"); denials
	// quote it.
	Source string
}

func (r BashRule) String() string {
	if r.Source != "" {
		return fmt.Sprintf("%q (%s; from %s)", r.Pattern, r.Action, r.Source)
	}
	return fmt.Sprintf("%q (%s)", r.Pattern, r.Action)
}

// Policy is what the tools may do, checked before every run.
//
// Paths: file tools (read, write, edit, glob, grep, the git tools, bash's
// workdir) act only below the workspace root and AllowPaths, judged on the
// path after cleaning ("..") AND after resolving symlinks inside the box, so
// a symlink in the workspace cannot lead a write (or a read) outside it.
// write and edit also refuse paths inside a .git directory.
//
// Bash: every rule is tried against every simple command in the command
// line (see bashrules.go); deny wins over allow whatever the order. When no
// rule matches, BashDefault decides (allow unless set to deny). The rules are
// a guard rail against an agent's mistakes, not a security boundary: a shell
// can always spell a command in a way no pattern foresees, and the sandbox is
// what confines the agent.
//
// Mode: in plan mode only read-only tools run.
type Policy struct {
	Mode Mode
	// AllowExternal lets file tools touch any path in the box (seed 004's
	// external_directory: allow). Default: deny.
	AllowExternal bool
	// AllowPaths are extra absolute directories file tools may touch.
	AllowPaths []string
	// Bash are the bash rules, in order.
	Bash []BashRule
	// BashDefault applies when no rule matches: Allow (the default) or Deny.
	BashDefault Action
	// OverwriteUnread lets write replace an existing file the model has not
	// read in this session. Default: refused, so the model never clobbers
	// content it has not seen.
	OverwriteUnread bool
}

// DefaultPolicy is the policy the builtin agent starts from: the workspace
// only, DefaultBashRules, default mode.
func DefaultPolicy() Policy {
	return Policy{Mode: ModeDefault, Bash: DefaultBashRules()}
}

// DefaultBashRules deny wiping the root, the workspace root or the working
// directory with rm. They are deliberately few: seed 004's defaults denied
// every recursive rm, which stops an agent from cleaning a build directory;
// the sandbox confines the agent, the workspace is a git checkout, and these
// rules only catch the slips that would destroy the whole workspace. Any
// recursive rm is matched as "rm -rf TARGET" (see bashrules.go), so "rm -fr
// ./" is caught by "rm -rf .".
func DefaultBashRules() []BashRule {
	var out []BashRule
	for _, t := range []string{"/", `/\*`, sandbox.WorkspaceRoot, sandbox.WorkspaceRoot + `/\*`, ".", `\*`, "..", `../\*`, "~", `~/\*`} {
		out = append(out, BashRule{Pattern: "rm -rf " + t, Action: Deny, Source: "Harvest default"})
	}
	return out
}

// Validate checks the policy's fields.
func (p Policy) Validate() error {
	if err := p.Mode.validate(); err != nil {
		return err
	}
	for _, a := range p.AllowPaths {
		if !path.IsAbs(a) {
			return fmt.Errorf("tools: allowed path %q is not absolute", a)
		}
	}
	switch p.BashDefault {
	case "", Allow, Deny:
	default:
		return fmt.Errorf("tools: bash default %q: use allow or deny", p.BashDefault)
	}
	for _, r := range p.Bash {
		if strings.TrimSpace(r.Pattern) == "" {
			return fmt.Errorf("tools: bash rule %s has an empty pattern", r)
		}
		if r.Action != Allow && r.Action != Deny {
			return fmt.Errorf("tools: bash rule %s: the action must be allow or deny", r)
		}
	}
	return nil
}

func (p Policy) clone() Policy {
	p.AllowPaths = slices.Clone(p.AllowPaths)
	p.Bash = slices.Clone(p.Bash)
	return p
}

// within reports whether p is one of roots or below one.
func within(p string, roots []string) bool {
	for _, r := range roots {
		if r == "/" || p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// lexicalRoots are the workspace root and the allowed paths, cleaned. They
// are fixed when the Env is made (only the mode changes afterwards).
func (e *Env) lexicalRoots() []string { return e.roots }

func (e *Env) allowedText() string {
	roots := e.lexicalRoots()
	if len(roots) == 1 {
		return "the workspace (" + roots[0] + ")"
	}
	return "the workspace (" + roots[0] + ") and " + strings.Join(roots[1:], ", ")
}

// realRoots are the allowed roots with symlinks resolved in the box, so that
// resolved paths can be compared with them.
func (e *Env) realRoots(ctx context.Context) ([]string, error) {
	e.mu.Lock()
	if e.resolved {
		r := e.allowed
		e.mu.Unlock()
		return r, nil
	}
	e.mu.Unlock()
	var out []string
	for _, r := range e.lexicalRoots() {
		real, _, err := e.realpath(ctx, r, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, real)
	}
	e.mu.Lock()
	e.allowed, e.resolved = out, true
	e.mu.Unlock()
	return out, nil
}

// access is what a tool does with a path.
type access int

const (
	accessRead access = iota
	accessWrite
)

// resolve turns the model's path into the absolute path in the box the tool
// acts on, after the policy checks: inside the allowed roots before and after
// resolving symlinks, and for writes not inside .git. A denial or a failure
// comes back as a Result for the model.
func (e *Env) resolve(ctx context.Context, p string, acc access) (string, *Result) {
	if p == "" {
		r := errorf("the path is empty: give an absolute path (under %s) or one relative to %s.", e.root, e.workdir)
		return "", &r
	}
	if strings.IndexByte(p, 0) >= 0 {
		r := errorf("the path contains a NUL byte.")
		return "", &r
	}
	abs := e.abs(p)
	pol := e.Policy()
	if !pol.AllowExternal && !within(abs, e.lexicalRoots()) {
		r := deniedf("%s is outside %s; file tools may only touch paths there. Use a path inside the workspace (relative paths start at %s).",
			abs, e.allowedText(), e.workdir)
		return "", &r
	}
	var roots []string
	if !pol.AllowExternal {
		var err error
		if roots, err = e.realRoots(ctx); err != nil {
			r := errorf("could not check %s: %v", abs, err)
			return "", &r
		}
	}
	var via []string
	real, via, err := e.realpath(ctx, abs, via)
	if err != nil {
		r := errorf("could not resolve %s: %v", abs, err)
		return "", &r
	}
	if !pol.AllowExternal && !within(real, roots) {
		r := deniedf("%s leads outside %s through the symlink %s; it resolves to %s. Tools may not act through symlinks that leave the workspace: use the real path inside the workspace, or none.",
			abs, e.allowedText(), strings.Join(via, ", then "), real)
		return "", &r
	}
	if acc == accessWrite {
		for _, q := range []string{abs, real} {
			if inGitDir(q) {
				r := deniedf("refusing to write %s: it is inside a .git directory, which only git itself should change. Use git commands (bash) to change the repository's state.", q)
				return "", &r
			}
		}
	}
	return real, nil
}

func inGitDir(p string) bool {
	return slices.Contains(strings.Split(p, "/"), ".git")
}

// maxSymlinks is how many symlinks one path may pass through, as in Linux.
const maxSymlinks = 40

// realpath resolves symlinks in the absolute, clean path p inside the box,
// one component at a time with Lstat (the box's view, never the host's).
// Components that do not exist yet are kept as written, so a path to a file
// about to be created resolves too. via collects "link -> target" for the
// symlinks passed through.
func (e *Env) realpath(ctx context.Context, p string, via []string) (string, []string, error) {
	rest := strings.Split(strings.TrimPrefix(p, "/"), "/")
	cur := "/"
	links := 0
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		if name == "" || name == "." {
			continue
		}
		if name == ".." {
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, name)
		fi, err := e.sb.Lstat(ctx, next)
		if errors.Is(err, fs.ErrNotExist) {
			return path.Join(append([]string{next}, rest...)...), via, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return "", via, ctx.Err()
			}
			return "", via, err
		}
		if fi.Mode&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxSymlinks {
			return "", via, fmt.Errorf("more than %d symlinks in %s (a loop?)", maxSymlinks, p)
		}
		via = append(via, next+" -> "+fi.Link)
		target := fi.Link
		if path.IsAbs(target) {
			cur = "/"
		}
		rest = append(strings.Split(strings.Trim(target, "/"), "/"), rest...)
	}
	return cur, via, nil
}
