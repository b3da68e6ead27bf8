package ghbot

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/store"
)

// branchRead is what the turn's end reads of a session's branch in the
// box, in two runs there at once: each run in a box is a process started
// through the box's agent, and the pull request waited for six of them
// one after the other (status, rev-parse, log, rev-list, the
// description's files and commits). Nothing here moves the branch.
type branchRead struct {
	// dirty: the work tree has changes not committed (asked only when
	// leftovers may be committed).
	dirty bool
	// current is the branch checked out ("" when HEAD is detached);
	// asked only when dirty.
	current string
	// head is the branch's commit ("" when the branch is gone).
	head string
	// fresh are the commits since the head Harvest saw last (Repo.Head,
	// else the base), oldest first, at most maxCommits; only the head
	// when the old head is gone (history rewritten). Empty when the head
	// did not move.
	fresh []freshCommit
	// file and template are the agent's DescriptionFile and the
	// repository's pull request template (64 KiB of each at most; "" when
	// absent).
	file, template string
	// commits are the branch's latest 21 commits its base lacks (nor the
	// commit it started from, for a fork's pull request), newest first.
	commits []commitLine
	// commitsErr is git's complaint when it could not list them.
	commitsErr string
}

type freshCommit struct{ sha, author, subject string }

// ahead reports whether the branch has commits its base lacks.
func (b *branchRead) ahead(branch string) (bool, error) {
	if b.commitsErr != "" {
		return false, fmt.Errorf("listing the commits of %s: git said %q", branch, b.commitsErr)
	}
	return len(b.commits) > 0, nil
}

// pullTemplate is where a repository keeps its pull request template.
const pullTemplate = ".github/pull_request_template.md"

// The branch is read by two runs in the box at once, each with as few
// processes as it can (each one started in a box costs a millisecond or
// two): the head, whether the tree is dirty and the new commits; and the
// description file, the template and the commits the base lacks (no
// rev-list: those are listed anyway; symbolic-ref only when the tree is
// dirty). Their parts are separated by a boundary made anew for each run
// (what git and the files say cannot contain it). A symlink in the
// workspace resolves in the box, never on the host.
const (
	readHeadScript = `B=$6
h=$(git rev-parse --verify --quiet "$1^{commit}")
d=
if [ -n "$5" ]; then d=$(git status --porcelain --untracked-files=all | head -c 1); fi
printf '%s%s' "$d" "$B"
if [ -n "$d" ]; then git symbolic-ref --quiet --short HEAD; fi
printf '%s%s%s' "$B" "$h" "$B"
if [ -n "$h" ] && [ "$h" != "$2" ]; then
	git log --reverse --max-count="$4" --format='%H%x1f%an <%ae>%x1f%s' "${2:-$3}..$h" -- 2>/dev/null ||
	git log -1 --format='%H%x1f%an <%ae>%x1f%s' "$h" --
fi
`
	readDescriptionScript = `B=$6
head -c 65536 -- "$4" 2>/dev/null
printf '%s' "$B"; head -c 65536 -- "$5" 2>/dev/null
printf '%s' "$B"; git log --max-count=21 --format='%H%x1f%s' "$2..$1" "$3" -- 2>&1; printf '%s%s' "$B" "$?"
`
)

// readBranch reads r's branch in the box; status asks whether the work
// tree has uncommitted changes.
func readBranch(ctx context.Context, box *sandbox.Sandbox, r store.Repo, status bool) (branchRead, error) {
	asked := ""
	if status {
		asked = "1"
	}
	var nonce [16]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return branchRead{}, err
	}
	bound := "--harvest-" + hex.EncodeToString(nonce[:]) + "--"
	branch, base := "refs/heads/"+r.Branch, "refs/remotes/origin/"+r.Base
	desc, stop := later(ctx, func(ctx context.Context) ([]string, error) {
		return runParts(ctx, box, r, bound, 3, readDescriptionScript, branch, base, notFrom(r), DescriptionFile, pullTemplate)
	})
	defer stop()
	p, err := runParts(ctx, box, r, bound, 4, readHeadScript, branch, r.Head, base, strconv.Itoa(maxCommits), asked)
	if err != nil {
		return branchRead{}, err
	}
	b := branchRead{dirty: p[0] != "", current: strings.TrimSpace(p[1]), head: strings.TrimSpace(p[2])}
	for _, line := range strings.Split(strings.TrimSpace(p[3]), "\n") {
		f := strings.SplitN(line, "\x1f", 3)
		if len(f) == 3 && shaPattern.MatchString(f[0]) {
			b.fresh = append(b.fresh, freshCommit{sha: f[0], author: f[1], subject: f[2]})
		}
	}
	if b.head == "" {
		return b, nil // gone: nothing more to say
	}
	d, err := desc()
	if err != nil {
		return branchRead{}, err
	}
	b.file, b.template = d[0], d[1]
	log, code, _ := strings.Cut(d[2], bound)
	if strings.TrimSpace(code) != "0" {
		b.commitsErr = strings.TrimSpace(log)
		return b, nil
	}
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		if sha, subj, ok := strings.Cut(line, "\x1f"); ok && shaPattern.MatchString(sha) {
			b.commits = append(b.commits, commitLine{sha: sha, subject: subj})
		}
	}
	return b, nil
}

// runParts runs script in r's workspace in the box with args and bound
// (its last argument) and returns what it printed, cut at bound into n
// parts (the last one keeps any further bound).
func runParts(ctx context.Context, box *sandbox.Sandbox, r store.Repo, bound string, n int, script string, args ...string) ([]string, error) {
	var out, errb bytes.Buffer
	st, err := box.Run(ctx, &sandbox.Cmd{
		Args: append(append([]string{"sh", "-c", script, "sh"}, args...), bound),
		Dir:  box.WorkspacePath(r.Name), Stdout: &out, Stderr: &errb, OutputLimit: 512 << 10, Timeout: 30 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	if !st.Success() {
		return nil, fmt.Errorf("reading branch %s in the box (%s): %s", r.Branch, st, strings.TrimSpace(errb.String()))
	}
	p := strings.SplitN(out.String(), bound, n)
	if len(p) != n {
		return nil, fmt.Errorf("reading branch %s in the box: %d parts, not %d (%s)", r.Branch, len(p), n, strings.TrimSpace(errb.String()))
	}
	return p, nil
}

// later runs fn in a goroutine of its own and returns the function that
// waits for its result, and stop, which cancels fn's context and waits
// for it to return: defer stop, so the goroutine never outlives its
// caller, whichever way the caller returns.
func later[T any](ctx context.Context, fn func(ctx context.Context) (T, error)) (result func() (T, error), stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var v T
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		v, err = fn(ctx)
	}()
	return func() (T, error) {
			<-done
			return v, err
		}, func() {
			cancel()
			<-done
		}
}
