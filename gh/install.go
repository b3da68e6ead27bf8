package gh

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// Installations come and go (GitHub's installation and
// installation_repositories webhooks): the caches of installation ids and
// tokens are cleared so the next request asks GitHub again, and a
// suspended installation is marked so nothing is done for it.

// suspendedFor is how long a suspension is remembered without an
// unsuspend: long, since only the unsuspend event (or GitHub answering a
// token request) lifts it.
const suspendedFor = 100 * 365 * 24 * time.Hour

// ForgetInstallation drops every cached fact of an installation: which
// repositories it covers, its permissions and its tokens. The next request asks GitHub.
func (g *GitHub) ForgetInstallation(id int64) {
	prefix := strconv.FormatInt(id, 10) + "|"
	g.mu.Lock()
	defer g.mu.Unlock()
	for r, inst := range g.install {
		if inst == id {
			delete(g.install, r)
		}
	}
	delete(g.granted, id)
	g.dropRepoList()
	for k := range g.tokens {
		if strings.HasPrefix(k, prefix) {
			// One being minted: its waiters still get it; it is not
			// reused.
			delete(g.tokens, k)
		}
	}
}

// ForgetRepos drops the cached installation of repositories ("owner/name")
// and the tokens of the installations that covered them.
func (g *GitHub) ForgetRepos(repos ...string) {
	var insts []int64
	g.mu.Lock()
	g.dropRepoList()
	for _, r := range repos {
		if id, ok := g.install[strings.ToLower(r)]; ok {
			insts = append(insts, id)
			delete(g.install, strings.ToLower(r))
		}
	}
	g.mu.Unlock()
	for _, id := range insts {
		g.ForgetInstallation(id)
	}
}

// ForgetAccount drops the cached installations of an account's
// repositories (an app installed anew there gets a new id).
func (g *GitHub) ForgetAccount(login string) {
	prefix := strings.ToLower(login) + "/"
	var insts []int64
	g.mu.Lock()
	g.dropRepoList()
	for r, id := range g.install {
		if strings.HasPrefix(r, prefix) {
			insts = append(insts, id)
		}
	}
	g.mu.Unlock()
	for _, id := range insts {
		g.ForgetInstallation(id)
	}
}

// Suspend marks an installation suspended, here and for the other nodes:
// nothing is sent for it until Unsuspend.
func (g *GitHub) Suspend(ctx context.Context, id int64, note string) {
	m := Mark{Scope: InstallationScope(id), Kind: KindSuspended, Until: g.now().Add(suspendedFor), Note: note}
	g.limits.mu.Lock()
	b := g.limits.budget(m.Scope)
	if g.limits.shared == nil {
		b.windows[KindSuspended] = m
	} else {
		// Only in the shared marks: an unsuspend another node hears of
		// lifts it here at the next read.
		b.shared[KindSuspended] = m
	}
	g.limits.mu.Unlock()
	g.ForgetInstallation(id)
	g.limits.share(ctx, m)
}

// Unsuspend lifts a suspension (and forgets the installation's tokens).
func (g *GitHub) Unsuspend(ctx context.Context, id int64) {
	scope := InstallationScope(id)
	g.limits.mu.Lock()
	delete(g.limits.budget(scope).windows, KindSuspended)
	delete(g.limits.budget(scope).shared, KindSuspended)
	g.limits.mu.Unlock()
	g.ForgetInstallation(id)
	if g.limits.shared != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := g.limits.shared.DeleteMark(sctx, scope, KindSuspended); err != nil {
			g.log.Warn("telling the other nodes an installation is unsuspended", "installation", id, "err", err)
		}
	}
}

// Suspended reports whether an installation is marked suspended (here or
// by another node).
func (g *GitHub) Suspended(ctx context.Context, id int64) bool {
	return g.checkSuspended(ctx, id) != nil
}

// checkSuspended is a *SuspendedError for a suspended installation.
func (g *GitHub) checkSuspended(ctx context.Context, id int64) error {
	scope := InstallationScope(id)
	g.limits.refresh(ctx, scope)
	if m := g.limits.blocked(scope, "", false); m.Kind == KindSuspended {
		return &SuspendedError{Scope: scope, Note: m.Note}
	}
	return nil
}

// ShareLimits makes the nodes share what they learn of GitHub's limits
// and installations through s. Call it before the first request.
func (g *GitHub) ShareLimits(s Shared) { g.limits.shared = s }

// pushedTTL is how long a push is remembered: longer than any mirror's
// refresh period, so a mirror fetched before a push is known stale until
// it is fetched again.
const pushedTTL = 24 * time.Hour

// MarkPushed records that repo ("owner/name") was pushed to at at, here
// and for the other nodes: mirrors fetched before are stale.
func (g *GitHub) MarkPushed(ctx context.Context, repo string, at time.Time) {
	m := Mark{Scope: "repo:" + strings.ToLower(repo), Kind: KindPushed, Until: at.Add(pushedTTL), Note: at.UTC().Format(time.RFC3339Nano)}
	g.limits.mu.Lock()
	b := g.limits.budget(m.Scope)
	if m.Until.After(b.windows[KindPushed].Until) {
		b.windows[KindPushed] = m
	}
	g.limits.mu.Unlock()
	g.limits.share(ctx, m)
}

// LastPush is when repo was last pushed to, as this node heard or another
// told (zero: no push in the last day).
func (g *GitHub) LastPush(ctx context.Context, repo string) time.Time {
	scope := "repo:" + strings.ToLower(repo)
	g.limits.refresh(ctx, scope)
	g.limits.mu.Lock()
	defer g.limits.mu.Unlock()
	b := g.limits.budget(scope)
	var last time.Time
	for _, w := range []map[string]Mark{b.windows, b.shared} {
		if m, ok := w[KindPushed]; ok && m.Until.Add(-pushedTTL).After(last) {
			last = m.Until.Add(-pushedTTL)
		}
	}
	return last
}
