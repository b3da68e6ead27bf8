package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/workspace"
)

// Workflows and collaboration (seed 004).
//
// A session has a workspace of its own unless it is created in a workflow:
// a named group of sessions of one owner that work on the same
// repositories. How a session of a workflow shares them is its
// collaboration mode:
//
//	sequential (default)            parallel
//	━━━━━━━━━━━━━━━━━━━━            ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━
//	s1 ─commits─► s2 ─commits─► s3      ┌── s4 (branch harvest/{wf}/s4)
//	one workspace, one branch,      base ┼── s5 (branch harvest/{wf}/s5)
//	one run at a time (lock)             └── s6 (branch harvest/{wf}/s6)
//
// Sequential sessions share workspaces/workflow/{owner}/{wf}/{repo}: each
// sees what the previous ones did, and a streak of turns holds the
// workflow lock (key "workflow/{owner}/{wf}") instead of the session's own,
// so a second session's message waits, with a session.state event naming
// the run that holds it ("locked by run s1/t3"). A dead run's lock expires
// (its lease is not renewed).
//
// A parallel session gets a copy of its own under
// workspaces/workflow/{owner}/{wf}/runs/{session}/{repo}: of the shared
// workspace if a sequential session made one (copied under the workflow
// lock, so never half-written), else of the repository's source. The copy
// goes on a new branch harvest/{wf}/{session}, made in the box from the
// working branch (the repository's ref, or what was checked out). Parallel
// sessions take only their own session lock, so they run concurrently.
//
// The merge step is a sequential session: its box shows every parallel
// session's copy read-only at /runs/{session}/{repo}, so its agent fetches
// their branches (git fetch /runs/s4/api harvest/wf/s4) and merges them
// into the shared workspace. Host code never runs git in these copies.
//
// Workflows are per owner (API token): two tokens' workflows of the same
// name are different workflows, in different directories. The workflow's
// directory goes when its last session is deleted.

// RunsMount is where a sequential session's box shows the parallel
// sessions' copies of its workflow, read-only.
const RunsMount = "/runs"

// workflowPattern keeps workflow names usable in a git branch name.
var workflowPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// ownerDir names an owner's directory of workflows.
func ownerDir(owner string) string {
	if owner == "" {
		return "_"
	}
	return owner
}

// workflowDir is the directory of owner's workflow wf.
func workflowDir(dataDir, owner, wf string) string {
	return filepath.Join(dataDir, "workspaces", "workflow", ownerDir(owner), wf)
}

// runsDir holds the parallel sessions' copies of a workflow.
func runsDir(dataDir, owner, wf string) string {
	return filepath.Join(workflowDir(dataDir, owner, wf), "runs")
}

// workflowLockKey is the lock sequential sessions of a workflow share.
func workflowLockKey(owner, wf string) string {
	return "workflow/" + ownerDir(owner) + "/" + wf
}

// LockKeyOf is the lock a streak of turns of s holds: its own
// ("session/{id}"), or its workflow's if it is a sequential session in one.
func LockKeyOf(s *store.Session) string {
	if s.Collab.Workflow != "" && s.Collab.Mode == store.Sequential {
		return workflowLockKey(s.Owner, s.Collab.Workflow)
	}
	return lockKey(s.ID)
}

// parallelBranch is a parallel session's own branch.
func parallelBranch(wf, session string) string { return "harvest/" + wf + "/" + session }

// collabFor validates the workflow fields of a create request and returns
// the session's Collab and the directory its repositories go in, plus any
// problems. others are the owner's sessions already in the workflow; srcs
// are the request's repositories, resolved (nil where they are not valid).
func (m *Manager) collabFor(owner, id string, req CreateRequest, srcs []*workspace.Source, others []*store.Session) (store.Collab, string, []string) {
	var problems []string
	if req.Workflow == "" {
		if req.Collaboration != "" {
			problems = append(problems, "collaboration is only for sessions in a workflow: give workflow too, or leave collaboration out")
		}
		dir, err := WorkspaceDir(m.cfg.DataDir, Scope{Session: id})
		if err != nil {
			problems = append(problems, err.Error())
		}
		return store.Collab{}, dir, problems
	}
	if !workflowPattern.MatchString(req.Workflow) {
		problems = append(problems, fmt.Sprintf("workflow %q: use letters, digits, '-' and '_' (at most 64), starting with a letter or digit", req.Workflow))
	}
	c := store.Collab{Workflow: req.Workflow, Mode: req.Collaboration}
	switch c.Mode {
	case "":
		c.Mode = store.Sequential
	case store.Sequential, store.Parallel:
	default:
		problems = append(problems, fmt.Sprintf("collaboration %q: use %q (one workspace, one run at a time) or %q (a copy and a branch of its own, runs at once)", req.Collaboration, store.Sequential, store.Parallel))
	}
	if len(problems) > 0 {
		return c, "", problems
	}
	// A repository name means one repository in a workflow.
	sources := map[string]string{}
	for _, o := range others {
		for _, r := range o.Repos {
			sources[r.Name] = origin(r)
		}
	}
	for i, r := range req.Repos {
		src := srcs[i]
		if src == nil {
			continue // reported with the repos
		}
		name := r.Name
		if name == "" {
			name = src.Name()
		}
		if have, ok := sources[name]; ok && have != src.String() {
			problems = append(problems, fmt.Sprintf("repos[%d]: workflow %s's repository %q comes from another source than %s; give the same source or another name", i, req.Workflow, name, r.Source))
		}
	}
	dir := workflowDir(m.cfg.DataDir, owner, c.Workflow)
	if c.Mode == store.Parallel {
		c.Branch = parallelBranch(c.Workflow, id)
		dir = filepath.Join(runsDir(m.cfg.DataDir, owner, c.Workflow), id)
	}
	return c, dir, problems
}

// copySource is where a missing workspace of repo r of s is copied from: a
// parallel session's copy comes from the workflow's shared workspace when
// there is one.
func (m *Manager) copySource(s *store.Session, r store.Repo) (workspace.Source, bool, error) {
	if s.Collab.Mode == store.Parallel {
		shared := filepath.Join(workflowDir(m.cfg.DataDir, s.Owner, s.Collab.Workflow), r.Name)
		if _, err := os.Stat(shared); err == nil {
			return workspace.Source{Path: shared}, true, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return workspace.Source{}, false, fmt.Errorf("workflow %s: %w", s.Collab.Workflow, err)
		}
	}
	o := origin(r)
	if workspace.IsURL(o) {
		return workspace.Source{URL: o}, false, nil
	}
	if err := m.cfg.Sources.CheckCopy(o); err != nil {
		return workspace.Source{}, false, err
	}
	return workspace.Source{Path: o}, false, nil
}

// origin is what a repository is copied from: its resolved source (or, in
// a row older than that field, the source as given, which was resolved).
func origin(r store.Repo) string {
	if r.Origin != "" {
		return r.Origin
	}
	return r.Source
}

// withWorkflowLock runs fn holding the workflow's lock (as run
// "{session}/copy"), so a sequential session is not writing the shared
// workspace while it is copied. A held lock is a *store.LockError.
func (m *Manager) withWorkflowLock(ctx context.Context, s *store.Session, fn func() error) error {
	key := workflowLockKey(s.Owner, s.Collab.Workflow)
	holder := s.ID + "/copy"
	if _, err := m.st.AcquireLock(ctx, key, holder, m.cfg.LockTTL); err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := m.st.ReleaseLock(rctx, key, holder); err != nil {
			m.log.Warn("releasing the workflow lock after a copy", "session", s.ID, "err", err)
		}
	}()
	return fn()
}

// leaveWorkflow removes what s had in its workflow when it is deleted: its
// parallel copy, and the whole workflow directory if no other session of
// the workflow is left. A sequential session's lock is released only if
// one of its own runs holds it.
func (m *Manager) leaveWorkflow(ctx context.Context, s *store.Session) error {
	c := s.Collab
	if c.Workflow == "" {
		return nil
	}
	if c.Mode == store.Parallel {
		if err := os.RemoveAll(filepath.Join(runsDir(m.cfg.DataDir, s.Owner, c.Workflow), s.ID)); err != nil {
			return fmt.Errorf("removing its copy of workflow %s: %w", c.Workflow, err)
		}
	}
	if err := takeOverKey(ctx, m.st, workflowLockKey(s.Owner, c.Workflow), s.ID); err != nil {
		return fmt.Errorf("releasing the lock of workflow %s: %w", c.Workflow, err)
	}
	others, err := m.st.ListSessions(ctx, store.SessionFilter{Owner: s.Owner, Workflow: c.Workflow})
	if err != nil {
		return err
	}
	for _, o := range others {
		if o.ID != s.ID {
			return m.leaveWorkflowDisk(s, false)
		}
	}
	if err := m.leaveWorkflowDisk(s, true); err != nil {
		return fmt.Errorf("removing workflow %s's disk: %w", c.Workflow, err)
	}
	if err := os.RemoveAll(workflowDir(m.cfg.DataDir, s.Owner, c.Workflow)); err != nil {
		return fmt.Errorf("removing workflow %s's workspace: %w", c.Workflow, err)
	}
	return nil
}

// wakeWorkflow wakes the runners of the other sequential sessions of s's
// workflow, so one whose message waits for the lock tries at once instead
// of at its next retry.
func (m *Manager) wakeWorkflow(s *store.Session) {
	if s.Collab.Workflow == "" || s.Collab.Mode != store.Sequential {
		return
	}
	key := LockKeyOf(s)
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, r := range m.runners {
		if id != s.ID && r.lockKey() == key {
			r.notify(wakeOpts{})
		}
	}
}
