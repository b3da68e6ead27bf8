package session

import (
	"context"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// DefaultRefreshEvery is how often a server looks at its repositories'
// environments (seed 000: every 30 minutes).
const DefaultRefreshEvery = 30 * time.Minute

// refreshRetryMax bounds the backoff after failed builds.
const refreshRetryMax = 4 * time.Hour

// RefreshEnvironments prepares again every repository that has an
// environment, on each backend it has one for: a repository whose branch
// tip, scripts, image or Harvest version changed is rebuilt; an unchanged
// one is not (its fingerprint is the same). A repository whose newest build
// failed is retried only once its backoff is over (the refresh interval,
// doubling with each failure, at most refreshRetryMax). A failed build
// never blocks a session: sessions start from the newest ready
// environment. Below the data directory's floor of free space it builds
// nothing (admission.go). It returns how many builds it began; they run in the
// background like Prepare's.
func (m *Manager) RefreshEnvironments(ctx context.Context) (int, error) {
	b, ok := m.cfg.Environments.(EnvBuilder)
	if !ok || b == nil {
		return 0, nil
	}
	if m.full() {
		// Below the floor of free space (admission.go, which logged it):
		// no rebuilds until there is room; the ready environments serve.
		return 0, nil
	}
	all, err := b.List(ctx, store.EnvironmentFilter{States: []string{store.EnvReady, store.EnvFailed, store.EnvBuilding}})
	if err != nil {
		return 0, err
	}
	type key struct{ repo, backend string }
	type info struct {
		newest   *store.Environment
		failed   int  // failed builds since the newest ready one
		counting bool // still counting them
	}
	repos := map[key]*info{}
	var order []key
	for _, e := range all { // newest first
		k := key{e.Repo, e.Backend}
		in := repos[k]
		if in == nil {
			in = &info{newest: e, counting: true}
			repos[k] = in
			order = append(order, k)
		}
		if in.counting {
			switch e.State {
			case store.EnvFailed:
				in.failed++
			case store.EnvReady:
				in.counting = false
			}
		}
	}
	now := m.clock.Now()
	n := 0
	for _, k := range order {
		e := repos[k].newest
		if e.State == store.EnvBuilding {
			continue
		}
		if e.State == store.EnvFailed {
			wait := m.cfg.refreshEvery() << min(max(repos[k].failed-1, 0), 8)
			if wait > refreshRetryMax {
				wait = refreshRetryMax
			}
			if now.Before(e.BuiltAt.Add(wait)) {
				continue
			}
		}
		spec := RepoSpec{Name: e.Name, Ref: e.Ref}
		if repo, ok := strings.CutPrefix(e.Repo, "github:"); ok {
			spec.GitHub = repo
		} else {
			spec.Source = e.Repo
		}
		got, err := m.Prepare(ctx, PrepareRequest{Repo: spec, Backend: e.Backend, Admin: true})
		if err != nil {
			m.log.Warn("refreshing an environment", "repo", e.Repo, "backend", e.Backend, "err", m.hideDataDir(err.Error()))
			continue
		}
		if got.State == store.EnvBuilding {
			n++
		}
	}
	return n, nil
}

// startRefresh starts the refresh loop, once, when the Manager builds
// environments and RefreshEvery is not negative.
func (m *Manager) startRefresh() {
	if _, ok := m.cfg.Environments.(EnvBuilder); !ok || m.cfg.refreshEvery() < 0 {
		return
	}
	m.refreshOnce.Do(func() {
		m.builds.Add(1)
		go m.refreshLoop()
	})
}

// refreshLoop refreshes the environments every RefreshEvery on the
// Manager's clock until it closes. It is one goroutine, Close waits for
// it.
func (m *Manager) refreshLoop() {
	defer m.builds.Done()
	for {
		at, stop := m.clock.At(m.clock.Now().Add(m.cfg.refreshEvery()))
		select {
		case <-m.base.Done():
			stop()
			return
		case <-at:
		}
		stop()
		if _, err := m.RefreshEnvironments(m.base); err != nil && m.base.Err() == nil {
			m.log.Warn("refreshing the environments", "err", err)
		}
		if _, err := m.CollectEnvironments(m.base); err != nil && m.base.Err() == nil {
			m.log.Warn("collecting old environments", "err", err)
		}
		m.refreshed.Add(1)
	}
}

// CollectEnvironments removes the environments no session needs: of each
// repository and backend, those older than its newest ready one, unless a
// session that has not ended started from it (its HOME is layered on it).
func (m *Manager) CollectEnvironments(ctx context.Context) (int, error) {
	b, ok := m.cfg.Environments.(EnvBuilder)
	if !ok || b == nil {
		return 0, nil
	}
	ss, err := m.st.ListSessions(ctx, store.SessionFilter{})
	if err != nil {
		return 0, err
	}
	used := map[string]bool{}
	for _, s := range ss {
		if s.Environment != "" && !s.State.Ended() {
			used[s.Environment] = true
		}
	}
	return b.Collect(ctx, func(id string) bool { return used[id] })
}
