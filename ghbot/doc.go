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
// # Concurrency
//
// A Service is safe for concurrent use: sessions' runners call it at
// once. Its maps (endpoint environments, default branches, branch
// protection) are guarded by one mutex, never held across a call to
// GitHub or a box.
package ghbot
