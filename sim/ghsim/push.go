package ghsim

import (
	"context"
	"slices"
	"strconv"
	"strings"
)

// push events: after a push, one per branch it created, moved or deleted
// (tags are not pushed through the stand-in's flows), before the
// pull_request synchronize of the pull requests it moved.

const zeroSHA = "0000000000000000000000000000000000000000"

// maxPushCommits bounds the commits listed in a push event (GitHub: 2048;
// the stand-in's pushes are small).
const maxPushCommits = 20

type wirePushAuthor struct {
	Name     string  `json:"name"`
	Email    *string `json:"email"`
	Username string  `json:"username,omitempty"`
}

type wirePushCommit struct {
	ID        string         `json:"id"`
	TreeID    string         `json:"tree_id"`
	Distinct  bool           `json:"distinct"`
	Message   string         `json:"message"`
	Timestamp string         `json:"timestamp"`
	URL       string         `json:"url"`
	Author    wirePushAuthor `json:"author"`
	Committer wirePushAuthor `json:"committer"`
	Added     []string       `json:"added"`
	Removed   []string       `json:"removed"`
	Modified  []string       `json:"modified"`
}

type pushHook struct {
	Ref        string           `json:"ref"`
	Before     string           `json:"before"`
	After      string           `json:"after"`
	Created    bool             `json:"created"`
	Deleted    bool             `json:"deleted"`
	Forced     bool             `json:"forced"`
	BaseRef    *string          `json:"base_ref"`
	Compare    string           `json:"compare"`
	Commits    []wirePushCommit `json:"commits"`
	HeadCommit *wirePushCommit  `json:"head_commit"`
	Pusher     wirePushAuthor   `json:"pusher"`
	hookCommon
}

// emitPushes queues a push event for each branch that changed from old to
// now. Called with s.mu held; it runs git.
func (s *Server) emitPushes(ctx context.Context, r *repo, old, now map[string]string, pusher *user) {
	var names []string
	for b := range now {
		if old[b] != now[b] {
			names = append(names, b)
		}
	}
	for b := range old {
		if _, ok := now[b]; !ok {
			names = append(names, b)
		}
	}
	slices.Sort(names)
	for _, b := range names {
		p := pushHook{Ref: "refs/heads/" + b, Before: old[b], After: now[b], Commits: []wirePushCommit{},
			Pusher: wirePushAuthor{Name: pusher.login, Email: emailOrNil(pusher)}}
		if p.Before == "" {
			p.Before, p.Created = zeroSHA, true
		}
		if p.After == "" {
			p.After, p.Deleted = zeroSHA, true
		}
		p.Compare = s.base + "/" + r.fullName() + "/compare/" + shortOf(p.Before) + "..." + shortOf(p.After)
		if !p.Deleted {
			if !p.Created {
				_, err := s.git(ctx, s.repoDir(r), "merge-base", "--is-ancestor", p.Before, p.After)
				p.Forced = err != nil
			}
			p.Commits = s.pushCommits(ctx, r, b, p, old)
			if c, err := s.readCommit(ctx, r, p.After); err == nil {
				hc := s.wPushCommit(r, c)
				p.HeadCommit = &hc
			}
		}
		s.emit(r, HookPush, "push", "", func(h hookCommon) any {
			q := p
			q.hookCommon = h
			return q
		}, pusher)
	}
}

// pushCommits lists the commits a push brought to branch b: those after
// before (or, for a new branch, those no other branch had), oldest first.
func (s *Server) pushCommits(ctx context.Context, r *repo, b string, p pushHook, old map[string]string) []wirePushCommit {
	args := []string{"rev-list", "--reverse", "--max-count=" + strconv.Itoa(maxPushCommits), p.After}
	if p.Created {
		for ob, sha := range old {
			if ob != b {
				args = append(args, "^"+sha)
			}
		}
	} else if !p.Forced {
		args = append(args, "^"+p.Before)
	} else {
		args = []string{"rev-list", "--max-count=1", p.After}
	}
	out, err := s.git(ctx, s.repoDir(r), append(args, "--")...)
	if err != nil {
		return []wirePushCommit{}
	}
	list := []wirePushCommit{}
	for _, sha := range strings.Fields(out) {
		c, err := s.readCommit(ctx, r, sha)
		if err != nil {
			continue
		}
		list = append(list, s.wPushCommit(r, c))
	}
	return list
}

func (s *Server) wPushCommit(r *repo, c gitCommit) wirePushCommit {
	an, cn := c.authorEmail, c.committerEmail
	return wirePushCommit{ID: c.sha, TreeID: c.tree, Distinct: true, Message: c.message, Timestamp: c.committerDate,
		URL: s.base + "/" + r.fullName() + "/commit/" + c.sha, Author: wirePushAuthor{Name: c.authorName, Email: &an},
		Committer: wirePushAuthor{Name: c.committerName, Email: &cn}, Added: []string{}, Removed: []string{}, Modified: []string{}}
}

func emailOrNil(u *user) *string {
	if u.email == "" {
		return nil
	}
	e := u.email
	return &e
}

func shortOf(sha string) string { return sha[:min(12, len(sha))] }
