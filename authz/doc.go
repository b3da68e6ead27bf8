// Package authz (authorization) decides who may see and act on which
// session: the rules of issue 27's "who sees what", in one place, for the
// API, the web UI (which calls the API), the event stream, the diff, the shell and the
// requests nodes forward to each other (the receiving node applies them,
// with the caller's own credentials).
//
// # The rules
//
// A request is made by a Subject: a user with a role (admin, member,
// viewer) through a token. What it may do with a session is a Level:
// None (the session does not exist for it: 404, never 403, so ids cannot
// be probed), Read (get, list, log, lock, the event stream, the diff) or
// Write (send, cancel, stop, delete, the shell):
//
//	who                            their own session    someone else's session
//	admin (admin token of admin)   write                write
//	member                         write                the repositories' level
//	viewer                         read                 the repositories' level, at most read
//
// A session is its user's own (store.Session.User; for a session of
// before users, the token that made it). Someone else's session is seen
// through its repositories: the level on a session is the lowest of the
// levels on its repositories (Session). Read needs read on every one of
// them, not any: a session's events, diff and box hold the contents of
// all its repositories, so "any" would show a repository's files to
// whoever may read another repository the session also has. A session
// with no repositories is its user's and the admins' only.
//
// Starting a session (Start) needs a member (or admin) role and write on
// every repository named: a viewer never starts, sends or cancels.
//
// # A repository's level (Grant)
//
//	GitHub repository      GitHub's collaborator permission of the user's GitHub
//	                       identity (admin, maintain, write: write; triage, read:
//	                       read; none, or no GitHub identity: none), asked with the
//	                       installation token and cached (GitHubPerms)
//	directory under a      the root's policy (Policy): the roles, teams and users
//	--repo-root with one   it names for read and for write
//	directory under a      unshared: each session there is its user's (and the
//	--repo-root without    admins'); a member may start sessions there, as before
//	one; a git URL; a      there were policies
//	path the admin named
//
// An unshared repository grants nothing on other people's sessions
// (Grant.Shared false): a server upgraded to this version shows nobody a
// session they could not see before until its operator writes a policy.
//
// # Failing closed
//
// A level that cannot be known (GitHub answers 5xx, a rate limit, the
// store does not answer) is an error, never a guess: the request that
// needs it is refused with 503 and a message that says what could not be
// checked. A cached GitHub answer is trusted for GitHubPerms.TTL (default
// DefaultTTL) and asked again on the first use after that, so a removed
// collaborator stops seeing the repository's sessions within TTL.
//
// # Concurrency
//
// Session and Start are pure functions. A Resolver and its GitHubPerms
// are safe for concurrent use: the cache is guarded by one mutex, never
// held across a call to GitHub. No goroutine is started.
package authz
