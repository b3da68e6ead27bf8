package ghbot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/gh"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/workspace"
)

// Mirrors stay fresh: a repository's host mirror is fetched in the
// background (RunMirrors) rather than when a session starts, so a
// session's checkout is a local clone of a current mirror, with no
// network on its path.
//
//   - Which: the repositories of live sessions (the store says), and those
//     with recent activity (a checkout, a delivery) in the last day.
//   - When: every MirrorRefresh, and soon after a push (the push event, or
//     another node's, through the store's marks: gh.MarkPushed).
//   - Within GitHub's limits: each fetch goes through gh.Git as background
//     work (held back inside a window and when the installation's budget
//     is down to its reserve; a held-back fetch waits for the window).
//
// A fetch waits while a session that pushed to the repository in its turn
// publishes that turn (AfterTurn): the push's webhook comes as the turn
// ends, and the fetch it wakes (a git process here, upload-pack there)
// would take the cores from the turn's reads in the box on the pull
// request's path. It goes once the turn's end is told (or mirrorHold
// after the push, for a turn that goes on long after it).
//
// A checkout fetches itself only when the mirror is missing, older than
// MirrorRefresh and a minute, older than the last push known, or lacks the
// ref it starts from; and always when the app is not subscribed to push
// events (pushes would go unnoticed).
// A checkout that finds a fetch of the mirror running, begun after the
// last push known, waits for it (a minute at most) rather than asking
// GitHub again: a push, its background fetch and a mention right after
// cost one fetch.

// mirrorState is what this process knows of its mirrors. Guarded by
// Service.mu.
type mirrorState struct {
	fetched map[string]time.Time // repo → when its last fetch began
	active  map[string]time.Time // repo → its last activity
	next    map[string]time.Time // repo → no background fetch before (a window, a failure)
	wake    chan struct{}        // buffered 1: a push or a new repository
	// flying is the fetch of each repo running now, the latest begun: a
	// checkout that finds one begun after the last push waits for it
	// (up to mirrorJoin) instead of asking GitHub a second time.
	flying map[string]*mirrorFetch
	// held are the sessions that pushed to a repository in their turn
	// (repo → session → until when at most): its background fetch waits
	// for their turns' ends (holdMirror, releaseMirrors).
	held map[string]map[string]time.Time
}

// mirrorFetch is one fetch of a mirror; done is closed when it ends,
// however it ends.
type mirrorFetch struct {
	start time.Time
	done  chan struct{}
}

// mirrorJoin bounds how long a checkout waits for a fetch already running
// (one held back by GitHub's limits may wait long): past it, the checkout
// fetches itself.
const mirrorJoin = time.Minute

// mirrorHold bounds how long a session's push holds its repository's
// background fetch back (a turn that goes on after it).
const mirrorHold = 10 * time.Second

// mirrorRecent is how long a repository with no live session is kept
// fresh after its last activity.
const mirrorRecent = 24 * time.Hour

// mirrorTick is how often RunMirrors looks for stale mirrors (a push
// another node heard of shows then).
const mirrorTick = 30 * time.Second

func (m *mirrorState) init() {
	m.fetched, m.active, m.next = map[string]time.Time{}, map[string]time.Time{}, map[string]time.Time{}
	m.flying = map[string]*mirrorFetch{}
	m.held = map[string]map[string]time.Time{}
	m.wake = make(chan struct{}, 1)
}

func repoKey(repo string) string { return strings.ToLower(repo) }

// touch records activity on repo: it is kept fresh for a day.
func (s *Service) touch(repo string) {
	if repo == "" {
		return
	}
	s.mu.Lock()
	_, known := s.mirrors.active[repoKey(repo)]
	s.mirrors.active[repoKey(repo)] = s.cfg.Now()
	s.mu.Unlock()
	if !known {
		s.wakeMirrors()
	}
}

func (s *Service) wakeMirrors() {
	select {
	case s.mirrors.wake <- struct{}{}:
	default:
	}
}

// Pushed records a push to repo at at (a push event): its mirror is
// stale here and on the other nodes; one kept fresh is fetched soon (a
// repository Harvest does not work on is not fetched for a push).
func (s *Service) Pushed(ctx context.Context, repo string, at time.Time) {
	s.gh.MarkPushed(ctx, repo, at)
	s.wakeMirrors()
}

// holdMirror holds repo's background fetch back until session's turn
// end is published (releaseMirrors), mirrorHold at most: the session
// pushed to it.
func (s *Service) holdMirror(session, repo string) {
	k := repoKey(repo)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mirrors.held[k] == nil {
		s.mirrors.held[k] = map[string]time.Time{}
	}
	s.mirrors.held[k][session] = s.cfg.Now().Add(mirrorHold)
}

// releaseMirrors lets the fetches session held back go: its turn's end
// is published.
func (s *Service) releaseMirrors(session string) {
	released := false
	s.mu.Lock()
	for k, m := range s.mirrors.held {
		if _, ok := m[session]; ok {
			delete(m, session)
			released = true
		}
		if len(m) == 0 {
			delete(s.mirrors.held, k)
		}
	}
	s.mu.Unlock()
	if released {
		s.wakeMirrors()
	}
}

// heldUntil is when repo's background fetch may go (zero: now).
func (s *Service) heldUntil(k string) time.Time {
	now := s.cfg.Now()
	var until time.Time
	s.mu.Lock()
	defer s.mu.Unlock()
	for session, t := range s.mirrors.held[k] {
		if !now.Before(t) {
			delete(s.mirrors.held[k], session)
			continue
		}
		if t.After(until) {
			until = t
		}
	}
	return until
}

// mirrorPath is where repo's mirror lives on this host.
func (s *Service) mirrorPath(repo string) (string, error) {
	return s.cfg.Mirrors.Path(mirrorKey(s.gh.WebURL(), repo))
}

// fresh reports whether repo's mirror can be cloned as it is: push
// events tell Harvest of pushes (the app is subscribed to them), and the
// mirror exists, was fetched within MirrorRefresh and a minute, and after
// the last push known. Without push events a checkout always fetches.
func (s *Service) fresh(ctx context.Context, repo string) (string, bool) {
	if s.cfg.MirrorRefresh <= 0 || !s.gh.Subscribed(ctx, "push") {
		return "", false
	}
	s.join(ctx, repo)
	path, err := s.mirrorPath(repo)
	if err != nil {
		return "", false
	}
	if _, err := os.Stat(filepath.Join(path, "HEAD")); err != nil {
		return "", false
	}
	s.mu.Lock()
	at, ok := s.mirrors.fetched[repoKey(repo)]
	s.mu.Unlock()
	if !ok || s.cfg.Now().Sub(at) > s.cfg.MirrorRefresh+time.Minute {
		return "", false
	}
	if last := s.gh.LastPush(ctx, repo); !last.Before(at) {
		return "", false
	}
	return path, true
}

// join waits for the fetch of repo running now, if it began after the
// last push known (it will bring what a checkout needs), for mirrorJoin
// at most or until ctx ends.
func (s *Service) join(ctx context.Context, repo string) {
	s.mu.Lock()
	f := s.mirrors.flying[repoKey(repo)]
	s.mu.Unlock()
	if f == nil || !s.gh.LastPush(ctx, repo).Before(f.start) {
		return
	}
	t := time.NewTimer(mirrorJoin)
	defer t.Stop()
	select {
	case <-f.done:
	case <-t.C:
	case <-ctx.Done():
	}
}

// mirrorHas reports whether the mirror at path has what r's checkout
// starts from: its ref (a branch, tag or commit), and the commit the
// session pushed before (a session checked out again). Without push
// events a fresh mirror may lack them; then the checkout fetches.
func (s *Service) mirrorHas(ctx context.Context, path string, r *store.Repo) bool {
	if r.Ref != "" {
		found := false
		for _, ref := range []string{"refs/heads/" + r.Ref, "refs/tags/" + r.Ref, r.Ref + "^{commit}"} {
			if _, err := s.cfg.Mirrors.Git(ctx, path, "rev-parse", "--verify", "--quiet", ref); err == nil {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if r.Pushed != "" {
		if _, err := s.cfg.Mirrors.Git(ctx, path, "cat-file", "-e", r.Pushed+"^{commit}"); err != nil {
			return false
		}
	}
	return true
}

// fetchMirror brings repo's mirror up to date (making it on first use)
// within GitHub's limits, with a token for scope, and returns its path.
func (s *Service) fetchMirror(ctx context.Context, scope gh.Scope, repo, def string, refs ...string) (string, error) {
	var path string
	start := s.cfg.Now()
	k := repoKey(repo)
	f := &mirrorFetch{start: start, done: make(chan struct{})}
	s.mu.Lock()
	s.mirrors.flying[k] = f
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.mirrors.flying[k] == f {
			delete(s.mirrors.flying, k)
		}
		s.mu.Unlock()
		close(f.done)
	}()
	err := s.gh.Git(ctx, []string{repo}, func(ctx context.Context) error {
		var err error
		path, err = s.cfg.Mirrors.Sync(ctx, workspace.Remote{
			Key: mirrorKey(s.gh.WebURL(), repo), URL: s.gh.RepoURL(repo), DefaultBranch: def, Refs: refs,
			Auth: func(ctx context.Context) (string, string, error) {
				t, err := s.gh.Token(ctx, scope)
				return "x-access-token", t.Value, err
			},
		})
		return err
	})
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.mirrors.fetched[k] = start
	s.mu.Unlock()
	return path, nil
}

// mirrorScope is what a background fetch needs: reading the contents.
func mirrorScope(repo string) gh.Scope {
	return gh.Scope{Repos: []string{repo}, Permissions: map[string]string{"contents": "read", "metadata": "read"}}
}

// RunMirrors keeps mirrors fresh until ctx ends (see the top of the
// file). live lists the repositories of live sessions. It is one
// goroutine, the caller's.
func (s *Service) RunMirrors(ctx context.Context, live func(ctx context.Context) ([]string, error)) {
	if s.cfg.MirrorRefresh <= 0 {
		return
	}
	t := time.NewTicker(min(mirrorTick, s.cfg.MirrorRefresh))
	defer t.Stop()
	held := time.NewTimer(time.Hour)
	held.Stop()
	defer held.Stop()
	for {
		if next := s.refreshMirrors(ctx, live); !next.IsZero() {
			held.Reset(max(next.Sub(s.cfg.Now()), time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-held.C:
		case <-s.mirrors.wake:
		}
	}
}

// refreshMirrors fetches, one at a time, each mirror that is due and not
// held back; it returns when the first one held back may go (zero: none
// is).
func (s *Service) refreshMirrors(ctx context.Context, live func(ctx context.Context) ([]string, error)) (next time.Time) {
	now := s.cfg.Now()
	want := map[string]string{} // key → repo
	if live != nil {
		repos, err := live(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("listing the repositories of live sessions (keeping the others' mirrors fresh)", "err", err)
		}
		for _, r := range repos {
			want[repoKey(r)] = r
		}
	}
	s.mu.Lock()
	for k, at := range s.mirrors.active {
		if now.Sub(at) > mirrorRecent {
			delete(s.mirrors.active, k)
			continue
		}
		if _, ok := want[k]; !ok {
			want[k] = k
		}
	}
	s.mu.Unlock()
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if ctx.Err() != nil {
			return next
		}
		repo := want[k]
		s.mu.Lock()
		fetched, ok := s.mirrors.fetched[k]
		after := s.mirrors.next[k]
		s.mu.Unlock()
		due := !ok || now.Sub(fetched) >= s.cfg.MirrorRefresh || !s.gh.LastPush(ctx, repo).Before(fetched)
		if !due || now.Before(after) {
			continue
		}
		if until := s.heldUntil(k); !until.IsZero() {
			if next.IsZero() || until.Before(next) {
				next = until
			}
			continue
		}
		s.refreshOne(ctx, repo)
	}
	return next
}

// refreshOne fetches repo's mirror as background work.
func (s *Service) refreshOne(ctx context.Context, repo string) {
	fctx, cancel := context.WithTimeout(gh.NoWait(gh.Background(ctx)), 10*time.Minute)
	defer cancel()
	def, err := s.defaultBranchOf(fctx, repo)
	if err == nil {
		_, err = s.fetchMirror(fctx, mirrorScope(repo), repo, def)
	}
	next := time.Time{}
	switch {
	case err == nil:
		s.log.Debug("mirror refreshed", "repo", repo)
	case ctx.Err() != nil:
		return
	case errors.Is(err, gh.ErrRateLimited):
		next = gh.RetryAt(err)
		s.log.Info("a mirror's refresh waits for GitHub's limits", "repo", repo, "until", next.UTC().Format(time.RFC3339))
	case gh.Permanent(err):
		// Not installed any more, suspended: no point trying soon; a
		// session's checkout says why.
		next = s.cfg.Now().Add(s.cfg.MirrorRefresh)
		s.log.Warn("refreshing a mirror", "repo", repo, "err", err)
	default:
		next = s.cfg.Now().Add(time.Minute)
		s.log.Warn("refreshing a mirror (trying again in a minute)", "repo", repo, "err", err)
	}
	s.mu.Lock()
	if next.IsZero() {
		delete(s.mirrors.next, repoKey(repo))
	} else {
		s.mirrors.next[repoKey(repo)] = next
	}
	s.mu.Unlock()
}

// defaultBranchOf is repo's default branch (cached after the first ask).
func (s *Service) defaultBranchOf(ctx context.Context, repo string) (string, error) {
	c, err := s.gh.Client(mirrorScope(repo))
	if err != nil {
		return "", err
	}
	return s.defaultBranch(ctx, c, repo)
}
