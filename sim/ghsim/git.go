package ghsim

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Bare repositories live under Server.dir/repos/OWNER/NAME.git. Every git
// the stand-in runs (its own commands and http-backend) sees no system or
// global configuration and no hooks but the pre-receive hook installed
// here, which refuses updates of the refs listed in harvest-protected.

const preReceive = `#!/bin/sh
# Installed by harvest's GitHub stand-in: refuse updates of protected branches
# as GitHub does (GH006).
status=0
while read old new ref; do
	if grep -qxF "$ref" "$GIT_DIR/harvest-protected" 2>/dev/null; then
		echo "error: GH006: Protected branch update failed for $ref." >&2
		echo "error: Cannot push to this branch" >&2
		status=1
	fi
done
exit $status
`

// gitEnv is the environment of every git the stand-in runs.
func (s *Server) gitEnv() []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + s.dir,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"LC_ALL=C",
	}
}

// git runs git in dir (a bare repository or "") and returns its stdout.
func (s *Server) git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = s.gitEnv()
	cmd.WaitDelay = 5 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func (s *Server) repoDir(r *repo) string {
	return filepath.Join(s.dir, "repos", r.owner.login, r.name+".git")
}

// importRepo makes the bare repository for r from src: a clone of its
// history if src is a git work tree or repository, else one commit of its
// files.
func (s *Server) importRepo(ctx context.Context, r *repo, src string) error {
	dst := s.repoDir(r)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if _, err := s.git(ctx, src, "rev-parse", "--git-dir"); err == nil && isGitRoot(src) {
		if _, err := s.git(ctx, "", "clone", "--bare", "--template=", "--no-hardlinks", "--quiet", src, dst); err != nil {
			return err
		}
		if _, err := s.git(ctx, dst, "remote", "remove", "origin"); err != nil {
			return err
		}
		if r.defaultBranch == "" {
			head, err := s.git(ctx, dst, "symbolic-ref", "--short", "HEAD")
			if err != nil {
				return err
			}
			r.defaultBranch = strings.TrimSpace(head)
		}
		if _, err := s.git(ctx, dst, "rev-parse", "--verify", "--quiet", "refs/heads/"+r.defaultBranch); err != nil {
			return fmt.Errorf("%s has no branch %s", src, r.defaultBranch)
		}
	} else {
		if r.defaultBranch == "" {
			r.defaultBranch = "main"
		}
		if _, err := s.git(ctx, "", "init", "--bare", "--quiet", "--template=", "--initial-branch="+r.defaultBranch, dst); err != nil {
			return err
		}
		if err := s.commitTree(ctx, dst, src, r); err != nil {
			return err
		}
	}
	if _, err := s.git(ctx, dst, "symbolic-ref", "HEAD", "refs/heads/"+r.defaultBranch); err != nil {
		return err
	}
	for _, kv := range [][2]string{{"http.receivepack", "true"}, {"core.hooksPath", filepath.Join(dst, "hooks")}, {"receive.denyDeleteCurrent", "true"}, {"receive.hideRefs", "refs/pull"}} {
		if _, err := s.git(ctx, dst, "config", kv[0], kv[1]); err != nil {
			return err
		}
	}
	hooks := filepath.Join(dst, "hooks")
	if err := os.RemoveAll(hooks); err != nil {
		return err
	}
	if err := os.MkdirAll(hooks, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(hooks, "pre-receive"), []byte(preReceive), 0o755); err != nil {
		return err
	}
	return s.writeProtected(r)
}

func isGitRoot(dir string) bool {
	if st, err := os.Stat(filepath.Join(dir, ".git")); err == nil && st.IsDir() {
		return true
	}
	_, err := os.Stat(filepath.Join(dir, "HEAD"))
	return err == nil
}

// commitTree commits the files of src (not a repository) to a fresh bare
// repository, with a temporary index so src is left as it was.
func (s *Server) commitTree(ctx context.Context, bare, src string, r *repo) error {
	index := filepath.Join(s.dir, fmt.Sprintf("index-%d", r.id))
	defer os.Remove(index)
	cmd := func(args ...string) (string, error) {
		c := exec.CommandContext(ctx, "git", append([]string{"--git-dir=" + bare, "--work-tree=" + src}, args...)...)
		c.Env = append(s.gitEnv(), "GIT_INDEX_FILE="+index,
			"GIT_AUTHOR_NAME="+r.owner.login, "GIT_AUTHOR_EMAIL="+r.owner.login+"@users.noreply.github.com",
			"GIT_COMMITTER_NAME=GitHub", "GIT_COMMITTER_EMAIL=noreply@github.com")
		out, err := c.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return "", fmt.Errorf("git %s: %w: %s", args[0], err, ee.Stderr)
			}
			return "", err
		}
		return strings.TrimSpace(string(out)), nil
	}
	if _, err := cmd("add", "-A", "."); err != nil {
		return err
	}
	tree, err := cmd("write-tree")
	if err != nil {
		return err
	}
	sha, err := cmd("commit-tree", tree, "-m", "Initial commit")
	if err != nil {
		return err
	}
	_, err = cmd("update-ref", "refs/heads/"+r.defaultBranch, sha)
	return err
}

// writeProtected lists r's protected branches for the pre-receive hook.
func (s *Server) writeProtected(r *repo) error {
	var b strings.Builder
	for name, on := range r.protected {
		if on {
			b.WriteString("refs/heads/" + name + "\n")
		}
	}
	return os.WriteFile(filepath.Join(s.repoDir(r), "harvest-protected"), []byte(b.String()), 0o644)
}

// readBranches lists r's branches and their heads.
func (s *Server) readBranches(ctx context.Context, r *repo) (map[string]string, error) {
	out, err := s.git(ctx, s.repoDir(r), "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads/")
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for line := range strings.Lines(out) {
		name, sha, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok {
			m[name] = sha
		}
	}
	return m, nil
}

type gitCommit struct {
	sha, tree                                    string
	parents                                      []string
	authorName, authorEmail, authorDate          string
	committerName, committerEmail, committerDate string
	message                                      string
}

func (s *Server) readCommit(ctx context.Context, r *repo, rev string) (gitCommit, error) {
	out, err := s.git(ctx, s.repoDir(r), "log", "-1", "--format=%H%x00%T%x00%P%x00%an%x00%ae%x00%aI%x00%cn%x00%ce%x00%cI%x00%B", rev, "--")
	if err != nil {
		return gitCommit{}, err
	}
	f := strings.SplitN(out, "\x00", 10)
	if len(f) != 10 {
		return gitCommit{}, fmt.Errorf("git log %s: unexpected output", rev)
	}
	c := gitCommit{sha: f[0], tree: f[1], authorName: f[3], authorEmail: f[4], authorDate: utcDate(f[5]),
		committerName: f[6], committerEmail: f[7], committerDate: utcDate(f[8]), message: strings.TrimRight(f[9], "\n")}
	c.parents = strings.Fields(f[2])
	return c, nil
}

func utcDate(iso string) string {
	t, err := time.Parse(time.RFC3339, iso)
	if err != nil {
		return iso
	}
	return ts(t)
}

type diffStat struct {
	commits, additions, deletions, files int
	err                                  error
}

// diffStat measures a pull request as GitHub does: from the merge base of
// base and head to head. Called with s.mu held; it runs git.
func (s *Server) diffStat(is *issue) diffStat {
	pr := is.pr
	dir := s.repoDir(is.repo)
	ctx := context.Background()
	var st diffStat
	n, err := s.git(ctx, dir, "rev-list", "--count", pr.baseSHA+".."+pr.headSHA)
	if err != nil {
		st.err = err
		return st
	}
	st.commits, _ = strconv.Atoi(strings.TrimSpace(n))
	out, err := s.git(ctx, dir, "diff", "--numstat", pr.baseSHA+"..."+pr.headSHA)
	if err != nil {
		st.err = err
		return st
	}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		a, _ := strconv.Atoi(f[0])
		d, _ := strconv.Atoi(f[1])
		st.additions += a
		st.deletions += d
		st.files++
	}
	return st
}

// diffHunk returns GitHub's diff_hunk for a comment on line (of the head
// side) of path: the hunk's header and its lines up to that line, from the
// three-dot diff of base and head.
func (s *Server) diffHunk(ctx context.Context, r *repo, base, head, path string, line int) (string, error) {
	out, err := s.git(ctx, s.repoDir(r), "diff", "--no-color", "--no-ext-diff", base+"..."+head, "--", path)
	if err != nil {
		return "", err
	}
	var hunk []string
	newLine := 0
	in := false
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		t := sc.Text()
		if strings.HasPrefix(t, "@@ ") {
			var oldStart, newStart int
			fmt.Sscanf(hunkNew(t), "%d", &newStart)
			_ = oldStart
			hunk = []string{t}
			newLine = newStart - 1
			in = true
			continue
		}
		if !in {
			continue
		}
		hunk = append(hunk, t)
		if strings.HasPrefix(t, "-") || strings.HasPrefix(t, `\`) {
			continue
		}
		newLine++
		if newLine == line {
			return strings.Join(hunk, "\n"), nil
		}
	}
	return "", fmt.Errorf("line %d of %s is not part of the diff", line, path)
}

// hunkNew returns the new-file start of a hunk header "@@ -a,b +c,d @@".
func hunkNew(h string) string {
	i := strings.Index(h, " +")
	if i < 0 {
		return ""
	}
	return strings.TrimPrefix(strings.Fields(h[i:])[0], "+")
}

// gitHandler serves smart HTTP for /{owner}/{repo}.git/... by running git
// http-backend, after checking credentials the way github.com does.
func (s *Server) gitHandler(w http.ResponseWriter, req *http.Request) {
	owner, name := req.PathValue("owner"), strings.TrimSuffix(req.PathValue("repo"), ".git")
	push := req.URL.Query().Get("service") == "git-receive-pack" || strings.HasSuffix(req.URL.Path, "/git-receive-pack")
	s.mu.Lock()
	r := s.repoByName(owner, name)
	var pusher *user
	allowed, known := false, false
	if r != nil {
		if u, p, ok := req.BasicAuth(); ok {
			_ = u
			if tok := s.lookupToken(p); tok != nil {
				known = true
				need := "read"
				if push {
					need = "write"
				}
				allowed = s.tokenCan(tok, r, "contents", need)
				pusher = s.tokenActor(tok)
			}
		} else if !push && !r.private {
			allowed = true
		}
	}
	dir := ""
	if r != nil {
		dir = s.repoDir(r)
	}
	s.mu.Unlock()
	switch {
	case r == nil && !known:
		fallthrough
	case !allowed && !known:
		w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
		http.Error(w, "Invalid username or token. Password authentication is not supported for Git operations.", http.StatusUnauthorized)
		return
	case !allowed && push:
		http.Error(w, fmt.Sprintf("Permission to %s/%s.git denied to %s.", owner, name, loginOf(pusher)), http.StatusForbidden)
		return
	case !allowed:
		http.Error(w, "Repository not found.", http.StatusNotFound)
		return
	}
	h := &cgi.Handler{
		Path: s.gitPath,
		Args: []string{"http-backend"},
		Dir:  dir,
		Env: append(s.gitEnv(), "GIT_PROJECT_ROOT="+filepath.Join(s.dir, "repos"), "GIT_HTTP_EXPORT_ALL=1",
			"REMOTE_USER="+loginOf(pusher)),
		Stderr: s.gitStderr,
	}
	rw := &statusWriter{ResponseWriter: w}
	h.ServeHTTP(rw, req)
	if push && req.Method == http.MethodPost {
		s.afterPush(req.Context(), owner, name, pusher)
	}
}

func loginOf(u *user) string {
	if u == nil {
		return ""
	}
	return u.login
}

type statusWriter struct {
	http.ResponseWriter
	status  int
	capture *bytes.Buffer // nil: the body is not kept
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.capture != nil {
		w.capture.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// afterPush brings the repository's branches up to date and moves the
// heads of pull requests whose branch moved, sending pull_request
// synchronize for each.
func (s *Server) afterPush(ctx context.Context, owner, name string, pusher *user) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repoByName(owner, name)
	if r == nil {
		return
	}
	br, err := s.readBranches(ctx, r)
	if err != nil {
		s.logger.Warn("reading branches after a push", "repo", r.fullName(), "err", err)
		return
	}
	old := r.branches
	r.branches = br
	r.pushed = s.now()
	if pusher == nil {
		pusher = r.owner
	}
	s.emitPushes(ctx, r, old, br, pusher)
	// The open pull requests based on r, and those (in r's network) whose
	// head is a branch of r: a fork's push moves its parent's pull request.
	for _, x := range s.sortedRepos() {
		if x != r && !sameNetwork(x, r) {
			continue
		}
		for _, is := range sortedIssues(x) {
			if is.pr == nil || is.state != "open" {
				continue
			}
			if sha, ok := br[is.pr.base]; ok && x == r {
				is.pr.baseSHA = sha
			}
			if is.pr.headRepo != r {
				continue
			}
			sha, ok := br[is.pr.head]
			if !ok || sha == is.pr.headSHA {
				continue
			}
			before := is.pr.headSHA
			is.pr.headSHA = sha
			is.updated = s.now()
			if err := s.writePullRef(ctx, is); err != nil {
				s.logger.Warn("writing a pull request's ref after a push", "repo", x.fullName(), "number", is.number, "err", err)
			}
			s.emitPR(x, is, "synchronize", pusher, &syncShas{before, sha})
		}
	}
}

func sortedIssues(r *repo) []*issue {
	l := make([]*issue, 0, len(r.issues))
	for _, is := range r.issues {
		l = append(l, is)
	}
	slices.SortFunc(l, func(a, b *issue) int { return a.number - b.number })
	return l
}
