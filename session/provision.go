package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/agents"
	"github.com/harvest-dev/harvest/base/tracing"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/workspace"
)

// boxMargin is how long a box outlives its session's max lifetime: the
// box's own time limit, which ends it even if Harvest is gone.
const boxMargin = 10 * time.Minute

// startTimeout bounds starting a box.
const startTimeout = 2 * time.Minute

// provision makes the session's workspaces, box and agent, and moves it to
// idle. Errors that retrying cannot fix are fatal (the session fails).
func (r *runner) provision() (err error) {
	// In the trace of the message it provisions for (tracing.go).
	pctx, span := r.span(r.ctx, r.d.traces.first(r.id), "session.provision", attribute.String("harvest.backend", r.s.Backend))
	defer func() { endSpan(span, err) }()
	if r.s.State != store.StateProvisioning {
		if err := r.setState(r.ctx, store.StateProvisioning, r.envReason(), nil); err != nil {
			return err
		}
	}
	moved, err := r.d.carry.sync(r.ctx, r.fence, r.s)
	if err != nil {
		return err
	}
	if moved != "" {
		r.append(r.event("", event.SessionState{State: string(r.s.State), Reason: moved}))
	}
	_, wspan := tracing.Start(pctx, tracerScope, "session.workspaces", trace.WithAttributes(attribute.Int("harvest.repos", len(r.s.Repos))))
	fresh, err := r.d.host.prepareWorkspaces(r.ctx, r.s)
	tracing.End(wspan, err)
	if err != nil {
		return err
	}
	_, bspan := tracing.Start(pctx, tracerScope, "session.box", trace.WithAttributes(attribute.String("harvest.backend", r.s.Backend), attribute.String("harvest.agent", r.s.Agent)))
	sb, ag, err := r.startBox(fresh)
	tracing.End(bspan, err)
	if err != nil {
		return err
	}
	handle := sb.Handle()
	enforced := enforcement(handle)
	h, err := json.Marshal(handle)
	if err == nil {
		err = r.setState(r.ctx, store.StateIdle, "", func(s *store.Session) { s.Sandbox, s.LimitsEnforced = h, &enforced })
	}
	if err != nil {
		r.discard(sb, ag)
		return err
	}
	r.setBox(sb)
	r.ag = ag
	if len(fresh) > 0 {
		r.d.carry.checkpoint(r.ctx, r.fence, r.s, "")
	}
	return nil
}

// enforcement is which of a session's limits its box h is held to: none
// on a backend without isolation (the host's); else memory and pids, the
// cgroup limits every isolating backend sets (sandbox's package doc),
// unless the backend said it could not (Handle.Unenforced); and the disk
// when the box's /tmp and HOME are on the session's disk, which holds its
// workspaces (Spec.DiskDir: boxDiskDir gives it only when the disk is
// mounted).
func enforcement(h sandbox.Handle) store.Enforcement {
	if h.Unsafe {
		return store.Enforcement{}
	}
	return store.Enforcement{
		Memory: !slices.Contains(h.Unenforced, "memory"),
		Pids:   !slices.Contains(h.Unenforced, "pids"),
		Disk:   h.Spec.DiskDir != "",
	}
}

// startBox starts a box on the session's workspaces and its agent.
func (r *runner) startBox(fresh map[string]copied) (*sandbox.Sandbox, agent.Agent, error) {
	s := r.s
	p, err := r.d.host.provider(s.Backend)
	if err != nil {
		return nil, nil, fatal(fmt.Errorf("backend %s: %w", s.Backend, err))
	}
	user, _ := boxUser()
	timeout := r.lifetimeEnd().Sub(r.d.clock.Now()) + boxMargin
	if timeout < boxMargin {
		timeout = boxMargin
	}
	spec := sandbox.Spec{
		ID:      newBoxID(s.ID),
		User:    user,
		Limits:  sandbox.Limits{MemoryBytes: s.Limits.MemoryBytes},
		Timeout: timeout,
		Labels:  map[string]string{"harvest.session": s.ID},
		DiskDir: r.d.host.boxDiskDir(s),
	}
	for _, repo := range s.Repos {
		spec.Workspaces = append(spec.Workspaces, sandbox.Workspace{Name: repo.Name, HostPath: repo.Path})
	}
	spec.Mounts = append(spec.Mounts, agents.Mounts(kindOf(s.Agent), r.d.cfg.cliPrefix())...)
	if s.Collab.Mode == store.Sequential {
		// The merge step's view of the parallel sessions' copies.
		runs := runsDir(r.d.cfg.DataDir, s.Owner, s.Collab.Workflow)
		if err := os.MkdirAll(runs, 0o755); err != nil {
			return nil, nil, fmt.Errorf("creating %s: %w", runs, err)
		}
		spec.Mounts = append(spec.Mounts, sandbox.Mount{HostPath: runs, BoxPath: RunsMount})
	}
	unpack, err := r.environment(&spec, fresh)
	if err != nil {
		return nil, nil, err
	}
	r.setBoxID(spec.ID)
	ctx, cancel := context.WithTimeout(r.ctx, startTimeout)
	defer cancel()
	sb, err := p.Start(ctx, spec)
	if err != nil {
		r.setBoxID("")
		if r.ctx.Err() != nil {
			return nil, nil, err
		}
		return nil, nil, fatal(fmt.Errorf("starting the sandbox (%s backend): %w", s.Backend, r.d.host.hostFull(err)))
	}
	if err := r.armBox(ctx, sb); err != nil {
		r.discard(sb, nil)
		return nil, nil, err
	}
	if err := r.checkout(ctx, sb, fresh); err != nil {
		return nil, nil, r.boxLost(sb, err)
	}
	if err := r.recordStarts(ctx, sb, fresh); err != nil {
		return nil, nil, r.boxLost(sb, err)
	}
	if unpack {
		if err := r.fromEnvironment(ctx, sb, s.Repos[0]); err != nil {
			return nil, nil, r.boxLost(sb, err)
		}
	}
	if err := r.startScript(ctx, sb); err != nil {
		return nil, nil, r.boxLost(sb, err)
	}
	ag, err := r.newAgent(ctx, sb)
	if err != nil {
		return nil, nil, r.boxLost(sb, err)
	}
	r.lostBoxes = 0
	return sb, ag, nil
}

// maxLostBoxes is how many boxes in a row may die while a session's box
// is being set up before the session fails.
const maxLostBoxes = 3

// boxLost discards box sb, a step of setting it up having failed with
// err, and says how the runner should take err: when the box died meanwhile (its fence ended it
// because a renewal reached it late on a loaded machine, it ran out of
// memory, someone killed it), the step failed for want of a box, not for
// anything in the session, and it is retried on a new one — up to
// maxLostBoxes times in a row, then the session fails with the box's
// last error.
func (r *runner) boxLost(sb *sandbox.Sandbox, err error) error {
	dead := !sb.Alive() && errors.Is(err, sandbox.ErrClosed)
	r.discard(sb, nil)
	if !dead {
		return err
	}
	r.lostBoxes++
	var fe *fatalError
	if r.lostBoxes >= maxLostBoxes {
		if errors.As(err, &fe) {
			return err
		}
		return fatal(fmt.Errorf("%d boxes in a row died while they were being set up; the last: %w", r.lostBoxes, err))
	}
	if errors.As(err, &fe) {
		err = fe.err
	}
	r.log.Warn("the box died while it was being set up; starting another", "box", sb.ID(), "lost", r.lostBoxes, "err", err)
	return fmt.Errorf("box %s died while it was being set up: %w", sb.ID(), err)
}

// attach gives a live session that has no box in hand (after a restart) its
// box back: the persisted one if it still runs, else a new one.
func (r *runner) attach() error {
	if here, _, err := r.d.carry.here(r.ctx, r.s); err != nil {
		return err
	} else if !here {
		// The box is another node's, on its machine, with the copy of
		// the workspace it was working on: this node restores the
		// checkpoint instead (provision). It is destroyed if this
		// machine can reach it, else forgotten.
		if len(r.s.Sandbox) > 0 {
			ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
			if err := r.d.host.destroyHandle(ctx, r.s.Backend, r.s.Sandbox); err != nil {
				r.log.Info("the box the session had on another node cannot be destroyed from here (its machine is gone?); forgetting it", "err", err)
			}
			cancel()
		}
		// Idle, nothing queued: the restore and the box wait for the
		// first message (nodes_dormant.go).
		if work, err := r.hasWork(); err != nil {
			return err
		} else if !work && r.s.State == store.StateIdle {
			return r.sleepAfterMove()
		}
		return r.setState(r.ctx, store.StateProvisioning, "the session moved from another node; restoring its workspace here", func(s *store.Session) { s.Sandbox = nil })
	}
	if len(r.s.Sandbox) > 0 {
		sb, ag, err := r.reattach()
		if err == nil {
			r.setBox(sb)
			r.ag = ag
			r.log.Info("reattached the box", "box", sb.ID())
			return nil
		}
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		r.log.Info("the box is gone or unusable; starting a new one on the kept workspace", "err", err)
		r.dropBox()
	}
	return r.setState(r.ctx, store.StateProvisioning, "the box was lost (restart); starting a new one on the kept workspace", func(s *store.Session) { s.Sandbox = nil })
}

// reattach recovers the persisted box and makes the agent in it.
func (r *runner) reattach() (*sandbox.Sandbox, agent.Agent, error) {
	h, err := decodeHandle(r.s.Sandbox)
	if err != nil {
		return nil, nil, err
	}
	p, err := r.d.host.provider(h.Backend)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(r.ctx, startTimeout)
	defer cancel()
	sb, err := p.Recover(ctx, h)
	if err != nil {
		return nil, nil, err
	}
	if err := r.armBox(ctx, sb); err != nil {
		sb.Close()
		return nil, nil, err
	}
	r.setBoxID(sb.ID())
	ag, err := r.newAgent(ctx, sb)
	if err != nil {
		sb.Close()
		return nil, nil, err
	}
	return sb, ag, nil
}

// discard releases a box (and agent) that will not be used.
func (r *runner) discard(sb *sandbox.Sandbox, ag agent.Agent) {
	ctx, cancel := r.finalCtx()
	defer cancel()
	if ag != nil {
		_ = ag.Close(ctx)
	}
	if err := sb.Destroy(ctx); err != nil {
		r.log.Warn("destroying an unused box", "box", sb.ID(), "err", err)
	}
	r.disarmed(sb)
	r.setBoxID("")
}

// checkout checks out the requested refs of freshly copied repositories,
// inside the box (host code never runs git in a workspace).
//
// A fresh copy that is not a git repository is made one, with its initial
// state committed, so the agent's git tools (status, diff, log) show what it
// changed, as in harvest run.
func (r *runner) checkout(ctx context.Context, sb *sandbox.Sandbox, fresh map[string]copied) error {
	for _, repo := range r.s.Repos {
		from, ok := fresh[repo.Name]
		if !ok {
			continue
		}
		// A copy of the workflow's shared workspace is on its working
		// branch already.
		if from == fromSource {
			if err := r.checkoutRef(ctx, sb, repo); err != nil {
				return err
			}
		}
		if b := r.s.Collab.Branch; b != "" {
			if err := gitInBox(ctx, sb, repo, "making the session's branch "+b, "checkout", "-q", "-b", b); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkoutRef checks out repo.Ref in a fresh copy, or makes sure the copy
// is a git repository.
func (r *runner) checkoutRef(ctx context.Context, sb *sandbox.Sandbox, repo store.Repo) error {
	if repo.Ref != "" {
		return gitInBox(ctx, sb, repo, "checking out "+repo.Ref+" (give a branch, tag or commit that exists)", "-c", "advice.detachedHead=false", "checkout", "-q", repo.Ref)
	}
	t, err := workspace.Track(ctx, sb, sb.WorkspacePath(repo.Name))
	if err != nil {
		return err
	}
	if t == workspace.MadeGit {
		r.log.Info("made a workspace a git repository to track the agent's changes", "session", r.id, "repo", repo.Name)
	}
	return nil
}

// gitInBox runs git args in repo's workspace, in the box; a failure is
// fatal to the session and says what was being done.
func gitInBox(ctx context.Context, sb *sandbox.Sandbox, repo store.Repo, doing string, args ...string) error {
	var errb bytes.Buffer
	st, err := sb.Run(ctx, &sandbox.Cmd{
		Args: append([]string{"git"}, args...),
		Dir:  sb.WorkspacePath(repo.Name), Stderr: &errb, OutputLimit: 64 << 10, Timeout: 2 * time.Minute,
	})
	if err != nil {
		return err
	}
	if !st.Success() {
		return fatal(fmt.Errorf("repository %s: %s failed (%s): %s", repo.Name, doing, st, strings.TrimSpace(errb.String())))
	}
	return nil
}

// recoverTurn ends a turn that was running when the previous server died.
// First its box is destroyed: the dead turn's processes may still run
// there (a tool's "sleep 30; echo >> file" goes on after the server is
// killed), and a turn is not over while any of them can still write to the
// workspace. A box that cannot be destroyed is an error (the runner retries)
// and nothing is journaled. Then turn.failed kind "interrupted" (unless its
// end was journaled; its lock was taken over when the runner started), and
// the session goes back to provisioning: a new box on the kept workspace.
func (r *runner) recoverTurn() error {
	n := r.s.Turns
	tid := turnID(n)
	if err := r.destroyDeadBox(); err != nil {
		return fmt.Errorf("ending the interrupted turn %s: %w", tid, err)
	}
	ended, usage, cost, err := r.turnEnd(tid)
	if err != nil {
		return err
	}
	if !ended {
		if err := r.repairDelivered(tid); err != nil {
			return err
		}
		kept := "but its conversation is as it was before the turn"
		if kindOf(r.s.Agent).Caps.StepCheckpoints {
			kept = "and so is its conversation up to its last finished step"
		}
		why := "Harvest stopped during this turn (a crash or a kill)"
		if r.fence.Epoch > 0 {
			// Several nodes: whatever stopped it, the same kind.
			why = "the node running this turn stopped, paused or lost the session's lease during it (a crash, a kill, a pause, or the store out of reach)"
		}
		p := event.TurnFailed{Kind: event.FailInterrupted, Usage: usage, Cost: cost,
			Error: why + ": what the agent did in the workspace is kept, " + kept + "; send the message again to go on"}
		if _, err := r.d.j.AppendSync(r.ctx, r.event(tid, p)); err != nil {
			return err
		}
	}
	return r.setState(r.ctx, store.StateProvisioning, "recovering: the turn "+tid+" was interrupted", func(s *store.Session) {
		s.Sandbox = nil
		s.Usage = s.Usage.Add(usage)
		s.CostUSD += cost
		s.ActiveAt = r.d.clock.Now().UTC()
	})
}

// destroyDeadBox destroys the persisted box of a turn the previous server
// left running, with every process in it, and forgets its handle. Unlike
// dropBox it fails when the box could not be destroyed.
func (r *runner) destroyDeadBox() error {
	if len(r.s.Sandbox) == 0 {
		return nil
	}
	ctx, cancel := r.finalCtx()
	defer cancel()
	if err := r.d.host.destroyHandle(ctx, r.s.Backend, r.s.Sandbox); err != nil {
		return err
	}
	s, err := r.d.st.UpdateSession(ctx, r.id, func(s *store.Session) error { s.Sandbox = nil; return nil })
	if err != nil {
		return err
	}
	r.s = r.d.host.withDefaults(s)
	r.setBoxID("")
	return nil
}

// turnEnd reads the journal for how turn tid ended: whether its end
// (turn.finished, .failed or .cancelled) was journaled, and the usage and
// cost to charge for it — the end event's, or, for a turn that was
// cancelled or never ended, the sum of the step.finished events it
// journaled. It pages back from the newest event to the turn's
// turn.started.
func (r *runner) turnEnd(tid string) (bool, event.Usage, float64, error) {
	const page = 512
	last, err := r.d.st.LastSeq(r.ctx, r.id)
	if err != nil {
		return false, event.Usage{}, 0, err
	}
	var steps event.Usage
	var stepCost float64
	cancelled := false
	for hi := last; hi > 0; hi -= page {
		lo := max(0, hi-page)
		evs, err := r.d.st.Events(r.ctx, r.id, lo, int(hi-lo))
		if err != nil {
			return false, event.Usage{}, 0, err
		}
		started := false
		for _, ev := range evs {
			if ev.Turn != tid {
				continue
			}
			switch p := ev.Data.(type) {
			case event.TurnFinished:
				return true, p.Usage, p.CostUSD, nil
			case event.TurnFailed:
				return true, p.Usage, p.Cost, nil
			case event.TurnCancelled:
				cancelled = true // it reports no usage: its steps' is summed
			case event.StepFinished:
				steps = steps.Add(p.Usage)
				stepCost += p.CostUSD
			case event.TurnStarted:
				started = true
			}
		}
		if started {
			break
		}
	}
	return cancelled, steps, stepCost, nil
}
