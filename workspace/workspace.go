// Package workspace makes the private copy of a repository that a sandbox
// works on.
//
// A local directory is copied as it is — working tree, uncommitted changes,
// untracked files and .git — so the agent starts from exactly what the user
// sees. A URL is cloned. Either way the copy is Harvest's: the user's
// checkout is never written, and the copy is owned by the box user.
//
// Security: the copy is made without running anything from the source. Git
// is never run on a local source (its config could name an fsmonitor, a
// filter or a diff driver that runs code, and a directory a previous agent
// wrote is as untrusted as the agent), so a local copy is a plain file copy.
// A URL is cloned with git into a fresh directory, isolated from the host's
// git setup and bounded in time (git.go). After the copy the directory
// belongs to the box: host code must not run git in it again.
//
// A copy leaves the source's credentials behind: its git config is
// rewritten without remotes, credential helpers, extra headers, includes
// and the like (gitconfig.go).
//
// Which sources a server's users may name is the server's Policy
// (policy.go); Parse, for a local user (harvest run), takes any directory.
package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Owner is who the copy belongs to: the box user. A zero Owner leaves files
// owned by the caller.
type Owner struct{ UID, GID int }

// Stats describes a copy.
type Stats struct {
	Files, Dirs, Symlinks int
	Bytes                 int64
	// Skipped counts special files (sockets, fifos, devices) not copied.
	Skipped int
}

// Source is where a repository comes from: a local directory or a git URL.
type Source struct {
	Path string // a local directory (absolute), or
	URL  string // a git URL
}

// protocols are what a clone of s.URL may use (GIT_ALLOW_PROTOCOL): its own
// scheme only (http may be redirected to https), so a redirect or a
// submodule cannot switch to another transport.
func (s Source) protocols() []string {
	scheme, _, ok := strings.Cut(s.URL, "://")
	if !ok {
		return []string{"ssh"} // user@host:path
	}
	switch scheme = strings.ToLower(scheme); scheme {
	case "http":
		return []string{"http", "https"}
	case "ssh", "git+ssh", "ssh+git":
		return []string{"ssh"}
	}
	return []string{scheme}
}

var urlPattern = regexp.MustCompile(`^(https?|ssh|git|file)://|^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:`)

// IsURL reports whether arg names a git URL rather than a directory.
func IsURL(arg string) bool { return urlPattern.MatchString(arg) }

// Parse reads a --repo argument: a URL (https://, ssh://, git://, file://, or
// user@host:path) or a local directory, which must exist.
func Parse(arg string) (Source, error) {
	if strings.TrimSpace(arg) == "" {
		return Source{}, errors.New("empty repository: give a directory or a git URL")
	}
	if urlPattern.MatchString(arg) {
		return Source{URL: arg}, nil
	}
	abs, err := filepath.Abs(arg)
	if err != nil {
		return Source{}, err
	}
	fi, err := os.Stat(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return Source{}, fmt.Errorf("repository %s does not exist: give an existing directory or a git URL", arg)
	}
	if err != nil {
		return Source{}, fmt.Errorf("repository %s: %w", arg, err)
	}
	if !fi.IsDir() {
		return Source{}, fmt.Errorf("repository %s is not a directory", arg)
	}
	return Source{Path: abs}, nil
}

// Name is the workspace name for the source: the directory's or the
// repository's base name, made safe for /workspace/NAME.
func (s Source) Name() string {
	base := s.Path
	if s.URL != "" {
		base = strings.TrimSuffix(strings.TrimRight(s.URL, "/"), ".git")
		if i := strings.LastIndexAny(base, "/:"); i >= 0 {
			base = base[i+1:]
		}
	} else {
		base = filepath.Base(base)
	}
	name := regexp.MustCompile(`[^A-Za-z0-9._-]+`).ReplaceAllString(base, "-")
	name = strings.Trim(name, ".-")
	if name == "" {
		name = "repo"
	}
	if len(name) > 64 {
		name = name[:64]
	}
	return name
}

func (s Source) String() string {
	if s.URL != "" {
		return s.URL
	}
	return s.Path
}

// Prepare makes dst (which must not exist) a copy of the source owned by
// owner, without the source's credentials (see gitconfig.go). A URL is
// cloned within opts' bounds.
func Prepare(ctx context.Context, src Source, dst string, owner Owner, opts CloneOptions) (Stats, error) {
	if src.URL != "" {
		if err := clone(ctx, src, dst, opts); err != nil {
			return Stats{}, err
		}
		if err := sanitizeClone(dst); err != nil {
			os.RemoveAll(dst)
			return Stats{}, err
		}
		return Stats{}, chownTree(dst, owner)
	}
	return Copy(ctx, src.Path, dst, owner)
}

// sanitizeClone strips credentials from a fresh clone's config (a URL with
// a token in it becomes its origin's URL).
func sanitizeClone(dst string) error {
	p := filepath.Join(dst, ".git", "config")
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("reading the clone's git config: %w", err)
	}
	if err := os.WriteFile(p, SanitizeGitConfig(b), 0o644); err != nil {
		return fmt.Errorf("writing the clone's git config: %w", err)
	}
	return nil
}

// Copy copies the directory tree src to dst (which must not exist), without
// following symlinks: links are copied as links, to be resolved in the box.
// Regular files keep their permission bits (set-id bits dropped); special
// files are skipped and counted. Every entry is owned by owner. Git
// metadata is copied without credentials (gitconfig.go).
func Copy(ctx context.Context, src, dst string, owner Owner) (Stats, error) {
	var st Stats
	src, dst = filepath.Clean(src), filepath.Clean(dst)
	if rel, err := filepath.Rel(src, dst); err == nil && !strings.HasPrefix(rel, "..") {
		return st, fmt.Errorf("cannot copy %s into itself (%s)", src, dst)
	}
	if _, err := os.Lstat(dst); err == nil {
		return st, fmt.Errorf("%s already exists", dst)
	}
	bare := isBareRepo(src)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch mode := fi.Mode(); {
		case mode.IsDir():
			if err := os.Mkdir(target, mode.Perm()|0o700); err != nil {
				return err
			}
			st.Dirs++
		case mode&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
			st.Symlinks++
		case mode.IsRegular():
			n, err := copyFile(p, target, mode.Perm(), classifyGitMeta(rel, bare))
			if err != nil {
				return err
			}
			st.Files++
			st.Bytes += n
		default:
			st.Skipped++
			return nil
		}
		if owner != (Owner{}) {
			if err := os.Lchown(target, owner.UID, owner.GID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		os.RemoveAll(dst)
		return Stats{}, fmt.Errorf("copying %s: %w", src, err)
	}
	return st, nil
}

// isBareRepo reports whether dir looks like a bare git repository (its
// top-level config is then git's).
func isBareRepo(dir string) bool {
	for _, name := range []string{"HEAD", "config", "objects", "refs"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
			return false
		}
	}
	_, err := os.Lstat(filepath.Join(dir, ".git"))
	return err != nil
}

// maxGitMeta bounds a git metadata file rewritten in memory.
const maxGitMeta = 64 << 20

func copyFile(src, dst string, perm fs.FileMode, kind gitMetaKind) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm&0o777)
	if err != nil {
		return 0, err
	}
	var n int64
	if kind != notGitMeta {
		var b []byte
		b, err = io.ReadAll(io.LimitReader(in, maxGitMeta+1))
		switch {
		case err != nil:
		case len(b) > maxGitMeta:
			err = fmt.Errorf("%s is over %d MiB: too big for git metadata", src, maxGitMeta>>20)
		case kind == gitConfigFile:
			b = SanitizeGitConfig(b)
		default:
			b = scrubUserinfo(b)
		}
		if err == nil {
			var w int
			w, err = out.Write(b)
			n = int64(w)
		}
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		return n, err
	}
	n, err = io.Copy(out, in) // copy_file_range on Linux
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}

func chownTree(root string, owner Owner) error {
	if owner == (Owner{}) {
		return nil
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, owner.UID, owner.GID)
	})
}
