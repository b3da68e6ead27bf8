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
//	           token in git's environment) → Clone onto harvest/<issue>-<slug>
//	           (branch.go; harvest/{session} for an API session, or the pull
//	           request's head branch), origin https://github.com/owner/name.git,
//	           no credentials, the Co-authored-by hook (identity.go)
//	box      gitproxy grant on a listener in the box: the box's git fetch
//	         and push reach GitHub only through it; pushes limited to the
//	         session's branch; the token is added on the host
//	turn     WatchTurn (live.go): the turn's section of the progress
//	         comment shows the todo list and the current step; the pull
//	         request's "Harvest" check run is in progress on its head
//	         when the installation granted checks: write (checks.go)
//	turn end AfterTurn: read the branch in the box, in two runs at once (its
//	         head, new commits, commits ahead of the base, the description
//	         file; GitHub's head of the branch and its pull request, or
//	         the open one of the branch, asked meanwhile, boxread.go)
//	         → git.committed; push what was committed and not pushed (from
//	         the box, through the endpoint; never a branch without commits
//	         of its own) → git.pushed; open the pull request once the branch
//	         has commits (title from the change, reviewer, labels; the new
//	         head and the pull request in one store write, after it) →
//	         pr.opened, or rewrite its Harvest section; then tell people
//	         (tell.go): the progress comment's section, a new comment
//	         mentioning whoever asked (in a review comment's thread), 🚀;
//	         the check run completed with the turn's summary

// Host git runs only in Harvest's mirrors and in a clone before any box
// has seen it. Everything the box's repository says after that is read by
// running git in the box.
//
// # Webhooks
//
// Hooks (hooks.go) stores deliveries and processes them once each, one
// at a time (a delivery that asks nothing of Harvest, as its event,
// action and sender show — the app's own comments, issues and pull
// requests opened, ... — is stored done at once and never queued ahead
// of the ones people wait on: ignore.go; a comment that asks Harvest
// gets its 👀 as soon as it is stored, before the loop comes to it:
// ack.go);
// triggers.go says where each goes (one branch, one session: a pull
// request's events go to the live session holding its head branch, which
// the store guarantees is one), mention.go reads a comment as a person
// does (Markdown, not a pattern), commands.go says who may ask and runs
// stop, status and help, reviews.go sends a review whole, closed.go ends
// the session of a merged or closed pull request.
//
// # Identity
//
// The app's bot (or the token's user) authors and commits; the person
// who asked is credited with a Co-authored-by trailer that a
// prepare-commit-msg hook in the clone adds to every commit made there
// (identity.go). Config.CommitAuthor AuthorRequester keeps the old way
// (the requester as author). A session created through the API has no
// GitHub requester: the bot, no trailer.
//
// The person who asked is also a Harvest user: a GitHub account becomes
// one (a github identity) the first time it starts a session, and owns
// the sessions it starts (people.go).
//
// # Concurrency
//
// A Service is safe for concurrent use: sessions' runners call it at
// once. Its maps (endpoint environments, default branches, branch
// protection, the mirrors' fetch times and activity) are guarded by one
// mutex, never held across a call to GitHub, git or a box. Hooks.Run is
// one goroutine, the caller's; it starts RunMirrors and the
// acknowledger (runAcks) in goroutines of their own and waits for them
// when ctx ends.
package ghbot
