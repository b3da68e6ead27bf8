package session

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/agent/agents"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/workspace"
)

// Forge is where repositories named on a code host (GitHub's
// "owner/name") come from and where a session's work goes: package ghbot
// is GitHub's. The session layer calls it at four points and knows
// nothing else of the host:
//
//   - Create: Check asks the host whether Harvest can reach the
//     repository (Parse recognises the host's https URLs given as a
//     source), so a session on one it cannot is refused at once (400)
//     rather than failing when provisioned;
//   - provisioning: Checkout makes the workspace, a clone of the host-side
//     mirror on the session's branch (host git, in a directory no agent
//     has written yet);
//   - every box: Endpoint is the git endpoint served in it (see
//     agents.GitEndpoint), whose pushes it reports through emit;
//   - after every turn: AfterTurn publishes the work (pushes what the
//     agent committed and did not push, opens or updates the pull
//     request), reading the box's repository only through the box.
//
// A nil Forge refuses such repositories with a message saying how to
// configure one.
type Forge interface {
	// Parse recognises a source that names a repository on the host (an
	// https URL of it) and returns its "owner/name".
	Parse(source string) (repo string, ok bool)
	// Check says whether Harvest can reach repo (a well-formed
	// "owner/name") for a new session. An error wrapped in Permanent is
	// the host's definitive no (no such repository, the app is not
	// installed on it): the creation is refused with it (400). Any other
	// error is the host not answering: the creation is refused as
	// unavailable (503), to be retried.
	Check(ctx context.Context, repo string) error
	// Checkout makes dst (which must not exist) the session's clone of r
	// (r.GitHub at r.Ref, on r.Branch), owned by owner, and sets r.Base
	// and r.Head (and r.From, when the branch starts from commits that
	// are not the session's: a fork's pull request's).
	Checkout(ctx context.Context, s *store.Session, r *store.Repo, dst string, owner workspace.Owner) error
	// Endpoint is the git endpoint for a new box of s; emit records an
	// event of the session (a push, a refused push).
	Endpoint(ctx context.Context, s *store.Session, emit func(event.Payload)) (agents.GitEndpoint, error)
	// AfterTurn publishes what a turn did.
	AfterTurn(ctx context.Context, t TurnEnd) error
	// Ended is told that a session started from the host (Session.GitHub)
	// failed or stopped, with the session as it ended.
	Ended(ctx context.Context, s *store.Session) error
}

// TurnWatcher is an optional capability of a Forge: it shows a running
// turn where people look (GitHub's progress comment, edited as the agent
// goes). The runner calls WatchTurn when a turn begins, gives the watch
// it returns (nil: none) each event the agent emits in the turn, and
// calls its Done once the agent is done, before AfterTurn.
type TurnWatcher interface {
	WatchTurn(ctx context.Context, t TurnStart) TurnWatch
}

// TurnStart is a turn that begins, for TurnWatcher.WatchTurn.
type TurnStart struct {
	// Session is the session as the turn begins (a copy).
	Session *store.Session
	Turn    string
	// Message is the message the turn delivers (its Key is the sender's
	// idempotency key: ghbot's names the webhook delivery that sent it).
	Message *store.Message
}

// TurnWatch sees one turn's events. See is called on the turn's
// goroutine, once per event, in order, and must not block: a watch that
// cannot keep up coalesces (it shows the latest state), it never holds
// the agent up. Done is called once, after the last See; it may wait,
// bounded, for what the watch is sending, so that nothing it sends lands
// after AfterTurn's.
type TurnWatch interface {
	See(ev event.Event)
	Done()
}

// TurnEnd is a finished turn, for Forge.AfterTurn.
type TurnEnd struct {
	// Session is the session as the turn left it (a copy).
	Session *store.Session
	Turn    string
	// Message is the message the turn delivered.
	Message *store.Message
	// Box is the session's box, for reading its repositories (host code
	// never runs git in a workspace).
	Box     *sandbox.Sandbox
	Outcome agent.Outcome
	// Emit records an event of the session.
	Emit func(event.Payload)
	// Update changes the stored session (repositories' heads, the pull
	// request) in one transaction.
	Update func(ctx context.Context, fn func(*store.Session)) error
}

var forgeRepoPattern = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$`)

// ForgeRepo reports whether repo has the shape of "owner/name".
func ForgeRepo(repo string) bool {
	return forgeRepoPattern.MatchString(repo) && repo[len(repo)-1] != '.' && !regexp.MustCompile(`/\.\.?$`).MatchString(repo)
}

// Permanent marks a Forge error that retrying cannot fix (a repository the
// app cannot reach): the session fails with it. Other errors of Checkout
// are retried, like a box that could not start.
func Permanent(err error) error { return permanentError{err} }

type permanentError struct{ error }

func (p permanentError) Unwrap() error { return p.error }

// errNoForge is a GitHub repository on a server without GitHub.
var errNoForge = errors.New("this server has no GitHub configured: its operator starts harvest serve with --github-app-id and --github-app-key (or --github-token-file)")

// sessionBranch is the branch a session works on: its own.
func sessionBranch(id string) string { return "harvest/" + id }

// checkForgeRepo validates a RepoSpec naming a forge repository; it
// returns the repository and the problems, or an error (ErrUnavailable)
// when the forge could not be asked.
func (m *Manager) checkForgeRepo(ctx context.Context, i int, r RepoSpec) (string, []string, error) {
	repo := r.GitHub
	if repo == "" {
		return "", nil, nil
	}
	if r.Source != "" {
		return "", []string{fmt.Sprintf("repos[%d]: give source or github, not both", i)}, nil
	}
	if !ForgeRepo(repo) {
		return "", []string{fmt.Sprintf("repos[%d].github %q: give owner/name, like octocat/hello-world", i, repo)}, nil
	}
	if m.cfg.Forge == nil {
		return "", []string{fmt.Sprintf("repos[%d].github %s: %v", i, repo, errNoForge)}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, forgeCheckTimeout)
	defer cancel()
	err := m.cfg.Forge.Check(ctx, repo)
	var p permanentError
	switch {
	case errors.As(err, &p):
		return "", []string{fmt.Sprintf("repos[%d].github %s: %v", i, repo, err)}, nil
	case err != nil:
		return "", nil, fmt.Errorf("%w: repos[%d].github %s: GitHub could not be asked whether Harvest can reach it (%v); try again", ErrUnavailable, i, repo, err)
	}
	return repo, nil, nil
}

// forgeCheckTimeout bounds asking the forge about a new session's
// repository (a request of the caller's waits for it).
const forgeCheckTimeout = 30 * time.Second

// forgeEmit records an event of the session from outside its turn's
// goroutine (the git endpoint's pushes).
func (r *runner) forgeEmit(p event.Payload) {
	r.append(event.Event{Session: r.id, Time: r.d.clock.Now().UTC(), Turn: r.turnNow(), Agent: r.s.Agent, Data: p})
}

// forgeTimeout bounds publishing a turn's work.
const forgeTimeout = 5 * time.Minute

// afterTurn lets the forge publish a turn's work, bounded in time; a
// failure is reported as an event and never fails the session (the next
// turn publishes again).
func (r *runner) afterTurn(tid string, msg *store.Message, out agent.Outcome) {
	f := r.d.cfg.Forge
	if f == nil || r.box == nil || !hasForgeRepo(r.s) {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, forgeTimeout)
	defer cancel()
	cp := *r.s
	cp.Repos = append([]store.Repo(nil), r.s.Repos...)
	emit := func(p event.Payload) {
		r.append(event.Event{Session: r.id, Time: r.d.clock.Now().UTC(), Agent: r.s.Agent, Data: p})
	}
	err := f.AfterTurn(ctx, TurnEnd{
		Session: &cp, Turn: tid, Message: msg, Box: r.box, Outcome: out, Emit: emit,
		Update: func(ctx context.Context, fn func(*store.Session)) error {
			s, err := r.d.st.UpdateSession(ctx, r.id, func(s *store.Session) error {
				fn(s)
				return nil
			})
			if err == nil {
				r.s = r.d.host.withDefaults(s)
			}
			return err
		},
	})
	if err != nil && r.ctx.Err() == nil {
		r.log.Warn("publishing the turn's work", "turn", tid, "err", err)
		emit(event.GitHubFailed{What: "publishing the turn's work", Error: r.d.host.hideDataDir(err.Error())})
	}
}

// watchTurn asks the forge to watch turn tid (nil: it does not).
func (r *runner) watchTurn(tid string, msg *store.Message) TurnWatch {
	w, ok := r.d.cfg.Forge.(TurnWatcher)
	if !ok || !hasForgeRepo(r.s) {
		return nil
	}
	cp := *r.s
	cp.Repos = append([]store.Repo(nil), r.s.Repos...)
	return w.WatchTurn(r.ctx, TurnStart{Session: &cp, Turn: tid, Message: msg})
}

func hasForgeRepo(s *store.Session) bool {
	for _, r := range s.Repos {
		if r.GitHub != "" {
			return true
		}
	}
	return false
}
