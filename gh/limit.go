package gh

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// GitHub's limits (see the package doc, "Limits"): what it said, kept per
// scope (an installation, the app itself, a personal token) and, for the
// primary limit, per resource.

// Kinds of windows (Mark.Kind): a primary limit's resource (core, search,
// graphql, ...), or one of these.
const (
	// KindSecondary is a secondary rate limit: no request of the scope,
	// whatever its resource, until it ends.
	KindSecondary = "secondary"
	// KindSuspended marks an installation its owner suspended: nothing
	// is done for it until it is unsuspended (Until is far away).
	KindSuspended = "suspended"
	// KindPushed marks a repository pushed to (scope "repo:owner/name"):
	// a mirror fetched before Until is stale.
	KindPushed = "pushed"
)

// Mark is a window GitHub set (or a fact learned from a webhook), as
// shared between Harvest's nodes.
type Mark struct {
	// Scope is "installation:ID", "app", "token" or "repo:owner/name".
	Scope string
	Kind  string
	Until time.Time
	// Note says why (GitHub's message).
	Note string
}

// Shared is where Harvest's nodes share what they learn of GitHub's
// limits (package store's GitHub marks; ghbot adapts it). A nil Shared
// keeps everything in this process.
type Shared interface {
	// Marks lists scope's marks that have not ended at now.
	Marks(ctx context.Context, scope string) ([]Mark, error)
	// PutMark records m, keeping a later Until already recorded for its
	// scope and kind.
	PutMark(ctx context.Context, m Mark) error
	// DeleteMark removes scope's mark of kind, if any.
	DeleteMark(ctx context.Context, scope, kind string) error
}

// ErrRateLimited is GitHub's limit: errors.Is finds it in a
// *RateLimitedError. Background work retries after RetryAt; nothing is
// sent to GitHub before.
var ErrRateLimited = errors.New("GitHub's rate limit")

// RateLimitedError says a request was not sent (or was refused) because
// of one of GitHub's limits, and when to try again.
type RateLimitedError struct {
	// Scope is whose limit ("installation:ID", "app", "token").
	Scope string
	// Kind is KindSecondary, a primary limit's resource ("core", ...),
	// or "server" (GitHub answering 5xx: backing off).
	Kind string
	// RetryAt is when the window ends.
	RetryAt time.Time
	// Sent: this request reached GitHub and was refused; else it was
	// held back, never sent.
	Sent bool
	// Note is GitHub's message.
	Note string
}

func (e *RateLimitedError) Error() string {
	what := "the primary rate limit (" + e.Kind + ")"
	switch e.Kind {
	case KindSecondary:
		what = "a secondary rate limit"
	case "server":
		what = "errors on GitHub's side (backing off)"
	}
	held := "held back"
	if e.Sent {
		held = "refused"
	}
	s := fmt.Sprintf("GitHub: %s for %s: request %s, no request before %s", what, scopeName(e.Scope), held, e.RetryAt.UTC().Format(time.RFC3339))
	if e.Note != "" {
		s += " (" + e.Note + ")"
	}
	return s
}

// Is makes errors.Is(err, ErrRateLimited) true.
func (e *RateLimitedError) Is(target error) bool { return target == ErrRateLimited }

// RetryAt is when a request failed by err may be tried again: zero when
// err is not GitHub's limit.
func RetryAt(err error) time.Time {
	var rl *RateLimitedError
	if errors.As(err, &rl) {
		return rl.RetryAt
	}
	return time.Time{}
}

func scopeName(scope string) string {
	if id, ok := strings.CutPrefix(scope, "installation:"); ok {
		return "installation " + id
	}
	if scope == "app" {
		return "the app"
	}
	if scope == "token" {
		return "the token"
	}
	return scope
}

// Contexts: how a caller wants limits handled.
type ctxKey int

const (
	keyNoWait ctxKey = iota
	keyBackground
)

// NoWait marks ctx's requests as never waiting for a window to end: they
// fail at once with a *RateLimitedError (background work reschedules
// itself for its RetryAt rather than holding a worker). Without it a
// request waits for a window that ends before ctx's deadline.
func NoWait(ctx context.Context) context.Context { return context.WithValue(ctx, keyNoWait, true) }

// Background marks ctx's requests as deferrable (mirror fetches, progress
// edits): besides the windows, they are held back while the scope's
// primary budget is down to its reserve (Config.Reserve), kept for work
// people wait for.
func Background(ctx context.Context) context.Context {
	return context.WithValue(ctx, keyBackground, true)
}

// Defaults of the limiter.
const (
	// secondaryDefault is the wait after a secondary limit that names no
	// time (GitHub: "wait for at least one minute"), doubled each time
	// it repeats, up to secondaryMax.
	secondaryDefault = time.Minute
	secondaryMax     = 30 * time.Minute
	// serverBackoff is the first pause after a 5xx, doubled up to
	// serverMax while they go on.
	serverBackoff = time.Second
	serverMax     = time.Minute
	// maxTries bounds the sends of one request (a window waited out, a
	// 5xx of an idempotent request, a 401 with a fresh token).
	maxTries = 4
	// defaultReserve is the share of a primary budget background work
	// leaves alone.
	defaultReserve = 0.1
	// bodyPeek bounds what is read of a 403/429 to tell a limit from a
	// refusal.
	bodyPeek = 64 << 10
)

// limits is the process's accounting (one per GitHub): every client's
// requests go through it.
type limits struct {
	now     func() time.Time
	wait    func(ctx context.Context, d time.Duration) error
	shared  Shared
	reserve float64
	log     *slog.Logger

	// background: RunShared reads the shared marks of every scope in
	// use each sharedTTL, so requests never wait for the store (only a
	// scope's first request reads them, once).
	background atomic.Bool

	mu     sync.Mutex
	scopes map[string]*budget
}

// budget is one scope's state.
type budget struct {
	primary map[string]*rate // by resource
	// windows are what this process learned, by kind: secondary, a
	// resource's primary, server, suspended (without a Shared).
	windows map[string]Mark
	// shared are the marks read from Shared last, replaced at each read
	// (so one lifted elsewhere is lifted here).
	shared    map[string]Mark
	read      time.Time // when shared was read
	used      time.Time // when a request of the scope last asked
	secStreak int       // secondary limits in a row
	srvStreak int       // 5xx in a row
}

// rate is a primary limit as the last answer said.
type rate struct {
	limit, remaining int
	reset            time.Time
}

func newLimits(now func() time.Time, wait func(context.Context, time.Duration) error, reserve float64, log *slog.Logger) *limits {
	if wait == nil {
		wait = sleep
	}
	if reserve <= 0 {
		reserve = defaultReserve
	}
	return &limits{now: now, wait: wait, reserve: reserve, log: log, scopes: map[string]*budget{}}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (l *limits) budget(scope string) *budget {
	b := l.scopes[scope]
	if b == nil {
		b = &budget{primary: map[string]*rate{}, windows: map[string]Mark{}, shared: map[string]Mark{}}
		l.scopes[scope] = b
	}
	return b
}

// sharedTTL is how long a read of the shared marks of a scope is used:
// what another node learned is known here within it, at the cost of one
// store read per scope per sharedTTL (not one per request).
const sharedTTL = time.Second

// sharedIdle: RunShared stops reading the marks of a scope no request
// asked about for this long (its next request reads them again first).
const sharedIdle = 10 * time.Minute

// refresh merges the shared marks of scope into this process's view, if
// they were not read in the last sharedTTL. With RunShared running, only
// a scope's first request (or its first after sharedIdle) reads them:
// the others go by what RunShared read, at most sharedTTL old.
func (l *limits) refresh(ctx context.Context, scope string) {
	if l.shared == nil {
		return
	}
	l.mu.Lock()
	b := l.budget(scope)
	now := l.now()
	fresh := !b.read.IsZero() && (l.background.Load() && now.Sub(b.used) < sharedIdle ||
		now.Sub(b.read) < sharedTTL && !now.Before(b.read))
	b.used = now
	l.mu.Unlock()
	if fresh {
		return
	}
	l.read(ctx, scope)
}

// read replaces scope's shared marks with what the store has.
func (l *limits) read(ctx context.Context, scope string) {
	marks, err := l.shared.Marks(ctx, scope)
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn("reading GitHub's limits shared by the nodes (going by this node's own)", "scope", scope, "err", err)
		}
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.budget(scope)
	b.read = l.now()
	clear(b.shared)
	for _, m := range marks {
		if cur, ok := b.shared[m.Kind]; !ok || m.Until.After(cur.Until) {
			b.shared[m.Kind] = m
		}
	}
}

// RunShared keeps this process's view of the limits the nodes share
// (ShareLimits) current until ctx ends: every sharedTTL it reads the
// marks of each scope a request asked about in the last sharedIdle, so
// requests find them in memory and never wait for the store. It is the
// caller's goroutine (none is started); without it, a request reads its
// scope's marks itself when they are older than sharedTTL.
func (g *GitHub) RunShared(ctx context.Context) {
	l := g.limits
	if l.shared == nil {
		return
	}
	l.background.Store(true)
	defer l.background.Store(false)
	t := time.NewTicker(sharedTTL)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		now := l.now()
		var scopes []string
		for scope, b := range l.scopes {
			if !b.read.IsZero() && now.Sub(b.used) < sharedIdle {
				scopes = append(scopes, scope)
			}
		}
		l.mu.Unlock()
		for _, scope := range scopes {
			rctx, cancel := context.WithTimeout(ctx, sharedTTL*5)
			l.read(rctx, scope)
			cancel()
		}
	}
}

// blocked is the window that holds back a request of scope on resource
// now (zero Mark: none).
func (l *limits) blocked(scope, resource string, background bool) Mark {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.budget(scope)
	var out Mark
	for _, k := range []string{KindSuspended, KindSecondary, resource, "server"} {
		for _, w := range []map[string]Mark{b.windows, b.shared} {
			if m, ok := w[k]; ok && now.Before(m.Until) && (m.Until.After(out.Until) || m.Kind == KindSuspended) {
				out = m
			}
		}
		if out.Kind == KindSuspended {
			break
		}
	}
	if background && out.Until.IsZero() {
		if r := b.primary[resource]; r != nil && now.Before(r.reset) && float64(r.remaining) <= l.reserve*float64(r.limit) {
			out = Mark{Scope: scope, Kind: resource, Until: r.reset,
				Note: fmt.Sprintf("%d of %d requests left until the reset: kept for work people wait for", r.remaining, r.limit)}
		}
	}
	return out
}

// admit returns when a request of scope on resource may be sent: at once,
// or after waiting for a window that ends before ctx's deadline; else a
// *RateLimitedError (or ErrSuspended).
func (l *limits) admit(ctx context.Context, scope, resource string) error {
	l.refresh(ctx, scope)
	for {
		m := l.blocked(scope, resource, ctx.Value(keyBackground) != nil)
		if m.Until.IsZero() {
			return nil
		}
		if m.Kind == KindSuspended {
			return &SuspendedError{Scope: scope, Note: m.Note}
		}
		if err := l.waitFor(ctx, m, false); err != nil {
			return err
		}
	}
}

// waitFor waits until m ends (with a little jitter, so waiters do not all
// go at once) if ctx allows it, else returns the *RateLimitedError.
func (l *limits) waitFor(ctx context.Context, m Mark, sent bool) error {
	rl := &RateLimitedError{Scope: m.Scope, Kind: m.Kind, RetryAt: m.Until, Sent: sent, Note: m.Note}
	d := m.Until.Sub(l.now()) + jitter(m.Until.Sub(l.now()))
	if d <= 0 {
		return nil
	}
	if ctx.Value(keyNoWait) != nil {
		return rl
	}
	if dl, ok := ctx.Deadline(); !ok || l.now().Add(d).After(dl) {
		return rl
	}
	if err := l.wait(ctx, d); err != nil {
		return err
	}
	return nil
}

// jitter is up to a tenth of d, at most a second.
func jitter(d time.Duration) time.Duration {
	j := min(d/10, time.Second)
	if j <= 0 {
		return 0
	}
	return rand.N(j)
}

// verdict is what an answer means for the request that got it.
type verdict int

const (
	answered verdict = iota // pass it on
	limited                 // a rate limit: retry after the window, if the caller may wait
	failing                 // a 5xx: retry after a pause, if the request may be repeated
)

// observe records what GitHub's answer says of scope's limits and
// classifies it. A limit's body is read and put back.
func (l *limits) observe(ctx context.Context, scope, resource string, resp *http.Response) (verdict, Mark) {
	now := l.now()
	h := resp.Header
	res := h.Get("X-Ratelimit-Resource")
	if res == "" {
		res = resource
	}
	remaining, errRem := strconv.Atoi(h.Get("X-Ratelimit-Remaining"))
	limit, _ := strconv.Atoi(h.Get("X-Ratelimit-Limit"))
	var reset time.Time
	if sec, err := strconv.ParseInt(h.Get("X-Ratelimit-Reset"), 10, 64); err == nil {
		// Whole seconds, and GitHub's clock is not ours: a second more.
		reset = time.Unix(sec, 0).Add(time.Second)
	}
	var put []Mark
	v, mark := answered, Mark{}

	l.mu.Lock()
	b := l.budget(scope)
	if errRem == nil && !reset.IsZero() {
		b.primary[res] = &rate{limit: limit, remaining: remaining, reset: reset}
	}
	switch {
	case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusTooManyRequests:
		msg := peekMessage(resp)
		retryAfter, hasRetry := parseRetryAfter(h.Get("Retry-After"), now)
		secondary := strings.Contains(strings.ToLower(msg), "secondary rate limit") || strings.Contains(strings.ToLower(msg), "abuse")
		switch {
		case hasRetry:
			b.secStreak++
			mark = Mark{Scope: scope, Kind: KindSecondary, Until: now.Add(retryAfter), Note: msg}
		case errRem == nil && remaining == 0 && !reset.IsZero():
			mark = Mark{Scope: scope, Kind: res, Until: reset, Note: msg}
		case secondary || resp.StatusCode == http.StatusTooManyRequests:
			// No time given: a minute, doubled while it repeats.
			b.secStreak++
			d := min(secondaryDefault<<min(b.secStreak-1, 5), secondaryMax)
			mark = Mark{Scope: scope, Kind: KindSecondary, Until: now.Add(d), Note: msg}
		}
		if !mark.Until.IsZero() {
			v = limited
			if mark.Until.After(b.windows[mark.Kind].Until) {
				b.windows[mark.Kind] = mark
			}
			put = append(put, mark)
		}
	case resp.StatusCode >= 500:
		b.srvStreak++
		d := min(serverBackoff<<min(b.srvStreak-1, 6), serverMax)
		d = d/2 + rand.N(d) // jitter: ½ to 1½
		mark = Mark{Scope: scope, Kind: "server", Until: now.Add(d), Note: fmt.Sprintf("%d in a row, the last %s", b.srvStreak, resp.Status)}
		b.windows["server"] = mark
		v = failing
	default:
		b.srvStreak, b.secStreak = 0, 0
		delete(b.windows, "server")
	}
	if v == answered && errRem == nil && remaining == 0 && reset.After(now) {
		// The last request of the window: none more until the reset.
		mark = Mark{Scope: scope, Kind: res, Until: reset, Note: fmt.Sprintf("all %d requests of the hour used", limit)}
		b.windows[res] = mark
		put = append(put, mark)
	}
	l.mu.Unlock()

	for _, m := range put {
		l.log.Warn("GitHub's rate limit: holding requests back", "scope", m.Scope, "kind", m.Kind, "until", m.Until.UTC().Format(time.RFC3339), "note", m.Note)
		l.share(ctx, m)
	}
	return v, mark
}

// share records m for the other nodes, bounded in time.
func (l *limits) share(ctx context.Context, m Mark) {
	if l.shared == nil {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := l.shared.PutMark(sctx, m); err != nil {
		l.log.Warn("sharing GitHub's rate limit with the other nodes", "scope", m.Scope, "kind", m.Kind, "err", err)
	}
}

// peekMessage reads GitHub's error message from resp's body and puts the
// body back.
func peekMessage(resp *http.Response) string {
	if resp.Body == nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, bodyPeek))
	rest := resp.Body
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), rest), rest}
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &e) == nil {
		return e.Message
	}
	return ""
}

// parseRetryAfter reads Retry-After: seconds or an HTTP date, plus
// retryAfterMargin. Both forms count whole seconds, so the window may end
// up to a second after what they say (a server that rounds the time left
// to the nearest second, or down, says 0 in its last half second):
// resuming at exactly the time given sent requests into the window, each
// refused again (BenchmarkGitHubRateLimitStorm: up to 164 refusals where
// one is the minimum).
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n)*time.Second + retryAfterMargin, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0) + retryAfterMargin, true
	}
	return 0, false
}

// retryAfterMargin is added to every Retry-After: the second its whole
// seconds may leave out.
const retryAfterMargin = time.Second

// resourceOf is the primary limit a request counts against, by its path
// under the API's base.
func resourceOf(base, path string) string {
	rest := strings.TrimPrefix(path, strings.TrimSuffix(base, "/"))
	switch {
	case strings.HasPrefix(rest, "/search/code"):
		return "code_search"
	case strings.HasPrefix(rest, "/search/"):
		return "search"
	case rest == "/graphql" || strings.HasSuffix(path, "/graphql"):
		return "graphql"
	}
	return "core"
}

// idempotent reports whether sending r twice does what sending it once
// does (a 5xx leaves unknown whether the first one took effect).
func idempotent(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions:
		return true
	}
	// Minting a token twice makes two tokens: harmless.
	return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/access_tokens")
}

// replayable reports whether r's body can be sent again.
func replayable(r *http.Request) bool {
	return r.Body == nil || r.Body == http.NoBody || r.GetBody != nil
}

// rewind gives r2 a fresh copy of r's body.
func rewind(r, r2 *http.Request) error {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	b, err := r.GetBody()
	if err != nil {
		return err
	}
	r2.Body = b
	return nil
}

// Window reports the window holding back requests of scope now (zero
// Mark: none), for status pages and tests.
func (g *GitHub) Window(scope, resource string) Mark {
	return g.limits.blocked(scope, resource, false)
}

// InstallationScope is the scope of an installation's limits.
func InstallationScope(id int64) string { return "installation:" + strconv.FormatInt(id, 10) }

// gitStatus finds the HTTP status in git's error ("The requested URL
// returned error: 429").
func gitStatus(err error) int {
	if err == nil {
		return 0
	}
	s := err.Error()
	i := strings.Index(s, "returned error: ")
	if i < 0 {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(s[i+len("returned error: ") : min(len(s), i+len("returned error: ")+3)]))
	return n
}

// Git runs fetch, host git talking to GitHub for repos ("owner/name"),
// within the limits of their installation (or the token): git over HTTPS
// answers no rate-limit headers, but GitHub limits it too, so a fetch
// waits for (or, per ctx, fails with) the scope's windows like a REST
// request on "core", counts as one request of its budget, and a 429 or
// 5xx from git sets a window as the same answer to a REST request would.
// Background(ctx) fetches also keep off the reserve.
func (g *GitHub) Git(ctx context.Context, repos []string, fetch func(ctx context.Context) error) error {
	scope := "token"
	if g.key != nil {
		inst, _, err := g.installation(ctx, repos)
		if err != nil {
			return err
		}
		scope = InstallationScope(inst)
	}
	if err := g.limits.admit(ctx, scope, "core"); err != nil {
		return err
	}
	err := fetch(ctx)
	l := g.limits
	now := l.now()
	l.mu.Lock()
	b := l.budget(scope)
	if r := b.primary["core"]; r != nil && r.remaining > 0 {
		r.remaining--
	}
	var put *Mark
	switch st := gitStatus(err); {
	case st == http.StatusTooManyRequests || st == http.StatusForbidden && strings.Contains(strings.ToLower(err.Error()), "rate limit"):
		b.secStreak++
		m := Mark{Scope: scope, Kind: KindSecondary, Until: now.Add(min(secondaryDefault<<min(b.secStreak-1, 5), secondaryMax)), Note: "git: " + strconv.Itoa(st)}
		b.windows[KindSecondary] = m
		put = &m
	case st >= 500:
		b.srvStreak++
		d := min(serverBackoff<<min(b.srvStreak-1, 6), serverMax)
		b.windows["server"] = Mark{Scope: scope, Kind: "server", Until: now.Add(d/2 + rand.N(d)), Note: "git: " + strconv.Itoa(st)}
	case err == nil:
		b.srvStreak = 0
	}
	l.mu.Unlock()
	if put != nil {
		l.log.Warn("GitHub's rate limit (git): holding requests back", "scope", scope, "until", put.Until.UTC().Format(time.RFC3339))
		l.share(ctx, *put)
	}
	return err
}
