package ghbot

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/gh"
	"github.com/harvest-dev/harvest/store"
)

// Who the commits are by.
//
// By default (AuthorBot) the app's bot writes the code: it is the author
// and the committer, as GitHub writes its bots, "slug[bot]
// <ID+slug[bot]@users.noreply.github.com>" where ID is the bot account's
// own id (GET /users/slug%5Bbot%5D; not the app's id), so GitHub shows the
// commits as the bot's. The person who asked is credited with a
// Co-authored-by trailer, which GitHub shows as a co-author: a
// prepare-commit-msg hook installed in the clone (.git/hooks, before any
// box has seen it) adds it to every commit made there, however it is
// made: the agent's own `git commit`, an amend, a merge, Harvest's commit
// of what the agent left. prepare-commit-msg runs even with --no-verify
// (only pre-commit and commit-msg are skipped), and git
// interpret-trailers --if-exists addIfDifferent adds the line once. An
// agent that points core.hooksPath elsewhere, or deletes the hook, loses
// the trailer: the credit is a courtesy, not a control.
//
// AuthorRequester (--github-commit-author requester) keeps the old way:
// the person who asked is the author (their name with " (Harvest)" and
// their noreply address), the bot the committer, no trailer.
//
// A session created through the API has no GitHub requester: the bot is
// author and committer, with no trailer.

// Commit authors (Config.CommitAuthor).
const (
	AuthorBot       = "bot"
	AuthorRequester = "requester"
)

// commitHook is the hook that adds the trailer.
const commitHook = "prepare-commit-msg"

// identities says who authors a session's commits, who commits them, and
// whom a Co-authored-by trailer credits (coauthor.Email "" for nobody).
func (s *Service) identities(ctx context.Context, c *github.Client, sess *store.Session) (author, committer, coauthor gh.Identity, err error) {
	bot, err := s.botIdentity(ctx, c)
	if err != nil {
		return gh.Identity{}, gh.Identity{}, gh.Identity{}, err
	}
	l := sess.GitHub
	if l == nil || l.Requester == "" {
		return bot, bot, gh.Identity{}, nil
	}
	name := l.RequesterName
	if name == "" {
		name = l.Requester
	}
	who := gh.Identity{Login: l.Requester, ID: l.RequesterID, Name: name, Email: s.gh.Noreply(l.RequesterID, l.Requester)}
	if strings.EqualFold(who.Login, bot.Login) {
		return bot, bot, gh.Identity{}, nil
	}
	if s.cfg.CommitAuthor == AuthorRequester {
		who.Name += " (Harvest)"
		return who, bot, gh.Identity{}, nil
	}
	return bot, bot, who, nil
}

// botIdentity is Harvest's account as commits name it: for an app, its
// bot user (slug[bot]) with the bot user's id in its noreply address,
// asked of GitHub once (c is any client that may read users); for a
// token, the token's user.
func (s *Service) botIdentity(ctx context.Context, c *github.Client) (gh.Identity, error) {
	bot, err := s.gh.Bot(ctx)
	if err != nil || !s.gh.IsApp() {
		return bot, err
	}
	s.mu.Lock()
	id := s.botID
	s.mu.Unlock()
	if id == 0 {
		// The login's brackets escaped, as GitHub's own URLs write it.
		u, _, err := c.Users.Get(ctx, url.PathEscape(bot.Login))
		if err != nil {
			return gh.Identity{}, explain(err, "asking GitHub for the bot account "+bot.Login)
		}
		if id = u.GetID(); id == 0 {
			return gh.Identity{}, fmt.Errorf("GitHub answered with no id for the bot account %s", bot.Login)
		}
		s.mu.Lock()
		s.botID = id
		s.mu.Unlock()
	}
	return gh.Identity{Login: bot.Login, ID: id, Name: bot.Login, Email: s.gh.Noreply(id, bot.Login)}, nil
}

// coauthorHooks are the clone's git hooks crediting who (none when
// who.Email is "").
func coauthorHooks(who gh.Identity) map[string]string {
	if who.Email == "" {
		return nil
	}
	trailer := "Co-authored-by: " + trailerName(who.Name) + " <" + who.Email + ">"
	return map[string]string{commitHook: "#!/bin/sh\n" +
		"# Installed by Harvest: credits the person who asked for this work in\n" +
		"# every commit made here (GitHub shows them as a co-author).\n" +
		"[ -n \"$1\" ] || exit 0\n" +
		"exec git interpret-trailers --in-place --if-exists addIfDifferent --trailer " + shellQuote(trailer) + " \"$1\"\n"}
}

// trailerName is a display name fit for a trailer: one line, no angle
// brackets (they delimit the address).
func trailerName(n string) string {
	n = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f || r == '<' || r == '>' {
			return -1
		}
		return r
	}, n)
	return strings.TrimSpace(n)
}

// shellQuote quotes s for sh, as one word.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
