package slackbot

import (
	"context"
	"strconv"
	"sync"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/store"
)

// # GitHub repositories in the picker
//
// With a GitHub App (Config.Installed), a picker lists, beside the
// directories, the GitHub repositories the app's installations cover
// that the person may start a session on: the same decision as a
// mention naming owner/name (authz's Start, which asks GitHub for the
// person's permission and caches it). The list of installed
// repositories is the gh package's, cached there for a few minutes and
// dropped by the installation events; only the first maxChecked by name
// are checked (one permission request each on a cold cache, at most
// checkers at a time, each with a Checker of its own), and the picker says so when there were more, and
// how to name another. A choice of one starts the session exactly as a
// mention naming it does (lookupRepo, mayStart, create).

const (
	// maxChecked bounds the GitHub repositories whose permission a
	// picker asks for.
	maxChecked = 100
	// checkers bounds the permission checks made at once.
	checkers = 8
)

// ghChoices are the GitHub repositories u may start a session on, by
// name (at most maxChecked checked), and a note for the picker when the
// list is cut or could not be made ("" when it is whole).
func (b *Bot) ghChoices(ctx context.Context, u *store.User) (names []string, note string) {
	if b.cfg.Installed == nil {
		return nil, ""
	}
	repos, cut, err := b.cfg.Installed(ctx)
	if err != nil {
		b.log.Warn("listing the GitHub App's repositories for a picker", "err", err)
		return nil, "I couldn't list the GitHub repositories just now (" + err.Error() + "): name one as `owner/name` in a reply that mentions me."
	}
	if len(repos) > maxChecked {
		repos, cut = repos[:maxChecked], true
	}
	sub := authz.Subject{User: u.ID, Role: u.Role}
	ok := make([]bool, len(repos))
	failed := make([]error, len(repos))
	var wg sync.WaitGroup
	sem := make(chan struct{}, checkers)
	for i, r := range repos {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				failed[i] = context.Cause(ctx)
				return
			}
			defer func() { <-sem }()
			// A Checker each: one is not safe for concurrent use (the
			// GitHub answers' cache, authz.GitHubPerms, is shared).
			refusal, err := b.cfg.Access.For(sub).Start(ctx, []authz.RepoRef{{GitHub: r, Name: r}})
			ok[i], failed[i] = err == nil && refusal == nil, err
		}()
	}
	wg.Wait()
	unchecked := 0
	for i, r := range repos {
		if ok[i] {
			names = append(names, r)
		}
		if failed[i] != nil {
			unchecked++
			if unchecked == 1 {
				b.log.Warn("checking a person's permission on a GitHub repository for a picker", "repo", r, "user", u.ID, "err", failed[i])
			}
		}
	}
	switch {
	case unchecked > 0:
		note = "I couldn't check your access to " + strconv.Itoa(unchecked) + " GitHub repositories just now, so they are not listed"
	case cut:
		note = "Only the first " + strconv.Itoa(len(repos)) + " GitHub repositories of the app's installations (by name) were looked at"
	default:
		return names, ""
	}
	return names, note + ": name another as `owner/name` in a reply that mentions me."
}

// split shares a picker's MaxChoices options between two lists: each
// keeps what it has when both fit, else the shorter keeps its own (up to
// half) and the longer takes the rest.
func split(a, b int) (int, int) {
	if a+b <= MaxChoices {
		return a, b
	}
	half := MaxChoices / 2
	switch {
	case a < half:
		return a, MaxChoices - a
	case b < half:
		return MaxChoices - b, b
	}
	return half, MaxChoices - half
}
