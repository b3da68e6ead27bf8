// Package ghbot is Harvest on GitHub: it serves sessions their GitHub
// repositories and publishes their work there (session.Forge), and turns
// webhook deliveries into sessions and messages.
//
// # A session's repository
//
//	create   repos: [{github: owner/name, ref?}]  → session.Forge.Check:
//	         the app is installed on it (gh.Reach), else a 400
//	clone    gh.Token (installation token, narrowed to the session's repos)
//	         → workspace.Mirrors.Sync (host bare mirror, fetched with the
//	           token in git's environment) → Clone onto harvest/{session}
//	           (or the pull request's head branch), origin
//	           https://github.com/owner/name.git, no credentials
//	box      gitproxy grant on a listener in the box: the box's git fetch
//	         and push reach GitHub only through it; pushes limited to the
//	         session's branch; the token is added on the host
//	turn end AfterTurn: read the branch in the box (git log, in the box) →
//	         git.committed; push what was committed and not pushed (from
//	         the box, through the endpoint) → git.pushed; open the pull
//	         request once the branch has commits → pr.opened
//
// Host git runs only in Harvest's mirrors and in a clone before any box
// has seen it. Everything the box's repository says after that is read by
// running git in the box.
//
// # Webhooks
//
// Hooks (hooks.go) stores deliveries and processes them once each;
// triggers.go says where each goes (one branch, one session: a pull
// request's events go to the live session holding its head branch, which
// the store guarantees is one), mention.go reads a comment as a person
// does (Markdown, not a pattern), commands.go says who may ask and runs
// stop, status and help, reviews.go sends a review whole, closed.go ends
// the session of a merged or closed pull request.
//
// # Identity
//
// Commits are authored by the person who asked (their name with
// " (Harvest)" and their noreply address) and committed by Harvest's bot
// (the app's slug[bot], or the token's user): GIT_AUTHOR_* and
// GIT_COMMITTER_* in the box's environment, and user.name/user.email in
// the clone for tools that read the config. A session created through the
// API has no GitHub requester: the bot is author too.
//
// # Deliveries, GitHub's limits and failures
//
// Hooks processes the stored deliveries one at a time (hooks.go). An
// attempt never waits for one of GitHub's windows (gh.NoWait: the queue
// would wait with it); held back, the delivery is put off until the
// window ends and its attempt is given back (deliveries.go: finish). A
// refusal no retry changes (not installed, no access, invalid, suspended)
// fails it at once, and so does its last attempt: the person who asked is
// told, with a comment where it was asked (a token narrowed to issues,
// so it can be minted when a wider one cannot), what went wrong and what
// to do, unless no comment can be posted there (the app is not installed:
// the log says what to do). A failed delivery is listed and replayed
// once (ListDeliveries, Replay; GET /v1/github/deliveries and POST
// /v1/github/deliveries/{id}/replay; harvest github deliveries|replay).
// Due times are in the store, so another node or a restart keeps them.
//
// # Installations and mirrors
//
// installation and installation_repositories events clear gh's caches; a
// suspended installation is marked for every node and its deliveries are
// done as "suspended", untried (install.go). Mirrors are kept fresh in the
// background: the repositories of live sessions and those checked out in
// the last day are fetched every MirrorRefresh and after a push event,
// within GitHub's limits, so a checkout clones a fresh mirror without a
// fetch (mirrors.go).
//
// # Concurrency
//
// A Service is safe for concurrent use: sessions' runners call it at
// once. Its maps (endpoint environments, default branches, branch
// protection, the mirrors' fetch times and activity) are guarded by one
// mutex, never held across a call to GitHub, git or a box. Hooks.Run is
// one goroutine, the caller's; it starts RunMirrors in a goroutine of its
// own and waits for it when ctx ends.
package ghbot
