package agentd

import (
	"bufio"
	"bytes"
	"os"
	"path"
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

// ignorer answers "is this path ignored?" for a tree, loading .gitignore files
// as the walk reaches their directories.
type ignorer struct {
	rules map[string][]ignoreRule // by directory, relative to the walk root ("." for it)
}

func newIgnorer(root string) *ignorer {
	ig := &ignorer{rules: map[string][]ignoreRule{}}
	// A repository's own exclude file applies from its root.
	if b, err := os.ReadFile(path.Join(root, ".git", "info", "exclude")); err == nil {
		ig.rules["."] = parseIgnore(b)
	}
	return ig
}

// enter loads dir's .gitignore (dir is relative to the root).
func (ig *ignorer) enter(root, dir string) {
	b, err := os.ReadFile(path.Join(root, dir, ".gitignore"))
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
