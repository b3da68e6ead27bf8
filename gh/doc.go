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
// # Enterprise and tests
//
// APIURL and WebURL point Harvest at a GitHub Enterprise Server or at the
// stand-in (package sim/ghsim); the same client code runs against both.
//
// # Concurrency
//
// A *GitHub is safe for concurrent use. Its caches are guarded by one
// mutex; a token being minted is waited on by every caller of the same
// scope (a channel closed when it is done), never minted twice. Every call
// that reaches GitHub takes a context.
package gh
