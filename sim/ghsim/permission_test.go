package ghsim_test

import (
	"net/http"
	"testing"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/sim/ghsim"
)

// TestCollaboratorPermission: GET .../collaborators/{username}/permission
// answers each person's role as GitHub does (admin, write, read; none on
// a private repository; 404 for a login GitHub does not know), with an
// installation token that has metadata: read only, every answer checked
// against GitHub's description; a role changed or removed through the
// control API (POST /_sim/github/permissions) is the next answer.
func TestCollaboratorPermission(t *testing.T) {
	w := newWorld(t, ghsim.Options{})
	v := newValidatingTransport(t)
	ctx := ctxT(t)
	appc := client(t, w, v, "Bearer "+w.jwt(t))
	tok, _, err := appc.Apps.CreateInstallationToken(ctx, w.instID, &github.InstallationTokenOptions{
		Repositories: []string{"widget"}, Permissions: &github.InstallationPermissions{Metadata: github.Ptr("read")}})
	if err != nil {
		t.Fatal(err)
	}
	gh := client(t, w, v, "token "+tok.GetToken())
	perm := func(login string) (string, int64, int) {
		t.Helper()
		p, resp, err := gh.Repositories.GetPermissionLevel(ctx, "acme", "widget", login)
		if err != nil {
			if resp != nil {
				return "", 0, resp.StatusCode
			}
			t.Fatal(err)
		}
		return p.GetPermission(), p.GetUser().GetID(), resp.StatusCode
	}
	for _, c := range []struct {
		login string
		want  string
		id    int64
	}{{"alice", "admin", w.alice.ID}, {"bob", "read", w.bob.ID}, {"mallory", "none", w.mallory.ID}} {
		if p, id, status := perm(c.login); status != 200 || p != c.want || id != c.id {
			t.Errorf("%s: %d %q (account %d), want %q of %d", c.login, status, p, id, c.want, c.id)
		}
	}
	if _, _, status := perm("nobody-here"); status != http.StatusNotFound {
		t.Errorf("an unknown login: %d, want 404", status)
	}

	// bob made a writer, then removed, through the control API.
	for _, c := range []struct{ perm, want string }{{"write", "write"}, {"none", "none"}} {
		if status, out := doJSON(t, "POST", w.srv.URL()+"/_sim/github/permissions", "", ghsim.PermissionSpec{Repo: "acme/widget", Login: "bob", Permission: ghsim.Permission(c.perm)}); status != 200 && status != 204 {
			t.Fatalf("POST /_sim/github/permissions: %d %v", status, out)
		}
		if p, _, _ := perm("bob"); p != c.want {
			t.Errorf("bob after %s: %q, want %q", c.perm, p, c.want)
		}
	}
	if status, out := doJSON(t, "POST", w.srv.URL()+"/_sim/github/permissions", "", ghsim.PermissionSpec{Repo: "acme/widget", Login: "bob", Permission: "owner"}); status != 400 {
		t.Errorf("a permission that is not one: %d %v, want 400", status, out)
	}
}
