package ghbot

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/store"
)

// branchRead is what the turn's end reads of a session's branch in the
// box, in one run there: each run in a box is a process started through
// the box's agent, and the pull request waited for six of them one after
// the other (status, rev-parse, log, rev-list, the description's files
// and commits). Everything is read as of one moment; nothing here moves
// the branch.
type branchRead struct {
	// dirty: the work tree has changes not committed (asked only when
	// leftovers may be committed).
	dirty bool
	// current is the branch checked out ("" when HEAD is detached).
	current string
	// head is the branch's commit ("" when the branch is gone).
	head string
	// fresh are the commits since the head Harvest saw last (Repo.Head,
	// else the base), oldest first, at most maxCommits; only the head
	// when the old head is gone (history rewritten). Empty when the head
	// did not move.
	fresh []freshCommit
	// ahead is the count of the branch's commits its base lacks (nor the
	// commit it started from, for a fork's pull request), as git said it.
	ahead string
	// file and template are the agent's DescriptionFile and the
	// repository's pull request template (64 KiB of each at most; "" when
	// absent).
	file, template string
	// commits are the branch's latest 21 commits its base lacks, newest
	// first.
	commits []commitLine
}

type freshCommit struct{ sha, author, subject string }

// aheadCount is ahead as a number.
func (b *branchRead) aheadCount(branch string) (int, error) {
	k, err := strconv.Atoi(strings.TrimSpace(b.ahead))
	if err != nil {
		return 0, fmt.Errorf("counting the commits of %s: git said %q", branch, strings.TrimSpace(b.ahead))
	}
	return k, nil
}

// pullTemplate is where a repository keeps its pull request template.
const pullTemplate = ".github/pull_request_template.md"

// readBranchScript prints the parts of a branchRead separated by 0x1e
// (taken out of what git and the files say). A symlink in the workspace
// resolves in the box, never on the host.
const readBranchScript = `h=$(git rev-parse --verify --quiet "$1^{commit}")
if [ -n "$8" ]; then git status --porcelain --untracked-files=all | head -c 1; fi
printf '\036'; git symbolic-ref --quiet --short HEAD
printf '\036%s\036' "$h"
if [ -n "$h" ] && [ "$h" != "$2" ]; then
	git log --reverse --max-count="$7" --format='%H%x1f%an <%ae>%x1f%s' "${2:-$3}..$h" -- 2>/dev/null ||
	git log -1 --format='%H%x1f%an <%ae>%x1f%s' "$h" --
fi | tr -d '\036'
printf '\036'
if [ -n "$h" ]; then git rev-list --count "$3..$h" "$4" -- 2>&1 | tr -d '\036'; fi
printf '\036'; head -c 65536 -- "$5" 2>/dev/null | tr -d '\036'
printf '\036'; head -c 65536 -- "$6" 2>/dev/null | tr -d '\036'
printf '\036'
if [ -n "$h" ]; then git log --max-count=21 --format='%H%x1f%s' "$3..$h" "$4" -- | tr -d '\036'; fi
`

// readBranch reads r's branch in the box; status asks whether the work
// tree has uncommitted changes.
func readBranch(ctx context.Context, box *sandbox.Sandbox, r store.Repo, status bool) (branchRead, error) {
	var out, errb bytes.Buffer
	asked := ""
	if status {
		asked = "1"
	}
	st, err := box.Run(ctx, &sandbox.Cmd{
		Args: []string{"sh", "-c", readBranchScript, "sh", "refs/heads/" + r.Branch, r.Head, "refs/remotes/origin/" + r.Base, notFrom(r),
			DescriptionFile, pullTemplate, strconv.Itoa(maxCommits), asked},
		Dir: box.WorkspacePath(r.Name), Stdout: &out, Stderr: &errb, OutputLimit: 512 << 10, Timeout: 30 * time.Second,
	})
	if err != nil {
		return branchRead{}, err
	}
	if !st.Success() {
		return branchRead{}, fmt.Errorf("reading branch %s in the box (%s): %s", r.Branch, st, strings.TrimSpace(errb.String()))
	}
	p := strings.SplitN(out.String(), "\x1e", 8)
	if len(p) != 8 {
		return branchRead{}, fmt.Errorf("reading branch %s in the box: %d parts, not 8 (%s)", r.Branch, len(p), strings.TrimSpace(errb.String()))
	}
	b := branchRead{dirty: p[0] != "", current: strings.TrimSpace(p[1]), head: strings.TrimSpace(p[2]), ahead: p[4], file: p[5], template: p[6]}
	for _, line := range strings.Split(strings.TrimSpace(p[3]), "\n") {
		f := strings.SplitN(line, "\x1f", 3)
		if len(f) == 3 && shaPattern.MatchString(f[0]) {
			b.fresh = append(b.fresh, freshCommit{sha: f[0], author: f[1], subject: f[2]})
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(p[7]), "\n") {
		if sha, subj, ok := strings.Cut(line, "\x1f"); ok && shaPattern.MatchString(sha) {
			b.commits = append(b.commits, commitLine{sha: sha, subject: subj})
		}
	}
	return b, nil
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
