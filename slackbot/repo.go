package slackbot

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/harvest-dev/harvest/authz"
	"github.com/harvest-dev/harvest/session"
)

// A message names its repository as "owner/name" (a GitHub repository,
// when the server has GitHub) or by the name of a directory under one of
// the server's repository roots (--repo-root); the first word that is
// one is the session's. Slack writes a link as <URL|label>: the label
// counts, and a github.com URL names its repository.

var (
	ownerName = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$`)
	dirName   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)
	slackLink = regexp.MustCompile(`<([^>|]*)(?:\|([^>]*))?>`)
)

// repo is a repository a message named.
type repo struct {
	spec session.RepoSpec
	ref  authz.RepoRef
	name string
}

// words are a message's words, links replaced by what they name.
func words(text string) []string {
	text = slackLink.ReplaceAllStringFunc(text, func(m string) string {
		sub := slackLink.FindStringSubmatch(m)
		if u, ok := strings.CutPrefix(sub[1], "https://github.com/"); ok {
			return " " + strings.TrimSuffix(strings.TrimSuffix(u, "/"), ".git") + " "
		}
		if strings.HasPrefix(sub[1], "@") || strings.HasPrefix(sub[1], "#") || strings.HasPrefix(sub[1], "!") {
			return " "
		}
		return " " + sub[2] + " "
	})
	var out []string
	for _, w := range strings.Fields(text) {
		w = strings.Trim(w, "`*_~.,;:!?()[]{}\"'")
		if w != "" {
			out = append(out, w)
		}
	}
	return out
}

// repoIn is the first repository text names.
func (b *Bot) repoIn(text string) (repo, bool) {
	for _, w := range words(text) {
		if r, ok := b.lookupRepo(w); ok {
			return r, true
		}
	}
	return repo{}, false
}

// lookupRepo reads one name.
func (b *Bot) lookupRepo(w string) (repo, bool) {
	if ownerName.MatchString(w) && b.cfg.GitHub && !strings.Contains(w, "..") {
		return repo{spec: session.RepoSpec{GitHub: w}, ref: authz.RepoRef{GitHub: w, Name: w}, name: w}, true
	}
	if !dirName.MatchString(w) || w == "." || w == ".." {
		return repo{}, false
	}
	for _, root := range b.cfg.RepoRoots {
		dir := filepath.Join(root, w)
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return repo{spec: session.RepoSpec{Source: dir}, ref: authz.RepoRef{Dir: dir, Name: dir}, name: w}, true
		}
	}
	return repo{}, false
}

// howToName says how a message names a repository.
func (b *Bot) howToName() string {
	var ways []string
	if b.cfg.GitHub {
		ways = append(ways, "a GitHub repository as `owner/name`")
	}
	if len(b.cfg.RepoRoots) > 0 {
		var names []string
		for _, root := range b.cfg.RepoRoots {
			es, _ := os.ReadDir(root)
			for _, e := range es {
				if e.IsDir() && dirName.MatchString(e.Name()) && len(names) < 20 {
					names = append(names, "`"+e.Name()+"`")
				}
			}
		}
		if len(names) > 0 {
			ways = append(ways, "one of these by its name: "+strings.Join(names, ", "))
		}
	}
	if len(ways) == 0 {
		return "This Harvest server has no repository Slack may name (its operator gives --repo-root or a GitHub App)."
	}
	return "Which repository? Name " + strings.Join(ways, ", or ") + " in your message, " +
		"or set this channel's default with `/harvest repo NAME`."
}
