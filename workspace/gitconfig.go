package workspace

import (
	"bytes"
	"path"
	"regexp"
	"strings"
)

// A copied repository must leave its source's credentials behind (seed 002:
// no remotes, no keys). A developer's .git/config often carries them: a
// remote URL with a token in it (https://user:TOKEN@host/...), an
// http.extraHeader with a bearer token, a credential helper, an include of a
// file in their home. The copy's git metadata is rewritten as it is copied,
// by parsing the file here: git itself is never run on a source (its config
// could run code on the host).
//
// What a sanitized config keeps and drops:
//
//   - dropped whole: [remote], [credential], [http], [url] (insteadOf
//     rewrites carry tokens), [include], [includeIf], [lfs], and every
//     comment (a comment can hold anything);
//   - dropped keys: core.hooksPath, core.fsmonitor, core.sshCommand,
//     core.askPass, core.gitProxy, core.worktree, core.excludesFile,
//     core.attributesFile (they run or name host programs and files),
//     any *.extraHeader, and any key whose name says it holds a secret
//     (password, pass, token, secret);
//   - in every value kept, a URL's userinfo (user:password@) is removed;
//   - everything else is kept as written: core.bare, extensions.*, user.*,
//     branch.* (a branch's upstream then names a remote the copy does not
//     have, as after `git remote remove`), submodule.*, and so on.
//
// Reflogs and FETCH_HEAD (which can record a fetched URL) have URL userinfo
// removed line by line.

// gitMetaKind says how a file inside a copied tree is treated.
type gitMetaKind int

const (
	notGitMeta gitMetaKind = iota
	gitConfigFile
	gitLogFile // reflogs, FETCH_HEAD: scrub URL userinfo
)

// classifyGitMeta tells from a path relative to the copy's root whether it
// is git metadata with credentials to strip: a repository's config (also a
// submodule's under .git/modules, a worktree's config.worktree, a bare
// repository's top-level config), its reflogs or FETCH_HEAD.
func classifyGitMeta(rel string, bare bool) gitMetaKind {
	rel = path.Clean(strings.ReplaceAll(rel, "\\", "/"))
	if bare && (rel == "config" || rel == "FETCH_HEAD" || strings.HasPrefix(rel, "logs/")) {
		if rel == "config" {
			return gitConfigFile
		}
		return gitLogFile
	}
	i := strings.LastIndex("/"+rel, "/.git/")
	if i < 0 {
		return notGitMeta
	}
	inside := rel[i+len(".git/"):] // the path inside the .git directory
	// Submodules' own git directories: .git/modules/a/b/config.
	if rest, ok := strings.CutPrefix(inside, "modules/"); ok {
		switch {
		case strings.HasSuffix(rest, "/config"):
			return gitConfigFile
		case strings.HasSuffix(rest, "/FETCH_HEAD"), strings.Contains(rest, "/logs/"):
			return gitLogFile
		}
		return notGitMeta
	}
	switch {
	case inside == "config", inside == "config.worktree":
		return gitConfigFile
	case strings.HasPrefix(inside, "worktrees/") && strings.HasSuffix(inside, "/config.worktree"):
		return gitConfigFile
	case inside == "FETCH_HEAD", strings.HasPrefix(inside, "logs/"):
		return gitLogFile
	}
	return notGitMeta
}

var userinfoPattern = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s"'\\]+@`)

// scrubUserinfo removes the userinfo of every URL in b.
func scrubUserinfo(b []byte) []byte {
	return userinfoPattern.ReplaceAll(b, []byte("$1"))
}

var droppedSections = map[string]bool{
	"remote": true, "credential": true, "http": true, "url": true,
	"include": true, "includeif": true, "lfs": true,
}

var droppedCoreKeys = map[string]bool{
	"hookspath": true, "fsmonitor": true, "sshcommand": true, "askpass": true,
	"gitproxy": true, "worktree": true, "excludesfile": true, "attributesfile": true,
}

var secretKey = regexp.MustCompile(`(?i)pass|token|secret|extraheader`)

func keepKey(section, key string) bool {
	if droppedSections[section] {
		return false
	}
	if section == "core" && droppedCoreKeys[key] {
		return false
	}
	return !secretKey.MatchString(key)
}

// SanitizeGitConfig returns a git config file (git-config(1) syntax) without
// what carries or reaches credentials (see the comment above). Lines it
// cannot parse are dropped: a copy loses a setting rather than keep a
// secret.
func SanitizeGitConfig(in []byte) []byte {
	var out bytes.Buffer
	section, sub := "", ""
	headerOut := false // the current section's header is written
	lines := strings.Split(strings.ReplaceAll(string(in), "\r\n", "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimLeft(lines[i], " \t")
		if strings.HasPrefix(line, "[") {
			name, s, rest, ok := parseSectionHeader(line)
			if !ok {
				section, sub, headerOut = "\x00bad", "", false // drop until a good header
				continue
			}
			section, sub, headerOut = name, s, false
			line = strings.TrimLeft(rest, " \t")
		}
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		// A key line, maybe continued over the next lines.
		entry := line
		for continues(entry) && i+1 < len(lines) {
			i++
			entry += "\n" + lines[i]
		}
		key := keyName(entry)
		if key == "" || section == "" || section == "\x00bad" || !keepKey(section, key) {
			continue
		}
		if !headerOut {
			writeSectionHeader(&out, section, sub)
			headerOut = true
		}
		out.WriteString("\t")
		out.Write(scrubUserinfo([]byte(stripComment(entry))))
		out.WriteString("\n")
	}
	return out.Bytes()
}

// parseSectionHeader reads `[name]`, `[name "sub"]` or `[name.sub]` at the
// start of line; rest is what follows the closing bracket.
func parseSectionHeader(line string) (name, sub, rest string, ok bool) {
	j := 1
	for j < len(line) && (isAlnum(line[j]) || line[j] == '-' || line[j] == '.') {
		j++
	}
	name = line[1:j]
	if name == "" {
		return "", "", "", false
	}
	if j < len(line) && line[j] == ']' {
		// [name] or the old [name.sub] (sub lower-cased by git).
		if k := strings.IndexByte(name, '.'); k >= 0 {
			name, sub = name[:k], strings.ToLower(name[k+1:])
		}
		return strings.ToLower(name), sub, line[j+1:], true
	}
	if strings.Contains(name, ".") {
		return "", "", "", false
	}
	for j < len(line) && (line[j] == ' ' || line[j] == '\t') {
		j++
	}
	if j >= len(line) || line[j] != '"' {
		return "", "", "", false
	}
	var b strings.Builder
	for j++; j < len(line); j++ {
		c := line[j]
		switch {
		case c == '\\' && j+1 < len(line):
			j++
			b.WriteByte(line[j])
		case c == '"':
			if j+1 < len(line) && line[j+1] == ']' {
				return strings.ToLower(name), b.String(), line[j+2:], true
			}
			return "", "", "", false
		default:
			b.WriteByte(c)
		}
	}
	return "", "", "", false
}

func writeSectionHeader(out *bytes.Buffer, name, sub string) {
	if sub == "" {
		out.WriteString("[" + name + "]\n")
		return
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	out.WriteString("[" + name + ` "` + r.Replace(sub) + "\"]\n")
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// keyName is the lower-cased name of a key line, "" if it is not one.
func keyName(entry string) string {
	j := 0
	for j < len(entry) && (isAlnum(entry[j]) || entry[j] == '-') {
		j++
	}
	if j == 0 || !(entry[0] >= 'a' && entry[0] <= 'z' || entry[0] >= 'A' && entry[0] <= 'Z') {
		return ""
	}
	rest := strings.TrimLeft(entry[j:], " \t")
	if rest != "" && rest[0] != '=' && rest[0] != '#' && rest[0] != ';' {
		return ""
	}
	return strings.ToLower(entry[:j])
}

// scanValue walks a key line's value: it returns where an unquoted comment
// starts (or -1) and whether the line ends in a continuation backslash.
func scanValue(line string) (comment int, cont bool) {
	quoted := false
	for j := 0; j < len(line); j++ {
		switch c := line[j]; {
		case c == '\\':
			if j == len(line)-1 {
				return -1, true
			}
			j++
		case c == '"':
			quoted = !quoted
		case (c == '#' || c == ';') && !quoted:
			return j, false
		}
	}
	return -1, false
}

// continues reports whether the last physical line of entry continues on
// the next one.
func continues(entry string) bool {
	last := entry[strings.LastIndexByte(entry, '\n')+1:]
	_, cont := scanValue(last)
	return cont
}

// stripComment removes a trailing comment from an entry's last line.
func stripComment(entry string) string {
	k := strings.LastIndexByte(entry, '\n') + 1
	if c, _ := scanValue(entry[k:]); c >= 0 {
		return strings.TrimRight(entry[:k+c], " \t")
	}
	return entry
}
