package workspace

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Mirrors keeps one bare mirror per remote repository on the host, so a
// session's checkout is a local clone (no network on the hot path) and
// only the mirror's fetch talks to the remote.
//
// A mirror is Harvest's own: made by Harvest, fetched with hooks, system
// and global config, credential helpers and prompts disabled, never
// checked out, and never handed to a box (a box gets a clone made with
// --no-hardlinks, so no inode is shared). So host git may run in it.
//
// Concurrency: one Sync or Checkout per mirror at a time (a mutex per
// mirror in this process, and an flock on DIR/KEY.lock against another
// process on the same data directory); different mirrors proceed in
// parallel.
type Mirrors struct {
	// Dir holds the mirrors: Dir/KEY.git.
	Dir string
	// Opts bound every fetch like a clone.
	Opts CloneOptions

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// Remote is a repository to mirror.
type Remote struct {
	// Key names the mirror under Dir: "github.com/owner/name".
	Key string
	// URL is the remote's http(s) URL, without credentials.
	URL string
	// Auth returns the credential added to the fetch (nil: none). It is
	// given to git as an HTTP header in its environment, never on a
	// command line or in a config file.
	Auth func(ctx context.Context) (user, password string, err error)
	// DefaultBranch, when known, becomes the mirror's HEAD.
	DefaultBranch string
	// Refs are further refs to fetch, each to the same name in the
	// mirror (a pull request's refs/pull/N/head: the only way to a
	// fork's commits). They are fetched with the branches and never
	// pruned by a later Sync without them.
	Refs []string
}

var mirrorKeyPattern = regexp.MustCompile(`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)

// Path is where r's mirror lives.
func (m *Mirrors) Path(key string) (string, error) {
	if !mirrorKeyPattern.MatchString(key) || strings.Contains(key, "..") {
		return "", fmt.Errorf("mirror key %q: want host/owner/name", key)
	}
	return filepath.Join(m.Dir, key+".git"), nil
}

// lock takes the mirror's locks; the returned func releases them.
func (m *Mirrors) lock(ctx context.Context, path string) (func(), error) {
	m.mu.Lock()
	if m.locks == nil {
		m.locks = map[string]*sync.Mutex{}
	}
	l := m.locks[path]
	if l == nil {
		l = &sync.Mutex{}
		m.locks[path] = l
	}
	m.mu.Unlock()
	l.Lock()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		l.Unlock()
		return nil, err
	}
	f, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		l.Unlock()
		return nil, err
	}
	// Another process on this data directory holds it only while it
	// fetches, itself bounded in time.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		l.Unlock()
		return nil, fmt.Errorf("locking mirror %s: %w", path, err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
		l.Unlock()
	}, ctx.Err()
}

// Sync brings r's mirror up to date with the remote (creating it on first
// use) and returns its path. Branches and tags are mirrored; deleted ones
// are pruned.
func (m *Mirrors) Sync(ctx context.Context, r Remote) (string, error) {
	path, err := m.Path(r.Key)
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(r.URL, "https://") && !strings.HasPrefix(r.URL, "http://") {
		return "", fmt.Errorf("mirror %s: URL %q: want http(s)", r.Key, r.URL)
	}
	unlock, err := m.lock(ctx, path)
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(path, "HEAD")); err != nil {
		// Made aside and renamed, so a crash leaves no half mirror.
		tmp := path + ".new"
		os.RemoveAll(tmp)
		if _, err := m.git(ctx, "", nil, "init", "--quiet", "--bare", "--template=", tmp); err != nil {
			return "", err
		}
		if err := os.Rename(tmp, path); err != nil {
			os.RemoveAll(tmp)
			return "", err
		}
	}
	var extra []string
	if r.Auth != nil {
		user, pass, err := r.Auth(ctx)
		if err != nil {
			return "", fmt.Errorf("mirror %s: credentials: %w", r.Key, err)
		}
		extra = gitConfigEnv("http.extraHeader", "Authorization: Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+pass)))
	}
	specs := []string{"+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"}
	for _, ref := range r.Refs {
		if err := checkRefName(ref); err != nil || !strings.HasPrefix(ref, "refs/") || strings.ContainsAny(ref, "*:") {
			return "", fmt.Errorf("mirror %s: ref %q: want a full ref name (refs/...)", r.Key, ref)
		}
		specs = append(specs, "+"+ref+":"+ref)
	}
	if _, err := m.git(ctx, path, extra, append([]string{"fetch", "--quiet", "--prune", "--no-write-fetch-head", "--", r.URL}, specs...)...); err != nil {
		return "", fmt.Errorf("mirror %s: %w", r.Key, err)
	}
	if r.DefaultBranch != "" {
		if err := checkRefName(r.DefaultBranch); err != nil {
			return "", err
		}
		if _, err := m.git(ctx, path, nil, "symbolic-ref", "HEAD", "refs/heads/"+r.DefaultBranch); err != nil {
			return "", err
		}
	}
	return path, nil
}

// ErrUnknownRef is a ref the repository does not have (a deleted branch):
// asking again will not help.
var ErrUnknownRef = errors.New("not a branch, tag or commit of the repository")

// Checkout says what a session's clone of a mirror looks like.
type Checkout struct {
	// Ref is where to start: a branch, a tag or a commit ("" the
	// mirror's HEAD).
	Ref string
	// Branch is the branch to work on, created at Ref (or, when it is a
	// branch of the remote, checked out tracking it). Empty: Ref as it is.
	Branch string
	// OriginURL becomes origin's URL (the remote's public URL, no
	// credentials): the agent's `git fetch`/`git push` go there through
	// Harvest's git endpoint.
	OriginURL string
	// Name and Email, when set, are the clone's user.name and user.email.
	Name, Email string
	// Hooks are git hooks to install in the clone's .git/hooks (name →
	// script, made executable), for the box's git to run: host git never
	// runs hooks.
	Hooks map[string]string
	Owner Owner
}

// Clone makes dst (which must not exist) a clone of the mirror at path,
// as c says, owned by c.Owner. The clone shares no file with the mirror.
func (m *Mirrors) Clone(ctx context.Context, path, dst string, c Checkout) (string, error) {
	unlock, err := m.lock(ctx, path)
	if err != nil {
		return "", err
	}
	head, err := m.clone(ctx, path, dst, c)
	unlock()
	if err != nil {
		os.RemoveAll(dst)
		return "", err
	}
	if err := chownTree(dst, c.Owner); err != nil {
		os.RemoveAll(dst)
		return "", err
	}
	return head, nil
}

func (m *Mirrors) clone(ctx context.Context, path, dst string, c Checkout) (string, error) {
	for _, r := range []string{c.Ref, c.Branch} {
		if r != "" {
			if err := checkRefName(r); err != nil {
				return "", err
			}
		}
	}
	if _, err := m.git(ctx, "", nil, "clone", "--quiet", "--no-hardlinks", "--template=", "--no-checkout", "--", path, dst); err != nil {
		return "", err
	}
	start := "HEAD"
	if c.Ref != "" {
		start = c.Ref
		if _, err := m.git(ctx, dst, nil, "rev-parse", "--verify", "--quiet", "refs/remotes/origin/"+c.Ref); err == nil {
			start = "origin/" + c.Ref
		} else if _, err := m.git(ctx, dst, nil, "rev-parse", "--verify", "--quiet", c.Ref+"^{commit}"); err != nil {
			return "", fmt.Errorf("ref %q: %w", c.Ref, ErrUnknownRef)
		}
	}
	args := []string{"checkout", "--quiet"}
	if c.Branch != "" {
		args = append(args, "-B", c.Branch)
		if _, err := m.git(ctx, dst, nil, "rev-parse", "--verify", "--quiet", "refs/remotes/origin/"+c.Branch); err == nil && c.Ref == "" {
			start = "origin/" + c.Branch
		}
	}
	if _, err := m.git(ctx, dst, nil, append(args, start, "--")...); err != nil {
		return "", err
	}
	set := [][2]string{
		// git push with no arguments pushes the branch to its namesake.
		{"push.default", "current"},
		{"push.autoSetupRemote", "true"},
	}
	if c.OriginURL != "" {
		set = append(set, [2]string{"remote.origin.url", c.OriginURL})
	}
	if c.Name != "" {
		set = append(set, [2]string{"user.name", c.Name})
	}
	if c.Email != "" {
		set = append(set, [2]string{"user.email", c.Email})
	}
	for _, kv := range set {
		if _, err := m.git(ctx, dst, nil, "config", kv[0], kv[1]); err != nil {
			return "", err
		}
	}
	if len(c.Hooks) > 0 {
		dir := filepath.Join(dst, ".git", "hooks")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		for name, script := range c.Hooks {
			if name == "" || strings.ContainsAny(name, `/\`) || name[0] == '.' {
				return "", fmt.Errorf("git hook %q: not a hook name", name)
			}
			f := filepath.Join(dir, name)
			if err := os.WriteFile(f, []byte(script), 0o755); err != nil {
				return "", err
			}
			if err := os.Chmod(f, 0o755); err != nil { // whatever the umask
				return "", err
			}
		}
	}
	head, err := m.git(ctx, dst, nil, "rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	// The reflogs name the mirror's host path; the box need not know it.
	os.RemoveAll(filepath.Join(dst, ".git", "logs"))
	return strings.TrimSpace(head), nil
}

// Git runs host git in a mirror (never in a box's clone), isolated as a
// fetch is; for reading a mirror (log, show) after Sync.
func (m *Mirrors) Git(ctx context.Context, path string, args ...string) (string, error) {
	unlock, err := m.lock(ctx, path)
	if err != nil {
		return "", err
	}
	defer unlock()
	return m.git(ctx, path, nil, args...)
}

// git runs host git in dir, isolated from the host's git setup (see
// clone) and bounded by m.Opts, in a process group of its own.
func (m *Mirrors) git(ctx context.Context, dir string, extraEnv []string, args ...string) (string, error) {
	opts := m.Opts.withDefaults()
	ctx, cancel := context.WithTimeoutCause(ctx, opts.Timeout, fmt.Errorf("git took longer than %s", opts.Timeout))
	defer cancel()
	stall := max(int(opts.Stall.Seconds()), 1)
	full := append([]string{
		"-c", "core.hooksPath=/dev/null",
		"-c", "core.fsmonitor=false",
		"-c", "credential.helper=",
		"-c", "http.lowSpeedLimit=1024",
		"-c", "http.lowSpeedTime=" + strconv.Itoa(stall),
		"-c", "protocol.file.allow=user",
	}, args...)
	cmd := exec.CommandContext(ctx, "git", full...)
	cmd.Env = append(cloneEnv([]string{"http", "https", "file"}, stall), extraEnv...)
	cmd.Dir = dir
	if dir == "" {
		cmd.Dir = os.TempDir()
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = cloneWaitDelay
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Start()
	if err == nil {
		err = cmd.Wait()
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return "", fmt.Errorf("git %s stopped: %w", args[0], cause)
		}
		return "", fmt.Errorf("git %s: %v: %s", args[0], err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// gitConfigEnv passes config to git in its environment (GIT_CONFIG_COUNT),
// where only the same user can read it.
func gitConfigEnv(kv ...string) []string {
	env := []string{"GIT_CONFIG_COUNT=" + strconv.Itoa(len(kv)/2)}
	for i := 0; i+1 < len(kv); i += 2 {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i/2, kv[i]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i/2, kv[i+1]))
	}
	return env
}

var refNamePattern = regexp.MustCompile(`^[A-Za-z0-9._/-]+$`)

// checkRefName refuses a ref that git would read as an option or that
// could not be a plain branch, tag or commit name.
func checkRefName(r string) error {
	if !refNamePattern.MatchString(r) || strings.HasPrefix(r, "-") || strings.Contains(r, "..") ||
		strings.HasSuffix(r, ".lock") || strings.HasPrefix(r, "/") || strings.HasSuffix(r, "/") || len(r) > 200 {
		return errors.New("ref " + strconv.Quote(r) + ": want a branch, tag or commit name (letters, digits, . _ - /)")
	}
	return nil
}

// ReadHead reads the commit a checkout Harvest made is at, from its .git
// files (HEAD, a loose ref or packed-refs), without running git: "" when
// it is not a git repository or the commit cannot be told.
func ReadHead(dir string) string {
	gitDir := filepath.Join(dir, ".git")
	b, err := os.ReadFile(filepath.Join(gitDir, "HEAD"))
	if err != nil {
		return ""
	}
	head := strings.TrimSpace(string(b))
	ref, ok := strings.CutPrefix(head, "ref: ")
	if !ok {
		return validSHA(head)
	}
	if !refNamePattern.MatchString(ref) || strings.Contains(ref, "..") {
		return ""
	}
	if b, err := os.ReadFile(filepath.Join(gitDir, ref)); err == nil {
		return validSHA(strings.TrimSpace(string(b)))
	}
	packed, err := os.ReadFile(filepath.Join(gitDir, "packed-refs"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(packed), "\n") {
		if sha, name, ok := strings.Cut(line, " "); ok && name == ref {
			return validSHA(sha)
		}
	}
	return ""
}

func validSHA(s string) string {
	if len(s) != 40 && len(s) != 64 {
		return ""
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return ""
		}
	}
	return s
}
