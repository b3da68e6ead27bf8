package workspace

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
)

// A session's changes are read with git run in the box, like Track: the
// workspace's .git is the agent's to write (its config, its hooks, its
// attributes), so git never runs on it on the host. What the box's git
// prints is data, bounded on the way out (DiffLimits), never trusted.

// EmptyTree is git's empty tree: the base of a repository that had no
// commit when the session started (every file is added).
const EmptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

// DiffLimits bound what Diff reads of a workspace's changes.
type DiffLimits struct {
	// FilePatch is the most of one file's patch kept; a longer one is cut
	// at a line and marked Truncated.
	FilePatch int
	// TotalPatch is the most patch text read in all; files past it keep
	// their stats and status but no patch, and are marked Truncated.
	TotalPatch int
	// Files is the most files listed (tracked and untracked each).
	Files int
}

// DefaultDiffLimits are the API's.
var DefaultDiffLimits = DiffLimits{FilePatch: 256 << 10, TotalPatch: 4 << 20, Files: 2000}

// FileChange is one changed file.
type FileChange struct {
	Path    string
	OldPath string // a rename's or copy's source
	// Status is added, modified, deleted, renamed, copied, typechange or
	// untracked (a new file git does not track yet).
	Status               string
	Additions, Deletions int
	Binary               bool
	// Patch is the unified diff of the file (its "diff --git" header
	// included); empty for a binary file or one past the limits.
	Patch     string
	Truncated bool
}

// Changes is a workspace's difference from a base commit: the working tree
// (committed or not) against the base, and the untracked files.
type Changes struct {
	Base  string
	Files []FileChange
	// Truncated: files or patch text were left out (DiffLimits).
	Truncated bool
}

// Diff reads the changes of the workspace at dir (a path in box) since
// base (a commit; EmptyTree for a repository that had none).
func Diff(ctx context.Context, box *sandbox.Sandbox, dir, base string, lim DiffLimits) (*Changes, error) {
	if !isRev(base) {
		return nil, fmt.Errorf("diff base %q: not a commit id", base)
	}
	git := func(out int, args ...string) ([]byte, bool, error) {
		return runGit(ctx, box, dir, out, args...)
	}
	common := []string{"--no-optional-locks", "-c", "core.quotepath=off", "-c", "diff.noprefix=false", "diff", "--no-color", "--no-ext-diff", "--no-textconv", "-M"}
	names, cut1, err := git(lim.TotalPatch, append(common, "--name-status", "-z", base, "--")...)
	if err != nil {
		return nil, err
	}
	stats, cut2, err := git(lim.TotalPatch, append(common, "--numstat", "-z", base, "--")...)
	if err != nil {
		return nil, err
	}
	files, err := parseNameStatus(names)
	if err != nil {
		return nil, err
	}
	applyNumstat(files, stats)
	c := &Changes{Base: base, Truncated: cut1 || cut2}
	if len(files) > lim.Files {
		files, c.Truncated = files[:lim.Files], true
	}
	patch, cut, err := git(lim.TotalPatch, append(common, base, "--")...)
	if err != nil {
		return nil, err
	}
	c.Truncated = c.Truncated || cut
	attach(files, splitPatch(patch), cut, lim.FilePatch)

	others, cut, err := git(lim.TotalPatch, "--no-optional-locks", "-c", "core.quotepath=off", "ls-files", "-z", "--others", "--exclude-standard")
	if err != nil {
		return nil, err
	}
	var untracked []FileChange
	for p := range strings.SplitSeq(strings.TrimSuffix(string(others), "\x00"), "\x00") {
		if p != "" {
			untracked = append(untracked, FileChange{Path: p, Status: "untracked"})
		}
	}
	if cut || len(untracked) > lim.Files {
		untracked, c.Truncated = untracked[:min(len(untracked), lim.Files)], true
	}
	if len(untracked) > 0 {
		budget := max(lim.TotalPatch-len(patch), 0)
		args := []string{"sh", "-c", `for f do git --no-optional-locks -c core.quotepath=off diff --no-index --no-color --no-ext-diff --no-textconv -- /dev/null "$f"; done; exit 0`, "sh"}
		for _, f := range untracked {
			args = append(args, f.Path)
		}
		out, cut, err := runCmd(ctx, box, dir, budget, args)
		if err != nil {
			return nil, err
		}
		c.Truncated = c.Truncated || cut
		attach(untracked, splitPatch(out), cut, lim.FilePatch)
		for i := range untracked {
			f := &untracked[i]
			f.Additions, f.Binary = countAdded(f.Patch)
		}
	}
	c.Files = append(files, untracked...)
	for _, f := range c.Files {
		c.Truncated = c.Truncated || f.Truncated
	}
	return c, nil
}

// isRev: a hex commit id (what Diff is given: never an option or a range).
func isRev(s string) bool {
	if len(s) < 4 || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return false
		}
	}
	return true
}

// runGit runs git with args in dir in the box, keeping at most limit bytes
// of its output; cut reports output dropped.
func runGit(ctx context.Context, box *sandbox.Sandbox, dir string, limit int, args ...string) ([]byte, bool, error) {
	return runCmd(ctx, box, dir, limit, append([]string{"git"}, args...))
}

func runCmd(ctx context.Context, box *sandbox.Sandbox, dir string, limit int, args []string) ([]byte, bool, error) {
	var out, errb bytes.Buffer
	st, err := box.Run(ctx, &sandbox.Cmd{
		Args: args, Dir: dir, Stdout: &out, Stderr: &errb,
		Env:         []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "LC_ALL=C"},
		OutputLimit: int64(max(limit, 1)), Timeout: time.Minute,
	})
	if err != nil {
		return nil, false, fmt.Errorf("reading the changes of %s: %w", dir, err)
	}
	// git diff --no-index exits 1 when files differ; the loop exits 0.
	if !st.Success() && st.Dropped == 0 {
		return nil, false, fmt.Errorf("reading the changes of %s: %s failed (%s): %s", dir, strings.Join(args[:min(len(args), 2)], " "), st, strings.TrimSpace(clip(errb.String(), 500)))
	}
	return out.Bytes(), st.Dropped > 0, nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// parseNameStatus reads git diff --name-status -z: a status letter (with a
// score for renames and copies), then one path, or two for R and C.
func parseNameStatus(b []byte) ([]FileChange, error) {
	f := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	var out []FileChange
	for i := 0; i < len(f) && f[i] != ""; {
		st := f[i]
		i++
		var c FileChange
		switch st[0] {
		case 'A':
			c.Status = "added"
		case 'M':
			c.Status = "modified"
		case 'D':
			c.Status = "deleted"
		case 'T':
			c.Status = "typechange"
		case 'R', 'C':
			c.Status = map[byte]string{'R': "renamed", 'C': "copied"}[st[0]]
			if i >= len(f) {
				return out, nil // cut off
			}
			c.OldPath = f[i]
			i++
		default:
			c.Status = "modified"
		}
		if i >= len(f) {
			break
		}
		c.Path = f[i]
		i++
		out = append(out, c)
	}
	return out, nil
}

// applyNumstat adds git diff --numstat -z's counts to files, which are in
// the same order: "ADD\tDEL\tPATH\0", or "ADD\tDEL\t\0OLD\0NEW\0" for a
// rename; "-" counts for a binary file.
func applyNumstat(files []FileChange, b []byte) {
	f := strings.Split(string(b), "\x00")
	for i, k := 0, 0; i < len(f) && k < len(files); k++ {
		parts := strings.SplitN(f[i], "\t", 3)
		i++
		if len(parts) != 3 {
			return
		}
		if parts[2] == "" {
			i += 2 // a rename's two paths
		}
		if parts[0] == "-" {
			files[k].Binary = true
			continue
		}
		files[k].Additions, _ = strconv.Atoi(parts[0])
		files[k].Deletions, _ = strconv.Atoi(parts[1])
	}
}

// splitPatch cuts a patch into its files' parts at each "diff --git" line
// (which no content line can look like: those start with +, - or space).
func splitPatch(b []byte) []string {
	s := string(b)
	var out []string
	for s != "" {
		j := strings.Index(s[1:], "\ndiff --git ")
		if j < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:j+2])
		s = s[j+2:]
	}
	return out
}

// attach gives files their patches, in order; the last one read is cut
// short when the output was (cut), those after it have none.
func attach(files []FileChange, parts []string, cut bool, perFile int) {
	for i := range files {
		f := &files[i]
		if i >= len(parts) {
			f.Truncated = cut || f.Truncated
			continue
		}
		p := parts[i]
		if cut && i == len(parts)-1 {
			f.Truncated = true
		}
		if len(p) > perFile {
			p = p[:perFile]
			if j := strings.LastIndexByte(p, '\n'); j > 0 {
				p = p[:j+1]
			}
			f.Truncated = true
		}
		if strings.Contains(p, "\nBinary files ") || strings.Contains(p, "\nGIT binary patch") {
			f.Binary = true
		}
		f.Patch = p
	}
}

// countAdded counts the added lines of a patch of a new file.
func countAdded(p string) (int, bool) {
	n := 0
	for l := range strings.SplitSeq(p, "\n") {
		if strings.HasPrefix(l, "+") && !strings.HasPrefix(l, "+++ ") {
			n++
		}
	}
	return n, strings.Contains(p, "\nBinary files ")
}
