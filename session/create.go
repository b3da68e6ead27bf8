package session

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/workspace"
)

// What a new session's names, refs and title may be.
var (
	namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	refPattern  = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._/@^~+-]{0,199}$`)
)

const maxTitle = 200

// Create stores a new session (with its prompt as the first message, if any)
// and starts its runner, which copies the repositories, starts the box and
// delivers the prompt. It returns at once: progress is in the events.
func (m *Manager) Create(ctx context.Context, owner string, req CreateRequest) (*View, error) {
	if err := m.refusing(); err != nil {
		return nil, fmt.Errorf("creating a session: %w, try again when it is back", err)
	}
	var others []*store.Session
	if req.Workflow != "" && workflowPattern.MatchString(req.Workflow) {
		var err error
		if others, err = m.st.ListSessions(ctx, store.SessionFilter{Owner: owner, Workflow: req.Workflow}); err != nil {
			return nil, fmt.Errorf("creating a session: reading workflow %s: %w", req.Workflow, err)
		}
	}
	addrProblems, err := m.checkMCPAddrs(ctx, owner, req.MCPServers)
	if err != nil {
		return nil, err
	}
	s, first, err := m.newSession(ctx, owner, req, others)
	if ie, ok := errors.AsType[*InputError](err); ok {
		ie.Problems = append(ie.Problems, addrProblems...)
	}
	if err != nil {
		return nil, err
	}
	if len(addrProblems) > 0 {
		return nil, &InputError{Problems: addrProblems}
	}
	if err := m.checkMCPSecrets(ctx, s); err != nil {
		return nil, err
	}
	s.Environment = m.chooseEnvironment(ctx, s)
	// The user's budgets: a live-session cap reached refuses.
	if err := overBudget(ctx, m.st, s.User, m.clock.Now(), false); err != nil {
		if _, ok := errors.AsType[*BudgetError](err); ok {
			return nil, fmt.Errorf("creating a session: %w", err)
		}
		return nil, err
	}
	// The last check before anything is stored or made.
	if err := m.admit("creating a session"); err != nil {
		return nil, err
	}
	if err := m.st.CreateSession(ctx, s, first); err != nil {
		return nil, fmt.Errorf("storing the new session: %w", err)
	}
	unlock, queued, err := m.claimOrQueue(ctx, s.ID)
	if errors.Is(err, ErrElsewhere) {
		// Another node's takeover was quicker (it waits a TTL for new
		// sessions, so this is rare): the session runs there, and its
		// runner journals the prompt's message.queued (repair.go).
		m.log.Warn("a new session was taken over by another node before this one took its lease", "session", s.ID, "err", err)
		return &View{Session: s, Queue: []*store.Message{}}, nil
	}
	if err != nil {
		// Stored all the same: a node's takeover starts it.
		return nil, fmt.Errorf("taking the lease of the new session %s: %w", s.ID, err)
	}
	defer unlock()
	st := event.SessionState{State: string(s.State)}
	if queued {
		st.Reason = m.queuedReason()
	}
	m.append(event.Event{Session: s.ID, Time: s.CreatedAt, Data: st})
	v := &View{Session: s, Queue: []*store.Message{}}
	if first != nil {
		ev := event.Event{Session: s.ID, Time: s.CreatedAt, Data: event.MessageQueued{MessageID: first.ID, Text: first.Text, Mode: first.Mode, Position: 1}}
		if _, err := m.j.AppendSync(ctx, ev); err != nil {
			return nil, fmt.Errorf("journaling the first message of session %s: %w", s.ID, err)
		}
		v.Queue = append(v.Queue, first)
	}
	if first != nil {
		m.remember(ctx, s.ID, first.ID)
	}
	if queued {
		// No room here: nobody owns it now, and the first node with room
		// takes it over (nodes_place.go).
		m.log.Info("a new session waits for a place", "session", s.ID, "capacity", m.capacity())
		m.release(s.ID)
		return v, nil
	}
	m.wake(s.ID, wakeNew)
	return v, nil
}

// newSession validates req and builds the session row and first message.
func (m *Manager) newSession(ctx context.Context, owner string, req CreateRequest, others []*store.Session) (*store.Session, *store.Message, error) {
	var problems []string
	problems = append(problems, checkSizes(req)...)
	id := newSessionID()
	if req.ID != "" {
		id = req.ID
	}
	srcs := make([]*workspace.Source, len(req.Repos))
	forgeRepos := make([]string, len(req.Repos))
	for i, r := range req.Repos {
		if r.GitHub == "" && m.cfg.Forge != nil {
			if repo, ok := m.cfg.Forge.Parse(r.Source); ok {
				r.GitHub, r.Source = repo, ""
				req.Repos[i] = r
			}
		}
		if r.GitHub != "" {
			repo, fp, err := m.checkForgeRepo(ctx, i, r)
			if err != nil {
				return nil, nil, err
			}
			problems = append(problems, fp...)
			forgeRepos[i] = repo
			continue
		}
		src, err := m.cfg.Sources.Resolve(r.Source, req.Admin)
		if err != nil {
			problems = append(problems, fmt.Sprintf("repos[%d].source: %v", i, err))
			continue
		}
		srcs[i] = &src
	}
	collab, dir, cp := m.collabFor(owner, id, req, srcs, others)
	problems = append(problems, cp...)
	if len(req.Repos) == 0 {
		problems = append(problems, "repos is empty: give at least one repository (a directory on the server or a git URL) in repos[].source")
	}
	var repos []store.Repo
	names := map[string]bool{}
	for i, r := range req.Repos {
		src := srcs[i]
		if src == nil && forgeRepos[i] == "" {
			continue
		}
		name := r.Name
		switch {
		case name != "":
		case src != nil:
			name = src.Name()
		default:
			name = forgeRepos[i][strings.Index(forgeRepos[i], "/")+1:]
		}
		if !namePattern.MatchString(name) {
			problems = append(problems, fmt.Sprintf("repos[%d].name %q: use letters, digits, '.', '-' and '_' (at most 64), starting with a letter or digit", i, name))
			continue
		}
		if names[name] {
			problems = append(problems, fmt.Sprintf("repos[%d]: two repositories are named %q; give one a different name", i, name))
			continue
		}
		names[name] = true
		if r.Ref != "" && !refPattern.MatchString(r.Ref) {
			problems = append(problems, fmt.Sprintf("repos[%d].ref %q is not a branch, tag or commit name", i, r.Ref))
			continue
		}
		if src == nil {
			branch := r.Branch
			if branch == "" {
				branch = sessionBranch(id)
			}
			repos = append(repos, store.Repo{Name: name, Source: forgeRepos[i], GitHub: forgeRepos[i], Ref: r.Ref, Branch: branch, Base: r.Base, Path: dir + "/" + name})
			continue
		}
		repos = append(repos, store.Repo{Name: name, Source: r.Source, Origin: src.String(), Ref: r.Ref, Path: dir + "/" + name})
	}
	pr := req.PR
	switch {
	case !slices.ContainsFunc(repos, func(r store.Repo) bool { return r.GitHub != "" }):
		if pr != "" {
			problems = append(problems, "pr is for sessions on GitHub repositories (repos[].github): leave it out")
		}
	case pr == "":
		pr = store.PRDraft
	case pr != store.PRDraft && pr != store.PRReady && pr != store.PRNone:
		problems = append(problems, fmt.Sprintf("pr %q: use %q (the default), %q or %q", req.PR, store.PRDraft, store.PRReady, store.PRNone))
	}
	if collab.Workflow != "" && pr != "" {
		problems = append(problems, "GitHub repositories cannot be in a workflow yet: leave out workflow, or use a git URL source")
	}
	model := req.Model
	if model == "" {
		model = m.cfg.DefaultModel
	}
	if model == "" {
		problems = append(problems, "model is empty and the server has no default model: give model as provider/model, like anthropic/claude-sonnet-4-5")
	} else if _, err := m.client(model); err != nil {
		problems = append(problems, "model: "+err.Error())
	}
	backend := req.Backend
	if backend == "" {
		backend = m.cfg.DefaultBackend
	}
	if _, err := m.provider(backend); err != nil {
		problems = append(problems, "backend: "+err.Error())
	}
	mode := req.Mode
	switch mode {
	case "":
		mode = ModeQueue
	case ModeQueue, ModeInterrupt:
	default:
		problems = append(problems, fmt.Sprintf("mode %q: use %q (messages wait for the turn to end) or %q (a message cancels the running turn)", req.Mode, ModeQueue, ModeInterrupt))
	}
	kind, ap := m.checkAgent(req.Agent, model, backend, req.Terminal != nil)
	problems = append(problems, ap...)
	term, tp := CheckTerminal(kind, req.Terminal)
	problems = append(problems, tp...)
	eg, ep := m.checkEgress(req.Egress)
	problems = append(problems, ep...)
	limits, lp := m.cfg.limits(req.Limits)
	problems = append(problems, lp...)
	problems = append(problems, m.checkMCP(req.MCPServers)...)
	if len(problems) > 0 {
		return nil, nil, &InputError{Problems: problems}
	}
	now := m.clock.Now().UTC()
	s := &store.Session{
		ID: id, Owner: owner, User: req.User, Title: req.Title, State: store.StatePending,
		Agent: kind, Model: model, Backend: backend, Repos: repos,
		Limits: limits, Mode: mode, Collab: collab, Terminal: term, Egress: eg, MCPServers: req.MCPServers, CreatedAt: now, UpdatedAt: now, ActiveAt: now,
		PR: pr, GitHub: req.GitHub,
	}
	var first *store.Message
	if strings.TrimSpace(req.Prompt) != "" {
		first = &store.Message{ID: newMessageID(), Session: id, Text: req.Prompt, Mode: mode, State: store.MessageQueued, CreatedAt: now}
		if req.PromptKey != "" {
			first.Key, first.KeyOwner = req.PromptKey, owner
		}
	}
	return s, first, nil
}
