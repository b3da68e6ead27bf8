package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Which sources a server's sessions may name is the server's policy, never
// the caller's choice: an API token that could name any host path could
// read every file the server can (/etc/shadow, another tenant's workspace,
// the server's own database).
//
// The rules, for a path source (a directory on the server):
//
//   - it must be absolute (the server's working directory means nothing
//     to a caller), exist and be a directory; it is resolved (symlinks
//     followed, ".." cleaned) before anything else is checked;
//   - never copyable, whoever asks: /proc, /sys, /dev, and the directories
//     Policy.Never names (the server's data directory, which holds every
//     session's workspace, its database and its tokens) — neither anything
//     inside them nor a directory that contains one of them (/);
//   - a user's (untrusted) path must resolve inside one of Policy.Roots;
//     with no roots, user tokens may not name paths at all. The admin token
//     may name any other directory.
//
// For a git URL: a user's must be https:// or http:// (no ssh, whose
// options have been a way to run commands; no file://, git://, ext::) to a
// host in Policy.GitHosts (none by default), with no credentials in it.
// The admin may also use ssh://, git://, user@host:path and file:// (the
// path of a file:// URL follows the path rules). A clone may use its URL's
// protocol only (GIT_ALLOW_PROTOCOL), so a redirect or a submodule cannot
// switch to another, and follows no redirect at all: GitHosts allows a
// host by name, and a redirect would lead the server's clone to one
// nobody allowed (a metadata address, a private host). The name itself is
// resolved by the host's DNS: an operator who lists a host trusts it.
//
// A path is checked when a session is created (a 400 at once) and again
// just before it is copied (CheckCopy), since the copy happens after the
// create returns.
//
// A refusal tells a user token nothing about the host: whether a path
// outside the roots exists, is a file, or where a symlink points would be
// an oracle on the server's file system (is there a /root/.ssh? where does
// /proc/self/exe lead?). So every directory a user may not copy — outside
// the roots, missing, not a directory, a symlink leading out of the roots
// or into a never-copy directory — gets one answer, which echoes only what
// the caller sent and names only the roots. The admin gets the detailed
// reasons.
//
// A source is a single token: control characters (a newline, a tab, a
// NUL) are refused everywhere, and a URL may hold no whitespace at all
// (`https://h/x.git --upload-pack=...` is an attempt at an option, not a
// URL). A path may contain spaces (directories do), not at its ends.
type Policy struct {
	// Roots are the directories user tokens may copy from (resolved).
	Roots []string
	// given are Roots as the operator named them (cleaned, not
	// resolved): a user's path under either is looked at.
	given []string
	// GitHosts are the hosts user tokens may clone from: names, compared
	// case-insensitively, or "*.example.com" for its subdomains.
	GitHosts []string
	// Never are directories no source may be in or contain (resolved),
	// besides /proc, /sys and /dev.
	Never []string
}

// alwaysNever are the kernel's file systems: never a repository.
var alwaysNever = []string{"/proc", "/sys", "/dev"}

// NewPolicy checks and resolves a server's roots, git hosts and never-copy
// directories.
func NewPolicy(roots, gitHosts, never []string) (*Policy, error) {
	p := &Policy{}
	for _, r := range roots {
		if !filepath.IsAbs(r) {
			return nil, fmt.Errorf("repository root %q: give an absolute path", r)
		}
		res, err := filepath.EvalSymlinks(r)
		if err != nil {
			return nil, fmt.Errorf("repository root %s: %w (create it, or drop it from the roots)", r, err)
		}
		if fi, err := os.Stat(res); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("repository root %s is not a directory", r)
		}
		p.Roots = append(p.Roots, res)
		p.given = append(p.given, filepath.Clean(r))
	}
	for _, n := range never {
		res, err := filepath.EvalSymlinks(n)
		if err != nil {
			res = filepath.Clean(n) // not there yet: guard the name
		}
		p.Never = append(p.Never, res)
	}
	for _, h := range gitHosts {
		h = strings.ToLower(strings.TrimSpace(h))
		name := strings.TrimPrefix(h, "*.")
		if name == "" || strings.ContainsAny(name, "/:@ *") {
			return nil, fmt.Errorf("git host %q: give a host name like github.com or *.example.com (no scheme, port or path)", h)
		}
		p.GitHosts = append(p.GitHosts, h)
	}
	for _, r := range p.Roots {
		for _, n := range append(slices.Clone(alwaysNever), p.Never...) {
			if within(r, n) {
				return nil, fmt.Errorf("repository root %s is inside %s, which sessions may never copy", r, n)
			}
		}
	}
	return p, nil
}

// Resolve reads a session's repository source under the policy. trusted is
// the admin. The Source it returns names the resolved directory (or the
// URL).
func (p *Policy) Resolve(arg string, trusted bool) (Source, error) {
	if strings.TrimSpace(arg) == "" {
		return Source{}, errors.New("empty: give a directory on the server or a git URL (or, instead of source, github: owner/name)")
	}
	if err := checkToken(arg); err != nil {
		return Source{}, err
	}
	if urlPattern.MatchString(arg) {
		return p.resolveURL(arg, trusted)
	}
	if !filepath.IsAbs(arg) {
		return Source{}, fmt.Errorf("%q is a relative path: give an absolute path%s", arg, p.rootsHint(trusted))
	}
	if !trusted && len(p.Roots) == 0 {
		return Source{}, errors.New("this server takes no directories from user tokens (it has no --repo-root): give a git URL, or ask its admin for a repository root")
	}
	if !trusted {
		// Nothing is looked at outside the roots, and every refusal is
		// the same (see the package doc): the answer depends on the
		// argument and the roots only.
		refused := fmt.Errorf("%s is not a directory this server copies for you: give an existing repository directory under %s", arg, strings.Join(p.Roots, " or "))
		if clean := filepath.Clean(arg); !p.inRoots(clean) && !slices.ContainsFunc(p.given, func(r string) bool { return within(clean, r) }) {
			return Source{}, refused
		}
		res, err := p.resolvePath(arg)
		if err != nil || !p.inRoots(res) {
			return Source{}, refused
		}
		return Source{Path: res}, nil
	}
	res, err := p.resolvePath(arg)
	if err != nil {
		return Source{}, err
	}
	return Source{Path: res}, nil
}

// checkToken refuses a source that is not one token: control characters
// anywhere, whitespace in a URL or at a path's ends.
func checkToken(arg string) error {
	for _, r := range arg {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return fmt.Errorf("%q contains a control character or invalid UTF-8: give one directory or URL, nothing around it", arg)
		}
	}
	if strings.TrimSpace(arg) != arg {
		return fmt.Errorf("%q begins or ends with whitespace: give the directory or URL alone", arg)
	}
	if urlPattern.MatchString(arg) && strings.IndexFunc(arg, unicode.IsSpace) >= 0 {
		return fmt.Errorf("%q contains whitespace, which a git URL never holds (percent-encode a space as %%20): give the URL alone, with no options after it", arg)
	}
	return nil
}

// CheckCopy checks, just before a copy, that path (a Source.Path Resolve
// returned) still resolves to itself and is copyable.
func (p *Policy) CheckCopy(path string) error {
	res, err := p.resolvePath(path)
	if err != nil || res != path {
		// Said without where it leads now: the session's owner may be a
		// user token (see the package doc).
		return fmt.Errorf("%s is no longer the directory the session was created on (it was removed, or a symlink on its path changed): create the session again", path)
	}
	return nil
}

// resolvePath resolves an absolute path and checks it exists, is a
// directory and is nowhere near a never-copy directory.
func (p *Policy) resolvePath(arg string) (string, error) {
	res, err := filepath.EvalSymlinks(filepath.Clean(arg))
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%s does not exist on the server: give an existing directory", arg)
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", arg, err)
	}
	if err := p.never(res); err != nil {
		return "", fmt.Errorf("%s: %w", describeResolved(arg, res), err)
	}
	fi, err := os.Stat(res)
	if err != nil {
		return "", fmt.Errorf("%s: %w", arg, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory: give a repository's directory", describeResolved(arg, res))
	}
	return res, nil
}

// never refuses a resolved path inside, or containing, a never-copy
// directory.
func (p *Policy) never(res string) error {
	for _, n := range append(slices.Clone(alwaysNever), p.Never...) {
		switch {
		case within(res, n):
			return fmt.Errorf("it is inside %s, which sessions may never copy", n)
		case within(n, res):
			return fmt.Errorf("it contains %s, which sessions may never copy", n)
		}
	}
	return nil
}

func (p *Policy) inRoots(res string) bool {
	return slices.ContainsFunc(p.Roots, func(r string) bool { return within(res, r) })
}

func (p *Policy) rootsHint(trusted bool) string {
	if !trusted && len(p.Roots) > 0 {
		return " under " + strings.Join(p.Roots, " or ")
	}
	return " of a directory on the server"
}

func (p *Policy) resolveURL(arg string, trusted bool) (Source, error) {
	if !strings.Contains(arg, "://") {
		// user@host:path, git's scp-like ssh syntax.
		if !trusted {
			return Source{}, fmt.Errorf("%s is an ssh address: user tokens may clone https:// (or http://) URLs only", arg)
		}
		return Source{URL: arg}, nil
	}
	u, err := url.Parse(arg)
	if err != nil {
		return Source{}, fmt.Errorf("%q is not a valid URL: %v", arg, err)
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme == "file" {
		if !trusted {
			return Source{}, errors.New("file:// URLs are not accepted from user tokens: give an https:// URL")
		}
		if _, err := p.resolvePath(u.Path); err != nil {
			return Source{}, err
		}
		return Source{URL: arg}, nil
	}
	if u.Host == "" || strings.HasPrefix(u.Hostname(), "-") {
		return Source{}, fmt.Errorf("%q has no valid host", arg)
	}
	if trusted {
		return Source{URL: arg}, nil
	}
	if scheme != "https" && scheme != "http" {
		return Source{}, fmt.Errorf("%s: user tokens may clone https:// (or http://) URLs only, not %s://", arg, scheme)
	}
	if u.User != nil {
		return Source{}, errors.New("the URL has credentials in it: remove them (a session's git credentials come from the server, never from a URL)")
	}
	host := strings.ToLower(u.Hostname())
	if !p.gitHostAllowed(host) {
		if len(p.GitHosts) == 0 {
			return Source{}, fmt.Errorf("host %s: this server clones no git URLs for user tokens (it has no --git-host); ask its admin to allow the host", host)
		}
		return Source{}, fmt.Errorf("host %s is not one this server clones from (%s)", host, strings.Join(p.GitHosts, ", "))
	}
	return Source{URL: arg}, nil
}

func (p *Policy) gitHostAllowed(host string) bool {
	if net.ParseIP(host) == nil {
		host = strings.TrimSuffix(host, ".")
	}
	for _, h := range p.GitHosts {
		if h == host {
			return true
		}
		if d, ok := strings.CutPrefix(h, "*"); ok && strings.HasSuffix(host, d) {
			return true
		}
	}
	return false
}

// within reports whether path is dir or inside it (both clean, absolute).
func within(path, dir string) bool {
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}

func describeResolved(arg, res string) string {
	if filepath.Clean(arg) == res {
		return arg
	}
	return fmt.Sprintf("%s (which is %s)", arg, res)
}
