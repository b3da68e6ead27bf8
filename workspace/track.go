package workspace

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
)

// Tracked says what Track found or did.
type Tracked int

const (
	// AlreadyGit: the workspace was a git repository.
	AlreadyGit Tracked = iota
	// MadeGit: it was not; it now is, with its initial state committed, so
	// the agent's changes show in git status and git diff.
	MadeGit
	// NoGit: it is not a git repository and the box has no git.
	NoGit
)

// Track makes the workspace at dir (a path in box) a git repository with
// its initial state committed, unless it is one already. It runs git in the
// box, never on the host: the workspace's files are the agent's.
func Track(ctx context.Context, box *sandbox.Sandbox, dir string) (Tracked, error) {
	const script = `git rev-parse --is-inside-work-tree >/dev/null 2>&1 && exit 0
command -v git >/dev/null || exit 3
git init -q && git add -A && git -c user.name=Harvest -c user.email=harvest@localhost commit -q --no-verify --allow-empty -m "Initial state (recorded by Harvest)" || exit 4
exit 2`
	var errb bytes.Buffer
	st, err := box.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", script}, Dir: dir, Stderr: &errb, OutputLimit: 64 << 10, Timeout: 2 * time.Minute})
	if err != nil {
		return 0, fmt.Errorf("preparing workspace %s: %w", dir, err)
	}
	switch st.Code {
	case 0:
		return AlreadyGit, nil
	case 2:
		return MadeGit, nil
	case 3:
		return NoGit, nil
	}
	return 0, fmt.Errorf("preparing workspace %s: recording its initial state with git failed (%s): %s", dir, st, strings.TrimSpace(errb.String()))
}
