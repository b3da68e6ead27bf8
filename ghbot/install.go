package ghbot

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/store"
)

// Installations and pushes: what GitHub tells the app about itself
// (installation, installation_repositories) clears the caches of
// installation ids and tokens, so the next request asks GitHub; a
// suspended installation is marked (for every node) and nothing is done
// for it until it is unsuspended. A push marks the repository's mirrors
// stale (mirrors.go).

// onInstallation handles installation created, deleted, suspend,
// unsuspend and new_permissions_accepted.
func (h *Hooks) onInstallation(ctx context.Context, d *store.Delivery, e *github.InstallationEvent) (string, error) {
	g := h.svc.gh
	in := e.GetInstallation()
	id, acct, who := in.GetID(), in.GetAccount().GetLogin(), e.GetSender().GetLogin()
	switch e.GetAction() {
	case "created":
		// A reinstall gets a new id: what was cached for the account is
		// stale.
		g.ForgetAccount(acct)
		h.log.Info("the app was installed", "installation", id, "account", acct, "by", who)
		return fmt.Sprintf("installation %d on %s created: cached installations of %s forgotten", id, acct, acct), nil
	case "deleted":
		g.ForgetInstallation(id)
		g.ForgetAccount(acct)
		g.Unsuspend(ctx, id) // gone: nothing to keep marked
		h.log.Warn("the app was uninstalled: Harvest can no longer act on the account's repositories", "installation", id, "account", acct, "by", who)
		return fmt.Sprintf("installation %d on %s deleted: its caches forgotten", id, acct), nil
	case "suspend":
		note := fmt.Sprintf("suspended by %s", firstOf(in.GetSuspendedBy().GetLogin(), who))
		g.Suspend(ctx, id, note)
		h.log.Warn("the app's installation is suspended: Harvest does nothing for it until it is unsuspended", "installation", id, "account", acct, "by", who)
		return fmt.Sprintf("installation %d on %s suspended (%s): nothing is done for it until it is unsuspended", id, acct, note), nil
	case "unsuspend":
		g.Unsuspend(ctx, id)
		h.log.Info("the app's installation is unsuspended: Harvest acts for it again", "installation", id, "account", acct, "by", who)
		return fmt.Sprintf("installation %d on %s unsuspended", id, acct), nil
	case "new_permissions_accepted":
		g.ForgetInstallation(id)
		h.log.Info("the app's installation accepted new permissions: its tokens are minted anew", "installation", id, "account", acct)
		return fmt.Sprintf("installation %d on %s accepted new permissions: its tokens forgotten", id, acct), nil
	}
	return "ignored: installation " + e.GetAction(), nil
}

// onInstallationRepos handles installation_repositories added and
// removed.
func (h *Hooks) onInstallationRepos(ctx context.Context, d *store.Delivery, e *github.InstallationRepositoriesEvent) (string, error) {
	id := e.GetInstallation().GetID()
	var names []string
	for _, r := range append(e.RepositoriesAdded, e.RepositoriesRemoved...) {
		names = append(names, r.GetFullName())
	}
	h.svc.gh.ForgetRepos(names...)
	h.svc.gh.ForgetInstallation(id)
	h.log.Info("the app's installation changed its repositories", "installation", id, "action", e.GetAction(), "repos", names)
	return fmt.Sprintf("installation %d: %s %s; its caches forgotten", id, e.GetAction(), strings.Join(names, ", ")), nil
}

// onPush marks the pushed repository's mirrors stale; they are fetched
// in the background.
func (h *Hooks) onPush(ctx context.Context, d *store.Delivery, e *github.PushEvent) (string, error) {
	repo := e.GetRepo().GetFullName()
	if repo == "" {
		return "ignored: a push with no repository", nil
	}
	at := d.ReceivedAt
	if at.IsZero() {
		at = h.now()
	}
	h.svc.Pushed(ctx, repo, at)
	return fmt.Sprintf("push to %s %s: its mirror is fetched in the background", repo, e.GetRef()), nil
}
