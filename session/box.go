package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/workspace"
)

// The runner owns its box, but two things a person does with a session
// need the live box without going through a turn: reading its changes
// (Changes) and an interactive shell (OpenShell, shell.go). Both borrow
// the box the runner holds (runner.lent, set with runner.box): a Sandbox is
// safe for concurrent use, and a box the runner drops meanwhile (suspend,
// delete, shutdown) fails the borrower's calls, which then report the box
// gone. Neither starts a box: a session without one (suspended, still
// provisioning, ended) is ErrNoBox, and the caller says what to do.

// ErrNoBox: the session has no running box to read or open a shell in (it
// is suspended, provisioning, or ended): 409. A suspended session's next
// message starts one.
var ErrNoBox = errors.New("the session has no running box")

// setBox sets the box the runner holds, and the one it lends out. Called
// by the run goroutine only.
func (r *runner) setBox(sb *sandbox.Sandbox) {
	r.box = sb
	r.mu.Lock()
	r.lent = sb
	if sb == nil {
		r.armed = nil
	}
	r.mu.Unlock()
}

// Box lends the live box of a session the owner may see ("" is an
// admin), with the session. ErrNoBox when it has none.
func (m *Manager) Box(ctx context.Context, owner, id string) (*sandbox.Sandbox, *store.Session, error) {
	s, err := m.session(ctx, owner, id)
	if err != nil {
		return nil, nil, err
	}
	m.mu.Lock()
	r := m.runners[id]
	m.mu.Unlock()
	var sb *sandbox.Sandbox
	if r != nil && r.needBox() {
		return nil, s, fmt.Errorf("session %s moved from another node: %w", id, noBoxHint(store.StateProvisioning))
	}
	if r != nil {
		r.mu.Lock()
		sb = r.lent
		r.mu.Unlock()
	}
	if sb == nil || !sb.Alive() {
		return nil, s, fmt.Errorf("session %s is %s: %w", id, s.State, noBoxHint(s.State))
	}
	return sb, s, nil
}

// noBoxHint is ErrNoBox with what to do in state st.
func noBoxHint(st store.State) error {
	switch st {
	case store.StateSuspended:
		return fmt.Errorf("%w: it was suspended when idle (its workspace is kept); send it a message to start its box again", ErrNoBox)
	case store.StatePending, store.StateProvisioning:
		return fmt.Errorf("%w yet: it is being started; retry in a few seconds", ErrNoBox)
	case store.StateStopped, store.StateFailed:
		return fmt.Errorf("%w: it has ended", ErrNoBox)
	}
	return fmt.Errorf("%w at the moment; retry in a few seconds", ErrNoBox)
}

// RepoChanges is one repository's changes since its session started, or
// why they could not be read (Err).
type RepoChanges struct {
	Repo string
	*workspace.Changes
	// BaseKnown: Base is the commit the session started at. Else (a
	// session older than that record) it is HEAD, and committed changes
	// are not shown.
	BaseKnown bool
	Err       error
}

// Changes reads, in the session's live box, each repository's changes
// since the session started: committed or not, and untracked files,
// within lim. ErrNoBox when the session has no box.
func (m *Manager) Changes(ctx context.Context, owner, id string, lim workspace.DiffLimits) ([]RepoChanges, error) {
	sb, s, err := m.Box(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	var out []RepoChanges
	for _, repo := range s.Repos {
		rc := RepoChanges{Repo: repo.Name, BaseKnown: repo.Start != ""}
		dir := sb.WorkspacePath(repo.Name)
		base := repo.Start
		if base == "" {
			base, err = headInBox(ctx, sb, dir)
		}
		if err == nil {
			rc.Changes, err = workspace.Diff(ctx, sb, dir, base, lim)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if !sb.Alive() {
				return nil, fmt.Errorf("session %s: the box went away while its changes were read: %w", id, noBoxHint(""))
			}
			rc.Err = err
		}
		out = append(out, rc)
	}
	return out, nil
}

// headInBox is the commit HEAD names in the repository at dir, or
// workspace.EmptyTree when it has none yet.
func headInBox(ctx context.Context, sb *sandbox.Sandbox, dir string) (string, error) {
	var out, errb bytes.Buffer
	st, err := sb.Run(ctx, &sandbox.Cmd{
		Args: []string{"git", "--no-optional-locks", "rev-parse", "--verify", "-q", "HEAD^{commit}"},
		Dir:  dir, Stdout: &out, Stderr: &errb, OutputLimit: 4 << 10, Timeout: time.Minute,
	})
	if err != nil {
		return "", fmt.Errorf("reading HEAD of %s: %w", dir, err)
	}
	if st.Code == 1 && out.Len() == 0 { // no commit yet
		return workspace.EmptyTree, nil
	}
	if !st.Success() {
		return "", fmt.Errorf("reading HEAD of %s (%s): %s", dir, st, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// recordStarts stores the commit each fresh workspace starts at (after the
// checkout, before the agent): the base of the session's changes. One it
// cannot read is left empty (Changes then diffs against HEAD).
func (r *runner) recordStarts(ctx context.Context, sb *sandbox.Sandbox, fresh map[string]copied) error {
	starts := map[string]string{}
	for _, repo := range r.s.Repos {
		if _, ok := fresh[repo.Name]; !ok || repo.Start != "" {
			continue
		}
		h, err := headInBox(ctx, sb, sb.WorkspacePath(repo.Name))
		if err != nil {
			// No git in the image, say: the diff will use HEAD.
			r.log.Warn("reading the commit a workspace starts at", "repo", repo.Name, "err", err)
			continue
		}
		starts[repo.Name] = h
	}
	if len(starts) == 0 {
		return nil
	}
	s, err := r.d.st.UpdateSession(ctx, r.id, func(s *store.Session) error {
		for i := range s.Repos {
			if h, ok := starts[s.Repos[i].Name]; ok {
				s.Repos[i].Start = h
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.s = r.d.host.withDefaults(s)
	return nil
}
