package ghbot

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/store"
)

// Branch names say what the work is: harvest/<issue>-<slug of its
// title> ("harvest/42-add-is-wrong"), made of lower-case letters, digits
// and single dashes, so always within git's ref rules (no "..", "@{",
// control characters, trailing "." or ".lock"). A name GitHub has already
// (a kept branch of an earlier session) or a live session holds gets a
// suffix, -2, -3, …; after maxBranchTries the session's id is the
// suffix. Two deliveries racing for one issue may pick the same name:
// the store lets one session hold it and the other request goes to that
// session (start).

// maxSlug bounds the slug of a branch name (GitHub shows about this much
// of a branch in a pull request's header).
const maxSlug = 40

// maxBranchTries bounds the names asked of GitHub before the session id
// makes one unique.
const maxBranchTries = 5

// slug is text in lower-case words joined by dashes, at most n bytes, cut
// at a word.
func slug(text string, n int) string {
	var words []string
	var w strings.Builder
	flush := func() {
		if w.Len() > 0 {
			words = append(words, w.String())
			w.Reset()
		}
	}
	for _, r := range strings.ToLower(text) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			w.WriteRune(r)
		} else {
			flush()
		}
	}
	flush()
	var out string
	for _, word := range words {
		next := word
		if out != "" {
			next = out + "-" + word
		}
		if len(next) > n {
			if out == "" {
				out = word[:n]
			}
			break
		}
		out = next
	}
	return out
}

// workBranch is a new session's branch for issue num of repo titled
// title: harvest/<num>-<slug>, unique (see above).
func (h *Hooks) workBranch(ctx context.Context, c *github.Client, repo string, num int, title, session string) (string, error) {
	base := fmt.Sprintf("harvest/%d", num)
	if s := slug(title, maxSlug); s != "" {
		base += "-" + s
	}
	owner, name := split(repo)
	for i := 1; i <= maxBranchTries; i++ {
		b := base
		if i > 1 {
			b = fmt.Sprintf("%s-%d", base, i)
		}
		if held, err := h.st.BranchSession(ctx, repo, b); err == nil && held != "" && held != session {
			continue
		} else if err != nil && !errors.Is(err, store.ErrNotFound) {
			return "", err
		}
		_, resp, err := c.Repositories.GetBranch(ctx, owner, name, b, 0)
		if resp != nil && resp.StatusCode == 404 {
			return b, nil
		}
		if err != nil {
			return "", explain(err, "looking for branch "+b)
		}
	}
	return base + "-" + strings.ToLower(session), nil
}
