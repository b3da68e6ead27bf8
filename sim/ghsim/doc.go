// Package ghsim is a stand-in for GitHub: a real HTTP server that speaks
// GitHub's REST API, git's smart HTTP protocol and GitHub's webhooks, for
// tests of Harvest's GitHub integration.
//
// # Why
//
// Harvest acts as a GitHub App: webhooks start sessions, the host mints
// installation tokens from the App's JWT, agents push branches, Harvest
// opens pull requests and edits a progress comment. No GitHub is reachable
// from our machines, and a mocked client would prove nothing about the
// wire. So the client Harvest ships (go-github v75, pointed here with
// WithEnterpriseURLs) runs in tests against this server, which answers as
// GitHub does and is itself checked against GitHub's own published
// descriptions (see Schemas), by a second client (the official
// @octokit/rest) and by the real git CLI.
//
// # What it serves
//
// REST, at /api/v3/... (as GitHub Enterprise Server) and at the root; the
// list is Operations (ops.go):
//
//	GET   /app, /repos/{o}/{r}/installation          App JWT
//	POST  /app/installations/{id}/access_tokens      App JWT; narrowing by repositories, repository_ids, permissions (more than the installation has: 422)
//	GET   /app/installations                         App JWT; the App's installations by id, suspended ones with suspended_at
//	GET   /installation/repositories                 an installation token; what it reaches (narrowed or all its installation covers), by id
//	GET   /user                                      personal access token, or a user-to-server token (ghu_...)
//	GET   /users/{username}                          anyone; the public profile (email only if public, to a caller with a credential)
//	GET   /repos/{o}/{r}, .../branches/{b}, .../collaborators/{u}/permission
//	POST  /repos/{o}/{r}/forks                     a person's token: the fork in their account (202); an App's: 403 (forks.go)
//	GET   .../issues/{n}; GET, POST .../issues/{n}/comments; GET, PATCH .../issues/comments/{id}
//	POST  .../issues/{n}/labels                    {"labels": [...]} or a bare array; labels made in the repository when first used
//	POST  reactions on issues, issue comments, review comments (201 new, 200 existing)
//	POST, GET .../pulls; GET, PATCH .../pulls/{n}; POST .../pulls/{n}/comments (a diff comment or in_reply_to) and .../comments/{id}/replies
//	POST  .../pulls/{n}/requested_reviewers        collaborators only, not the author (422 with GitHub's messages); no teams
//	GET   .../check-suites/{id}/check-runs
//	POST  .../check-runs; PATCH .../check-runs/{id}  an App's token with checks: write (a person's: 403); the run joins its App's suite of the commit; all runs completed: the suite is, check_suite completed (checks.go)
//	GET   .../pulls/{n}/reviews/{id} and .../reviews/{id}/comments
//	DELETE .../git/refs/heads/{branch}            not the default or a protected branch (422)
//
// Bodies are shaped field for field as GitHub's description requires
// (nullable fields present as null); a bot account is written as GitHub
// writes it: login slug[bot], API URLs with the login escaped
// (/users/slug%5Bbot%5D), html_url the app's page (/apps/slug), and GET
// /users/slug%5Bbot%5D gives its id (the one in its noreply address); errors are {"message",
// "documentation_url"} with GitHub's statuses: 401 "Bad credentials" or a
// JWT's reason, 403 "Resource not accessible by integration", 404 for a
// repository the credential may not see, 422 "Validation Failed" with
// errors. Issues and pull requests share one number sequence per
// repository; a pull request is an issue. Lists paginate (per_page, page,
// Link).
//
// The App's user authorization (oauth.go), at the root as on
// github.com: a sign-in form of its own (GET /login, POST /session), GET
// and POST /login/oauth/authorize (the "Authorize" page and its button;
// state, PKCE S256, redirect_uri under a callback URL) and POST
// /login/oauth/access_token (a code with its PKCE verifier, or a refresh
// token, for a ghu_ token and a ghr_ refresh token; answers form-encoded
// or JSON, errors as GitHub's 200 with "error"). Checked against the
// parameters GitHub documents (oauth_test.go), since GitHub's REST
// description leaves these endpoints out.
//
// Credentials (auth.go) are checked as GitHub checks them: an App JWT must
// be RS256 by the App's key, iss its id, iat not in the future (60 s of
// skew), exp in the future and at most 10 minutes ahead. Installation
// tokens (ghs_...) expire after Options.TokenTTL (1 h) by Options.Now and
// carry the repositories and permissions they were minted with; personal
// access tokens (ghp_...) act as their user with the user's role (admin,
// write, read, none; public repositories are readable by everyone).
//
// Git: /{o}/{r}.git/info/refs, git-upload-pack and git-receive-pack run the
// real git http-backend (net/http/cgi) over bare repositories in
// Options.Dir, with GIT_CONFIG_NOSYSTEM, an empty global config, and no
// hooks but ours. Basic auth takes a token as the password (contents:read
// to fetch, contents:write to push); anonymous fetch of a public repository
// is allowed; otherwise 401 with WWW-Authenticate: Basic realm="GitHub". A
// pre-receive hook refuses updates of protected branches with GitHub's
// "GH006: Protected branch update failed for refs/heads/NAME.". After a
// push the branches are re-read; open pull requests whose head moved get
// the new sha and a pull_request synchronize.
//
// Forks (forks.go): a fork is its owner's repository, cloned from its
// parent's branches and tags; a pull request's head may be a branch of a
// fork ("owner:branch"), and then says so as GitHub does (head.repo the
// fork, fork true). Every pull request's head is kept in its base
// repository as refs/pull/N/head (a fork's commits fetched in), which
// nobody can push (git's "deny updating a hidden ref"); a push to a fork
// moves the pull requests whose head it is.
//
// The control API (control.go) sets things up and acts as people: CreateApp,
// CreateInstallation (all the account's repositories or some, with the
// App's permissions or fewer), AddUser, CreateRepo (a directory's git
// history or one commit of its files), SetPermission, ProtectBranch,
// OpenIssue, Comment, AddLabel, Assign, OpenPull, ReviewComment (diff_hunk
// from git's diff of base...head; a review of its own, as on GitHub),
// SubmitReview (a body and several comments, one review), Fork, MergePull (a
// merge commit made with git merge-tree, the base moved to it), ClosePull,
// EditComment (as a person: changes.body.from), CompleteCheckSuite, Token, SetCallbackURLs (POST
// /_sim/github/apps/{id}/callback-urls: the App's callback URLs for its user
// authorization, also AppSpec.CallbackURLs);
// managing an installation (installs.go): SuspendInstallation,
// UnsuspendInstallation, DeleteInstallation, SetInstallationRepos,
// AcceptPermissions; GitHub's limits and faults (limits.go): SetRateLimit,
// SetSecondaryLimit, AddFault. Each is also POST /_sim/github/<noun> with
// the same fields as JSON, for a test in another process; GET
// /_sim/github/check-runs?repo=o/r the check runs made (CheckRuns), GET
// /_sim/github/requests the request log (Requests: each request's time,
// credential header, body and, for REST, the answer's body), GET
// /_sim/github/deliveries the delivery log (?wait=1 waits for the queue to
// drain), POST /_sim/github/deliveries/{id}/redeliver,
// /_sim/github/apps/{id}/bad-signature and /_sim/github/apps/{id}/webhook-url
// the rest. Unknown things are 404 and bad input 400, each with
// {"error": "..."}.
//
// # Limits
//
// Every authenticated REST answer carries GitHub's x-ratelimit-limit,
// -remaining, -used, -reset and -resource headers, counted per
// installation, App and person over an hour from the first request
// (DefaultRateLimit, or SetRateLimit's). Past it a request is refused 403
// with remaining 0 and "API rate limit exceeded for installation ID N.".
// SetSecondaryLimit refuses every request of a scope (REST 403 or 429
// with "You have exceeded a secondary rate limit..." and Retry-After
// unless told otherwise; git 429) until it ends. AddFault answers the
// next matching REST requests with a 5xx, or slowly. Refused requests
// are in the request log like the others, so a test can assert that none
// was sent inside a window.
//
// # Webhooks
//
// Each action queues, for every App installed on the repository's owner
// with a webhook URL (and subscribed to the event, if it lists events),
// the delivery GitHub would send (WebhookKinds): issues opened, labeled,
// assigned; issue_comment created, edited; pull_request opened (also via
// REST), synchronize (a push), closed (merged or not);
// pull_request_review_comment created (each comment of a review, then);
// pull_request_review submitted; check_suite completed; push (one per
// branch a git push created, moved or deleted, before the pull requests'
// synchronize). The installation's
// own events go to its App whatever it subscribes to: installation
// created, deleted, suspend, unsuspend, new_permissions_accepted;
// installation_repositories added, removed. An installation covers its
// account's repositories (all, or those selected): only those get
// webhooks, tokens and GET .../installation; a suspended one gets no
// webhook and mints no token (403 "This installation has been
// suspended"), and suspending or deleting one revokes its tokens. Headers: X-GitHub-Event, X-GitHub-Delivery (a
// UUID), X-GitHub-Hook-ID, X-GitHub-Hook-Installation-Target-Type/-ID,
// X-Hub-Signature-256 and X-Hub-Signature over the exact body, User-Agent
// GitHub-Hookshot/...; the payload carries action, sender, repository,
// installation {id, node_id} and the object.
//
// Deliveries are asynchronous: one goroutine sends them in the order they
// were queued, so an action (which holds the lock) never waits for a
// receiver, and a receiver may call the REST API back while it handles a
// delivery. Each delivery's state, response status and duration are kept
// (Deliveries); tests wait with WaitDeliveries (the queue is empty) or
// WaitDelivery (one that matches is done), never by sleeping. Redeliver
// sends one again with the same X-GitHub-Delivery; SetBadSignature signs
// with a wrong secret on purpose; SetWebhookURL points an App's deliveries
// elsewhere ("" stops them), as for a receiver started after the App.
//
// # What it does not do
//
// No GraphQL, no forks into an organization, no merge strategies but a merge commit, no team review
// requests, no review_requested or pull request labeled webhooks, no
// dismissals or pending reviews, no label removal or assignees
// endpoints, no search or GraphQL rate limits (only "core"), no
// conditional requests (ETag), no 301 for renamed repositories, no
// webhook retries, no push events for tags. Comments made by a person
// carry performed_via_github_app null, which GitHub's issue_comment edited
// schema does not allow; the edited event is validated on an App's
// comment only.
//
// # Concurrency
//
// One mutex, Server.mu, guards every domain object, the request log and
// the delivery log. REST and control handlers hold it for their whole run,
// including the git commands that measure a pull request or compute a
// diff hunk; CreateRepo runs its git commands without it. git http-backend
// runs without it; the ref re-read after a push takes it. Goroutines: the
// HTTP server (with its handlers) and the delivery worker, both started by
// Start and waited for by Close, which ends handler contexts, shuts the
// server down, marks undelivered webhooks failed and removes a temporary
// directory it made.
//
// # Schemas
//
// Package ghschema holds GitHub's own descriptions, whole, as published in
// the npm packages @octokit/openapi@23.0.2 (generated/api.github.com.json,
// OpenAPI 3.0.3) and @octokit/openapi-webhooks@12.1.0 (OpenAPI 3.1),
// pinned by internal/extract, which checks each tarball's npm integrity
// (ghschema/descriptions/SOURCE.json records it and each file's SHA-256).
// Tests validate every REST request and answer and every webhook payload
// against them with formats asserted (ghschema.CheckExchanges does a whole
// request and delivery log), and fail if the server serves an operation
// or webhook GitHub does not describe.
package ghsim
