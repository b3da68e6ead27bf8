package gh

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sim/ghsim"
)

// limited is a GitHub on the stand-in whose waits move the shared clock
// instead of sleeping, so a 20-second window costs no wall time.
func (s *standIn) limited(t *testing.T, shared Shared) *GitHub {
	t.Helper()
	g, err := New(Config{APIURL: s.gs.URL() + "/api/v3/", WebURL: s.gs.URL() + "/", AppID: s.app.ID,
		PrivateKey: []byte(s.app.PrivateKeyPEM), Now: s.clock,
		Wait: func(ctx context.Context, d time.Duration) error { s.advance(d); return ctx.Err() }})
	if err != nil {
		t.Fatal(err)
	}
	if shared != nil {
		g.ShareLimits(shared)
	}
	return g
}

// sent lists the times of the requests the stand-in got for path (as
// received, /api/v3 included), with their statuses.
func (s *standIn) sent(path string) (times []time.Time, statuses []int) {
	for _, r := range s.gs.Requests() {
		if r.Path == path {
			times, statuses = append(times, r.Time), append(statuses, r.Status)
		}
	}
	return times, statuses
}

func withDeadline(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestSecondaryLimit: GitHub answers a secondary limit (403, Retry-After
// 10): a caller that may wait sends nothing more for 10 s, then its
// request goes through; every other caller of the installation (another
// client, another scope of it) is held back without a request until the
// window ends, failing at once with when to retry if it may not wait; the
// other installation is not held back.
func TestSecondaryLimit(t *testing.T) {
	s := newStandIn(t)
	g := s.limited(t, nil)
	ctx := withDeadline(t, time.Minute)
	c, err := g.Client(SessionScope("acme/app"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Repositories.Get(ctx, "acme", "app"); err != nil { // the token, before the limit
		t.Fatal(err)
	}
	if _, err := g.Installation(ctx, "acme/lib"); err != nil { // and acme/lib's installation
		t.Fatal(err)
	}
	if err := s.gs.SetSecondaryLimit(ghsim.SecondaryLimitSpec{LimitScope: ghsim.LimitScope{InstallationID: s.inst["acme"]}, For: 10}); err != nil {
		t.Fatal(err)
	}
	start := s.clock()
	// Not allowed to wait: the first request learns the window.
	_, _, err = c.Repositories.Get(NoWait(ctx), "acme", "app")
	var rl *RateLimitedError
	if !errors.As(err, &rl) || !rl.Sent || rl.Kind != KindSecondary || !rl.RetryAt.Equal(start.Add(10*time.Second+retryAfterMargin)) || !errors.Is(err, ErrRateLimited) {
		t.Fatalf("the limited request: %v; want a secondary limit until +10s and the margin, sent", err)
	}
	if !strings.Contains(err.Error(), "secondary rate limit") {
		t.Errorf("the error does not say what limit: %v", err)
	}
	before := len(s.gs.Requests())
	// Another client of the same installation, another scope: held back,
	// nothing sent.
	c2, _ := g.Client(Scope{Repos: []string{"acme/lib"}, Permissions: map[string]string{"issues": "write"}})
	_, _, err = c2.Issues.ListComments(NoWait(ctx), "acme", "lib", 1, nil)
	if !errors.As(err, &rl) || rl.Sent || !RetryAt(err).Equal(start.Add(10*time.Second+retryAfterMargin)) {
		t.Fatalf("another caller during the window: %v; want held back until +10s and the margin", err)
	}
	if n := len(s.gs.Requests()); n != before {
		t.Fatalf("%d requests sent inside the window", n-before)
	}
	// A caller with no deadline cannot wait either.
	if _, _, err := c.Repositories.Get(context.Background(), "acme", "app"); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("a caller without a deadline: %v; want the limit", err)
	}
	// The other installation is not limited.
	o, _ := g.Client(SessionScope("other/x"))
	if _, _, err := o.Repositories.Get(NoWait(ctx), "other", "x"); err != nil {
		t.Fatalf("another installation: %v", err)
	}
	// A caller that may wait: one request, after the window.
	if _, _, err := c.Repositories.Get(ctx, "acme", "app"); err != nil {
		t.Fatalf("after waiting: %v", err)
	}
	times, statuses := s.sent("/api/v3/repos/acme/app")
	var refused, inside int
	for i, at := range times {
		if at.After(start) && at.Before(start.Add(10*time.Second)) {
			inside++
		}
		if statuses[i] == http.StatusForbidden {
			refused++
		}
	}
	if refused != 1 || inside != 0 || statuses[len(statuses)-1] != http.StatusOK || times[len(times)-1].Before(start.Add(10*time.Second)) {
		t.Errorf("requests to acme/app: %v %v (window %v+10s); want one refused, none inside, then one after", times, statuses, start)
	}
}

// TestPrimaryLimit: the answer that uses the last request of the hour
// closes the window until x-ratelimit-reset: nothing is sent before; a
// limit GitHub answers with (403, remaining 0) does the same.
func TestPrimaryLimit(t *testing.T) {
	s := newStandIn(t)
	g := s.limited(t, nil)
	ctx := withDeadline(t, time.Minute)
	c, _ := g.Client(SessionScope("acme/app"))
	if _, _, err := c.Repositories.Get(ctx, "acme", "app"); err != nil {
		t.Fatal(err)
	}
	if err := s.gs.SetRateLimit(ghsim.RateLimitSpec{LimitScope: ghsim.LimitScope{InstallationID: s.inst["acme"]}, Remaining: 1, ResetIn: 20}); err != nil {
		t.Fatal(err)
	}
	start := s.clock()
	reset := start.Add(20 * time.Second).Truncate(time.Second) // as x-ratelimit-reset says it
	retry := reset.Add(time.Second)                            // and a second for the clocks
	if _, _, err := c.Repositories.Get(ctx, "acme", "app"); err != nil {
		t.Fatal(err)
	}
	before := len(s.gs.Requests())
	_, _, err := c.Repositories.Get(NoWait(ctx), "acme", "app")
	if rl := new(RateLimitedError); !errors.As(err, &rl) || rl.Sent || rl.Kind != "core" || !rl.RetryAt.Equal(retry) {
		t.Fatalf("past the last request: %v; want held back until a second after the reset %v", err, reset)
	}
	if w := g.Window(InstallationScope(s.inst["acme"]), "core"); !w.Until.Equal(retry) {
		t.Errorf("Window: %+v", w)
	}
	if n := len(s.gs.Requests()); n != before {
		t.Fatalf("%d requests sent past the limit", n-before)
	}
	if _, _, err := c.Repositories.Get(ctx, "acme", "app"); err != nil {
		t.Fatalf("after the reset: %v", err)
	}
	times, _ := s.sent("/api/v3/repos/acme/app")
	if last := times[len(times)-1]; last.Before(reset) {
		t.Errorf("a request at %v, before the reset %v", last, reset)
	}

	// GitHub's own refusal: 403 with remaining 0.
	s2 := newStandIn(t)
	g2 := s2.limited(t, nil)
	c2, _ := g2.Client(SessionScope("acme/app"))
	if _, _, err := c2.Repositories.Get(ctx, "acme", "app"); err != nil {
		t.Fatal(err)
	}
	if err := s2.gs.SetRateLimit(ghsim.RateLimitSpec{LimitScope: ghsim.LimitScope{InstallationID: s2.inst["acme"]}, Remaining: 0, ResetIn: 20}); err != nil {
		t.Fatal(err)
	}
	_, _, err = c2.Repositories.Get(NoWait(ctx), "acme", "app")
	if rl := new(RateLimitedError); !errors.As(err, &rl) || !rl.Sent || rl.Kind != "core" || !strings.Contains(rl.Note, "API rate limit exceeded for installation") {
		t.Fatalf("GitHub's 403: %v", err)
	}
}

// TestServerErrors: 5xx answers to a read are retried after a pause (1 s,
// then 2 s, with jitter) and the read succeeds; a write is not repeated
// (GitHub may have done it) and the pause holds the installation's next
// request back.
func TestServerErrors(t *testing.T) {
	s := newStandIn(t)
	g := s.limited(t, nil)
	ctx := withDeadline(t, time.Minute)
	c, _ := g.Client(SessionScope("acme/app"))
	if _, _, err := c.Repositories.Get(ctx, "acme", "app"); err != nil {
		t.Fatal(err)
	}
	if err := s.gs.AddFault(ghsim.FaultSpec{Method: "GET", Path: "/repos/acme/app", Status: 502, Count: 2}); err != nil {
		t.Fatal(err)
	}
	start := s.clock()
	if _, _, err := c.Repositories.Get(ctx, "acme", "app"); err != nil {
		t.Fatalf("a read through two 502s: %v", err)
	}
	times, statuses := s.sent("/api/v3/repos/acme/app")
	n := len(times)
	if n < 4 || statuses[n-3] != 502 || statuses[n-2] != 502 || statuses[n-1] != 200 {
		t.Fatalf("statuses %v", statuses)
	}
	if d1, d2 := times[n-2].Sub(times[n-3]), times[n-1].Sub(times[n-2]); d1 < 500*time.Millisecond || d2 < time.Second || d2 < d1 {
		t.Errorf("pauses %v then %v after %v; want at least ½ s then 1 s, growing", d1, d2, start)
	}

	if err := s.gs.AddFault(ghsim.FaultSpec{Method: "POST", Path: "/repos/acme/app/issues", Status: 503, Count: 1}); err != nil {
		t.Fatal(err)
	}
	_, resp, err := c.Issues.CreateComment(ctx, "acme", "app", 1, &github.IssueComment{Body: github.Ptr("x")})
	if err == nil || resp == nil || resp.StatusCode != 503 {
		t.Fatalf("a write answered 503: %v; want the 503, not repeated", err)
	}
	if _, _, err := c.Repositories.Get(NoWait(ctx), "acme", "app"); RetryAt(err).IsZero() || !strings.Contains(err.Error(), "errors on GitHub's side") {
		t.Errorf("right after a 5xx: %v; want held back for the pause", err)
	}
}

// TestFreshTokenAfter401: a token GitHub revoked (a suspension and its
// lift revoke them) is replaced on its first 401, and the request goes
// through; a reinstalled app (a new installation id) is found again.
func TestFreshTokenAfter401(t *testing.T) {
	s := newStandIn(t)
	g := s.limited(t, nil)
	ctx := withDeadline(t, time.Minute)
	c, _ := g.Client(SessionScope("acme/app"))
	if _, _, err := c.Repositories.Get(ctx, "acme", "app"); err != nil {
		t.Fatal(err)
	}
	acme := ghsim.InstallationActionSpec{InstallationID: s.inst["acme"]}
	if err := s.gs.SuspendInstallation(acme); err != nil {
		t.Fatal(err)
	}
	if err := s.gs.UnsuspendInstallation(acme); err != nil {
		t.Fatal(err)
	}
	mints := s.mints()
	if _, _, err := c.Repositories.Get(ctx, "acme", "app"); err != nil {
		t.Fatalf("with a revoked token: %v", err)
	}
	if s.mints() != mints+1 {
		t.Errorf("%d tokens minted for a revoked one, want 1", s.mints()-mints)
	}

	// Uninstalled and installed again: a new id, found without a restart.
	if err := s.gs.DeleteInstallation(acme); err != nil {
		t.Fatal(err)
	}
	id, err := s.gs.CreateInstallation(ghsim.InstallationSpec{AppID: s.app.ID, Account: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Repositories.Get(ctx, "acme", "app"); err != nil {
		t.Fatalf("after a reinstall: %v", err)
	}
	if got, err := g.Installation(ctx, "acme/app"); err != nil || got != id {
		t.Errorf("installation after the reinstall: %d, %v; want %d", got, err, id)
	}
}

// TestNotInstalledAndSuspended: a repository taken out of the
// installation is not installed (permanent, saying what to do); a
// suspended installation is refused without a token, here and on a node
// sharing the store, until it is unsuspended.
func TestNotInstalledAndSuspended(t *testing.T) {
	s := newStandIn(t)
	shared := newMemShared(s.clock)
	g := s.limited(t, shared)
	ctx := withDeadline(t, time.Minute)
	if err := s.gs.SetInstallationRepos(ghsim.InstallationReposSpec{InstallationID: s.inst["acme"], Remove: []string{"lib"}}); err != nil {
		t.Fatal(err)
	}
	_, err := g.Token(ctx, SessionScope("acme/lib"))
	if !errors.Is(err, ErrNotInstalled) || !errors.Is(err, ErrNoAccess) || !Permanent(err) || !strings.Contains(err.Error(), "install the app on it") {
		t.Fatalf("a repository outside the installation: %v", err)
	}

	if err := s.gs.SuspendInstallation(ghsim.InstallationActionSpec{InstallationID: s.inst["acme"]}); err != nil {
		t.Fatal(err)
	}
	_, err = g.Token(ctx, SessionScope("acme/app"))
	if !errors.Is(err, ErrSuspended) || !Permanent(err) || !g.Suspended(ctx, s.inst["acme"]) {
		t.Fatalf("a suspended installation: %v", err)
	}
	// Another node sharing the marks knows without asking GitHub.
	other := s.limited(t, shared)
	before := s.mints()
	if _, err := other.Token(ctx, SessionScope("acme/app")); !errors.Is(err, ErrSuspended) {
		t.Fatalf("another node: %v", err)
	}
	if s.mints() != before {
		t.Error("another node minted a token for a suspended installation")
	}
	if err := s.gs.UnsuspendInstallation(ghsim.InstallationActionSpec{InstallationID: s.inst["acme"]}); err != nil {
		t.Fatal(err)
	}
	g.Unsuspend(ctx, s.inst["acme"]) // as the unsuspend event does
	s.advance(sharedTTL)             // the other node reads the marks again
	if _, err := other.Token(ctx, SessionScope("acme/app")); err != nil {
		t.Fatalf("unsuspended: %v", err)
	}
}

// TestSharedWindows: a node that learns a window shares it; another node
// sends nothing inside it once it reads the marks again (within
// sharedTTL), though GitHub never told it.
func TestSharedWindows(t *testing.T) {
	s := newStandIn(t)
	shared := newMemShared(s.clock)
	a, b := s.limited(t, shared), s.limited(t, shared)
	ctx := withDeadline(t, time.Minute)
	ca, _ := a.Client(SessionScope("acme/app"))
	cb, _ := b.Client(SessionScope("acme/app"))
	for _, c := range []*github.Client{ca, cb} {
		if _, _, err := c.Repositories.Get(ctx, "acme", "app"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.gs.SetSecondaryLimit(ghsim.SecondaryLimitSpec{LimitScope: ghsim.LimitScope{InstallationID: s.inst["acme"]}, For: 30, Status: 429}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ca.Repositories.Get(NoWait(ctx), "acme", "app"); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("node a: %v", err)
	}
	s.advance(sharedTTL)
	before := len(s.gs.Requests())
	if _, _, err := cb.Repositories.Get(NoWait(ctx), "acme", "app"); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("node b: %v; want held back by a's window", err)
	}
	if n := len(s.gs.Requests()) - before; n != 0 {
		t.Errorf("node b sent %d requests inside the window a learned", n)
	}
}

// TestBackground: background work keeps off the last tenth of the hour's
// budget; work people wait for still goes.
func TestBackground(t *testing.T) {
	s := newStandIn(t)
	g := s.limited(t, nil)
	ctx := withDeadline(t, time.Minute)
	c, _ := g.Client(SessionScope("acme/app"))
	if _, _, err := c.Repositories.Get(ctx, "acme", "app"); err != nil {
		t.Fatal(err)
	}
	if err := s.gs.SetRateLimit(ghsim.RateLimitSpec{LimitScope: ghsim.LimitScope{InstallationID: s.inst["acme"]}, Limit: 100, Remaining: 11, ResetIn: 600}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Repositories.Get(ctx, "acme", "app"); err != nil { // 10 left
		t.Fatal(err)
	}
	if _, _, err := c.Repositories.Get(NoWait(Background(ctx)), "acme", "app"); !errors.Is(err, ErrRateLimited) {
		t.Errorf("background work at the reserve: %v; want held back", err)
	}
	if _, _, err := c.Repositories.Get(NoWait(ctx), "acme", "app"); err != nil {
		t.Errorf("work people wait for at the reserve: %v", err)
	}
	// git counts against the same budget and windows.
	err := g.Git(NoWait(Background(ctx)), []string{"acme/app"}, func(context.Context) error { t.Error("a background fetch ran at the reserve"); return nil })
	if !errors.Is(err, ErrRateLimited) {
		t.Errorf("a background fetch at the reserve: %v", err)
	}
	ran := false
	if err := g.Git(NoWait(ctx), []string{"acme/app"}, func(context.Context) error {
		ran = true
		return errors.New("fatal: unable to access: The requested URL returned error: 429")
	}); err == nil || !ran {
		t.Fatalf("a fetch answered 429: %v, ran %v", err, ran)
	}
	if _, _, err := c.Repositories.Get(NoWait(ctx), "acme", "app"); !errors.Is(err, ErrRateLimited) {
		t.Errorf("after git's 429: %v; want a window", err)
	}
}

// memShared is the nodes' shared marks, in memory (the store's are
// tested with the store).
type memShared struct {
	now   func() time.Time
	mu    sync.Mutex
	marks map[[2]string]Mark
}

func newMemShared(now func() time.Time) *memShared {
	return &memShared{now: now, marks: map[[2]string]Mark{}}
}

func (m *memShared) Marks(_ context.Context, scope string) ([]Mark, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Mark
	for k, v := range m.marks {
		if k[0] == scope && m.now().Before(v.Until) {
			out = append(out, v)
		}
	}
	return out, nil
}

func (m *memShared) PutMark(_ context.Context, mk Mark) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]string{mk.Scope, mk.Kind}
	if cur, ok := m.marks[k]; !ok || mk.Until.After(cur.Until) {
		m.marks[k] = mk
	}
	return nil
}

func (m *memShared) DeleteMark(_ context.Context, scope, kind string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.marks, [2]string{scope, kind})
	return nil
}

// TestSharedInBackground: with RunShared running, a node's requests never
// read the shared marks (the store can be stuck and they still go), but
// a window another node learned reaches it in the background within
// about a second and holds its requests back without one reaching GitHub.
func TestSharedInBackground(t *testing.T) {
	s := newStandIn(t)
	shared := &gatedShared{memShared: newMemShared(s.clock), open: make(chan struct{})}
	close(shared.open)
	a, b := s.limited(t, shared.memShared), s.limited(t, shared)
	ctx := withDeadline(t, time.Minute)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); b.RunShared(rctx) }()
	defer func() { stop(); <-done }()
	testbin.WaitFor(t, 10*time.Second, "RunShared to start", b.limits.background.Load)
	ca, _ := a.Client(SessionScope("acme/app"))
	cb, _ := b.Client(SessionScope("acme/app"))
	for _, c := range []*github.Client{ca, cb} { // b's first reads the marks, once
		if _, _, err := c.Repositories.Get(ctx, "acme", "app"); err != nil {
			t.Fatal(err)
		}
	}
	// The store is stuck: b's requests go all the same.
	shared.mu.Lock()
	shared.open = make(chan struct{})
	shared.mu.Unlock()
	for range 3 {
		if _, _, err := cb.Repositories.Get(ctx, "acme", "app"); err != nil {
			t.Fatalf("a request while the shared marks cannot be read: %v", err)
		}
	}
	shared.mu.Lock()
	close(shared.open)
	shared.mu.Unlock()

	if err := s.gs.SetSecondaryLimit(ghsim.SecondaryLimitSpec{LimitScope: ghsim.LimitScope{InstallationID: s.inst["acme"]}, For: 30, Status: 429}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ca.Repositories.Get(NoWait(ctx), "acme", "app"); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("node a: %v", err)
	}
	scope := InstallationScope(s.inst["acme"])
	testbin.WaitFor(t, 10*time.Second, "node b to learn a's window in the background", func() bool {
		return b.Window(scope, "core").Kind == KindSecondary
	})
	before := len(s.gs.Requests())
	if _, _, err := cb.Repositories.Get(NoWait(ctx), "acme", "app"); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("node b: %v; want held back by a's window", err)
	}
	if n := len(s.gs.Requests()) - before; n != 0 {
		t.Errorf("node b sent %d requests inside the window a learned", n)
	}
}

// gatedShared is memShared whose reads wait while open is not closed
// (a store that does not answer), or until their context ends.
type gatedShared struct {
	*memShared
	mu   sync.Mutex
	open chan struct{}
}

func (g *gatedShared) Marks(ctx context.Context, scope string) ([]Mark, error) {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.memShared.Marks(ctx, scope)
}
