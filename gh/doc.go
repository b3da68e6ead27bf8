// Package gh is Harvest's side of GitHub: the credentials, kept on the
// host, and the API client built on them.
//
// # Credentials
//
// Two ways to authenticate, chosen by the server's operator:
//
//   - A GitHub App (the way for a team): an app id and the app's private
//     key. Harvest signs a short JWT with the key (RS256, nine minutes) to
//     speak as the app, finds the installation that covers a repository,
//     and mints installation tokens narrowed to exactly the repositories a
//     session works on and the permissions it needs (Scope). A token is
//     cached until five minutes before it expires, per installation,
//     repository set and permission set, and minted once however many
//     callers ask at the same moment.
//   - A token file (for one person): a personal access token, used as it is
//     for every repository it can reach.
//
// Neither the key nor any token ever leaves the host: the box reaches git
// through Harvest's git endpoint (package gitproxy), which asks Token for
// the credential to add on each request, and the pull requests and
// comments are made here. Errors name what to fix and never carry a token.
//
// # Limits
//
// GitHub limits what an installation (and the app itself, and a personal
// token) may ask: a primary budget per hour and resource (core, search,
// graphql: x-ratelimit-remaining and -reset on every answer), secondary
// limits it announces with a 403 or 429 ("You have exceeded a secondary
// rate limit", Retry-After, or nothing: then a minute, doubling while it
// repeats), and it warns that sending inside a window may get an
// integration banned. So every request of every client goes through one
// limiter per GitHub value (limit.go), an http.RoundTripper under
// go-github that keeps, per scope ("installation:ID", "app", "token"):
//
//	window      set by                                     holds back
//	secondary   403/429 with Retry-After, or its message     every request of the scope
//	<resource>  the answer that used the last request, or    requests on that resource,
//	            403/429 with x-ratelimit-remaining: 0       until x-ratelimit-reset + 1 s
//	server      a 5xx: ½ s to 1½ s doubling up to a minute   every request of the scope,
//	            (jittered), reset by an answer               until the pause ends
//	suspended   the installation's suspend event, or a       everything, until unsuspended
//	            token request answered "suspended"
//
// A request inside a window is never sent. Its caller waits for the end
// (with up to a second of jitter, so waiters do not all go at once) if
// its context's deadline allows it; otherwise, and always with NoWait (a
// webhook delivery, which is put off instead of holding the queue), it
// gets a *RateLimitedError saying when to try again (RetryAt). A request
// GitHub refused for a limit is sent again after the window when the
// caller may wait. A 5xx to a read is retried after its pause; a write is
// not (GitHub may have done it): the caller sees the 5xx. A 401 is retried
// once with a freshly minted token (a revoked one), and a token request
// for an installation GitHub no longer knows (404: reinstalled, a new id)
// looks the installation up again, once. What no retry changes fails at
// once and says what to do (Permanent): ErrNotInstalled, ErrNoAccess,
// ErrSuspended, ErrInvalid (422). Background work (Background: mirror
// fetches) also keeps off the last tenth of a primary budget (Reserve),
// left for work people wait for.
//
// Git over HTTPS sends no rate-limit headers but GitHub limits it too
// (its abuse limits answer 429): a fetch goes through Git, which holds it
// back inside the installation's windows as a "core" request, counts it
// against the known budget, and turns git's 429 or 5xx into the same
// windows.
//
// # Several nodes
//
// The windows are shared through the store (Shared, the store's GitHub
// marks), not each node's own accounting: the budget is the
// installation's, whichever node spends it, and a node that never heard
// GitHub's refusal would otherwise send into a window another node
// learned, one refused request per node per window, which is exactly
// what GitHub warns against. A window is written when it is learned (the
// later end kept) and a node reads a scope's windows once a second
// (sharedTTL), so another node's window holds requests back here within
// a second, at the cost of one small read per installation per second.
// RunShared makes those reads in the background (a scope's first request
// reads them itself, once): a request then never waits for the store,
// and a window this node learned holds back its very next request. The primary budget's remaining count is each node's own (every
// answer carries GitHub's), and so are 5xx pauses (GitHub's health is
// seen by every node alike). Suspensions and pushes (MarkPushed: mirrors
// fetched before are stale) are shared the same way.
//
// # Installations
//
// The installation covering a repository and the tokens minted for it
// are cached. ForgetInstallation, ForgetRepos and ForgetAccount drop them
// (the installation and installation_repositories events call them), and
// a cached id GitHub answers 404 for is dropped and looked up again, so a
// reinstalled app works without a restart even if the event was missed.
//
// InstalledRepos lists the repositories every installation covers (GET
// /app/installations, then GET /installation/repositories with a
// metadata: read token of each installation that is not suspended, by
// pages of 100, at most 2000 repositories): for Slack's repository
// picker. It never waits for a window (NoWait), is cached for two
// minutes, made once however many ask at once, and dropped by the same
// Forget calls.
//
// # Enterprise and tests
//
// APIURL and WebURL point Harvest at a GitHub Enterprise Server or at the
// stand-in (package sim/ghsim); the same client code runs against both.
//
// # Concurrency
//
// A *GitHub is safe for concurrent use. Its caches are guarded by one
// mutex; a token being minted is waited on by every caller of the same
// scope (a channel closed when it is done), never minted twice. The
// limiter has its own mutex, never held across a request or a read of
// the shared marks. Every call that reaches GitHub takes a context; a wait
// for a window is bounded by it. No goroutine is started: RunShared
// runs in its caller's.
package gh
