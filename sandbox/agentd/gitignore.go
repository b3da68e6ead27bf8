package agentd

import (
	"bufio"
	"bytes"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// ignoreRule is one line of a .gitignore, per gitignore(5).
type ignoreRule struct {
	pattern  string // doublestar pattern, no leading "/" and no trailing "/"
	negate   bool   // "!pattern" re-includes
	dirOnly  bool   // "pattern/" matches directories only
	anchored bool   // contains a "/" before the end: relative to the file's dir
}

func parseIgnore(data []byte) []ignoreRule {
	var rules []ignoreRule
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		// Trailing spaces are ignored unless escaped with a backslash.
		for strings.HasSuffix(line, " ") && !strings.HasSuffix(line, `\ `) {
			line = line[:len(line)-1]
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var r ignoreRule
		if strings.HasPrefix(line, "!") {
			r.negate = true
			line = line[1:]
		} else if strings.HasPrefix(line, `\!`) || strings.HasPrefix(line, `\#`) {
			line = line[1:]
		}
		line = strings.ReplaceAll(line, `\ `, " ")
		if strings.HasSuffix(line, "/") {
			r.dirOnly = true
			line = strings.TrimRight(line, "/")
		}
		if strings.Contains(line, "/") {
			r.anchored = true
			line = strings.TrimPrefix(line, "/")
		}
		if line == "" {
			continue
		}
		r.pattern = line
		rules = append(rules, r)
	}
	return rules
}

func (r ignoreRule) match(rel string, isDir bool) bool {
	if r.dirOnly && !isDir {
		return false
	}
	if r.anchored {
		// git's "dir/**" matches everything inside dir but not dir itself;
		// doublestar's trailing "**" also matches the empty rest.
		if strings.HasSuffix(r.pattern, "/**") && rel == strings.TrimSuffix(r.pattern, "/**") {
			return false
		}
		ok, _ := doublestar.Match(r.pattern, rel)
		return ok
	}
	ok, _ := doublestar.Match(r.pattern, path.Base(rel))
	return ok
}

// ignorer answers "is this path ignored?" for a walk, loading .gitignore files
// as the walk reaches their directories. Rules are kept relative to the
// repository's root (the nearest directory at or above the walk's start that
// holds .git), so a walk that starts in a subdirectory still obeys the
// .gitignore files above it, as git does.
type ignorer struct {
	base   string                  // the repository root (or the walk's start outside a repository)
	prefix string                  // the walk's start relative to base; "" when it is base
	rules  map[string][]ignoreRule // by directory, relative to base ("." for it)
}

func newIgnorer(start string) *ignorer {
	base := repoRoot(start)
	ig := &ignorer{base: base, rules: map[string][]ignoreRule{}}
	if b, err := os.ReadFile(path.Join(base, ".git", "info", "exclude")); err == nil {
		ig.rules["."] = parseIgnore(b)
	}
	rel, err := filepath.Rel(base, start)
	if err != nil || rel == "." {
		rel = ""
	}
	ig.prefix = filepath.ToSlash(rel)
	ig.enter(".")
	if ig.prefix != "" {
		parts := strings.Split(ig.prefix, "/")
		for i := 1; i <= len(parts); i++ {
			ig.enter(strings.Join(parts[:i], "/"))
		}
	}
	return ig
}

// repoRoot returns the nearest directory at or above dir that holds .git, or
// dir itself.
func repoRoot(dir string) string {
	for d := dir; ; {
		if _, err := os.Lstat(path.Join(d, ".git")); err == nil {
			return d
		}
		parent := path.Dir(d)
		if parent == d {
			return dir
		}
		d = parent
	}
}

// fromWalk turns a path relative to the walk's start into one relative to
// the repository root.
func (ig *ignorer) fromWalk(rel string) string {
	if ig.prefix == "" {
		return rel
	}
	return ig.prefix + "/" + rel
}

// enter loads dir's .gitignore (dir is relative to the repository root).
func (ig *ignorer) enter(dir string) {
	b, err := os.ReadFile(path.Join(ig.base, dir, ".gitignore"))
	if err != nil {
		return
	}
	ig.rules[dir] = append(ig.rules[dir], parseIgnore(b)...)
}

// ignored applies the rules of every directory above rel, outermost first;
// the last rule that matches decides.
func (ig *ignorer) ignored(rel string, isDir bool) bool {
	if path.Base(rel) == ".git" {
		return true
	}
	ignored := false
	dirs := []string{"."}
	parts := strings.Split(rel, "/")
	for i := 1; i < len(parts); i++ {
		dirs = append(dirs, strings.Join(parts[:i], "/"))
	}
	for _, d := range dirs {
		rules := ig.rules[d]
		if len(rules) == 0 {
			continue
		}
		sub := rel
		if d != "." {
			sub = strings.TrimPrefix(rel, d+"/")
		}
		for _, r := range rules {
			if r.match(sub, isDir) {
				ignored = !r.negate
			}
		}
	}
	return ignored
}
