package gh

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/google/go-github/v75/github"
)

// PermissionScope is what asking for a person's permission on a
// repository needs: metadata, read.
func PermissionScope(repo string) Scope {
	return Scope{Repos: []string{repo}, Permissions: map[string]string{"metadata": "read"}}
}

// Permission is login's permission on repo ("owner/name"), as GitHub's
// collaborator permission API answers it (GET
// /repos/{owner}/{repo}/collaborators/{username}/permission), asked with
// an installation token narrowed to metadata: read on repo (or the
// personal token): "admin", "maintain" (GitHub's role_name when it is
// one), "write", "triage" (likewise), "read" or "none", and the id of the
// account it answered for. A login GitHub does not know there (404) is
// "" and no error. It never waits for a rate-limit window (NoWait): a
// person waiting for a page is told to retry (a *RateLimitedError).
func (g *GitHub) Permission(ctx context.Context, repo, login string) (perm string, id int64, err error) {
	var c *github.Client
	if g.key == nil {
		c, err = g.tokenClient()
	} else {
		c, err = g.Client(PermissionScope(repo))
	}
	if err != nil {
		return "", 0, err
	}
	owner, name, _ := strings.Cut(repo, "/")
	p, _, err := c.Repositories.GetPermissionLevel(NoWait(ctx), owner, name, login)
	if err != nil {
		var ge *github.ErrorResponse
		if errors.As(err, &ge) && ge.Response != nil && ge.Response.StatusCode == http.StatusNotFound {
			return "", 0, nil
		}
		return "", 0, explain(err, "checking @"+login+"'s permission on "+repo)
	}
	perm = p.GetPermission()
	if rn := p.GetRoleName(); rn == "maintain" || rn == "triage" {
		perm = rn
	}
	return perm, p.GetUser().GetID(), nil
}
