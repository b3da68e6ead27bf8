package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/workspace"
)

// Scope says whose workspace a run works in (seed 004's resolver).
type Scope struct {
	Session  string // a session id: the session's workspace, kept across runs
	Workflow string // a workflow run id: shared by the workflow's steps
	Run      string // an agent run id: the run's own
}

var scopeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// WorkspaceDir resolves where a run's repositories live, by priority: a
// session → DataDir/workspaces/session/{id}, else a workflow run →
// workspaces/workflow/{id}, else workspaces/run/{id}. Each repository is a
// directory under it, named after it.
func WorkspaceDir(dataDir string, sc Scope) (string, error) {
	kind, id := "run", sc.Run
	switch {
	case sc.Session != "":
		kind, id = "session", sc.Session
	case sc.Workflow != "":
		kind, id = "workflow", sc.Workflow
	}
	if id == "" {
		return "", errors.New("workspace scope: give a session, a workflow run or a run id")
	}
	if !scopeIDPattern.MatchString(id) {
		return "", fmt.Errorf("workspace scope %s id %q: use letters, digits, '.', '-' and '_' (at most 128)", kind, id)
	}
	return filepath.Join(dataDir, "workspaces", kind, id), nil
}

// boxUser is who runs in a session's boxes and owns its workspaces: uid
// 1000 when Harvest runs as root (the box must not be root), else the caller
// (as `harvest run` does).
func boxUser() (sandbox.User, workspace.Owner) {
	if os.Geteuid() != 0 {
		return sandbox.User{UID: os.Geteuid(), GID: os.Getegid()}, workspace.Owner{}
	}
	return sandbox.User{UID: sandbox.DefaultUID, GID: sandbox.DefaultGID}, workspace.Owner{UID: sandbox.DefaultUID, GID: sandbox.DefaultGID}
}

// prepareWorkspaces makes sure every repository of s has its workspace on
// the host. A missing one is copied (or cloned) from its source (a parallel
// session's, from its workflow's shared workspace: copySource), into a
// temporary sibling renamed into place, so a crash never leaves a half copy
// under the real name. Only a session that has no conversation yet may be
// copied afresh: later, a missing workspace means the agent's work is gone,
// which the caller must hear about. It returns the repositories it copied,
// and from where.
func (m *Manager) prepareWorkspaces(ctx context.Context, s *store.Session) (map[string]copied, error) {
	_, owner := boxUser()
	fresh := map[string]copied{}
	if err := m.ensureDisk(ctx, s); err != nil { // before looking: after a reboot the workspaces are on it
		return fresh, err
	}
	for i, r := range s.Repos {
		if _, err := os.Stat(r.Path); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fresh, fmt.Errorf("workspace %s: %w", r.Name, err)
		}
		if len(s.AgentState) > 0 {
			return fresh, fatal(fmt.Errorf("workspace %s is gone: the agent's work in it is lost; delete the session and start a new one", r.Name))
		}
		if err := os.MkdirAll(filepath.Dir(r.Path), 0o711); err != nil {
			return fresh, fmt.Errorf("creating %s: %w (is the data directory writable?)", filepath.Dir(r.Path), err)
		}
		tmp := r.Path + ".copying"
		if err := os.RemoveAll(tmp); err != nil {
			return fresh, fmt.Errorf("removing the partial copy %s: %w", tmp, err)
		}
		if r.GitHub != "" {
			if err := m.forgeCheckout(ctx, s, i, tmp, owner); err != nil {
				return fresh, err
			}
			fresh[r.Name] = fromForge
			continue
		}
		src, shared, err := m.copySource(s, r)
		if err != nil {
			return fresh, fatal(fmt.Errorf("repository %s: %w", r.Name, err))
		}
		copyIt := func() error {
			_, err := workspace.Prepare(ctx, src, tmp, owner, m.cfg.Clone)
			return err
		}
		if shared {
			err = m.withWorkflowLock(ctx, s, copyIt)
		} else {
			err = copyIt()
		}
		if err != nil {
			os.RemoveAll(tmp)
			if _, ok := lockedBy(err); ok {
				return fresh, fmt.Errorf("copying workflow %s's repository %s: waiting for the run that works in it: %w", s.Collab.Workflow, r.Name, err)
			}
			if ctx.Err() != nil {
				return fresh, err
			}
			return fresh, fatal(fmt.Errorf("copying repository %s: %w", r.Name, m.diskFull(s, err)))
		}
		if err := os.Rename(tmp, r.Path); err != nil {
			os.RemoveAll(tmp)
			return fresh, fmt.Errorf("workspace %s: %w", r.Name, err)
		}
		fresh[r.Name] = fromSource
		if shared {
			fresh[r.Name] = fromShared
		}
	}
	return fresh, nil
}

// copied says where a fresh workspace was copied from.
type copied int

const (
	fromSource copied = iota // the repository's source
	fromShared               // the workflow's shared workspace
	fromForge                // the forge's mirror, on the session's branch already
)

// forgeCheckout makes s.Repos[i]'s workspace from the forge (into tmp,
// renamed into place) and records its base, head and the commit it
// started from when that is not the session's (store.Repo.From).
func (m *Manager) forgeCheckout(ctx context.Context, s *store.Session, i int, tmp string, owner workspace.Owner) error {
	r := s.Repos[i]
	if m.cfg.Forge == nil {
		return fatal(fmt.Errorf("repository %s (%s): %w", r.Name, r.GitHub, errNoForge))
	}
	if err := m.cfg.Forge.Checkout(ctx, s, &r, tmp, owner); err != nil {
		os.RemoveAll(tmp)
		if ctx.Err() != nil {
			return err
		}
		if errors.As(err, new(permanentError)) {
			return fatal(fmt.Errorf("cloning %s from GitHub: %w", r.GitHub, err))
		}
		// Often passing (GitHub unreachable, a token being minted): the
		// session stays provisioning and is retried, like a lost box.
		return fmt.Errorf("cloning %s from GitHub: %w", r.GitHub, m.diskFull(s, err))
	}
	if err := os.Rename(tmp, r.Path); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("workspace %s: %w", r.Name, err)
	}
	s.Repos[i] = r
	_, err := m.st.UpdateSession(ctx, s.ID, func(st *store.Session) error {
		for j := range st.Repos {
			if st.Repos[j].Name == r.Name {
				st.Repos[j].Base, st.Repos[j].Head, st.Repos[j].From = r.Base, r.Head, r.From
			}
		}
		return nil
	})
	return err
}

// hideDataDir writes the data directory as "DATA" in a message a session's
// owner sees (an error, a state's reason): its host path is the admin's
// business, and every session's workspace is under it.
func (m *Manager) hideDataDir(msg string) string {
	return strings.ReplaceAll(msg, m.cfg.DataDir, "DATA")
}
