package ghsim_test

import (
	"fmt"
	"testing"

	"github.com/harvest-dev/harvest/sim/ghsim"
)

// TestBranchWithSlash: a branch named with a slash (Harvest's
// harvest/<issue>-<slug>) is one path segment, escaped, as GitHub reads
// .../branches/{branch}: found, not a 404 of a longer path.
func TestBranchWithSlash(t *testing.T) {
	w := newWorld(t, ghsim.Options{})
	ctx := ctxT(t)
	dir := makeSource(t)
	mustGit(t, dir, "branch", "harvest/1-fix-it", "feature")
	want := mustGit(t, dir, "rev-parse", "feature")
	if _, err := w.srv.CreateRepo(ctx, ghsim.RepoSpec{Owner: "acme", Name: "slashed", Dir: dir, Private: true}); err != nil {
		t.Fatal(err)
	}
	status, body := doJSON(t, "POST", w.srv.URL()+"/api/v3/app/installations/"+fmt.Sprint(w.instID)+"/access_tokens", "Bearer "+w.jwt(t), map[string]any{})
	if status != 201 {
		t.Fatalf("mint: %d %v", status, body)
	}
	gh := client(t, w, newValidatingTransport(t), "token "+body["token"].(string))
	br, _, err := gh.Repositories.GetBranch(ctx, "acme", "slashed", "harvest/1-fix-it", 0)
	if err != nil || br.GetName() != "harvest/1-fix-it" || br.GetCommit().GetSHA() != want {
		t.Fatalf("GET branch harvest/1-fix-it: %v %+v, want its head %s", err, br, want)
	}
	if _, resp, err := gh.Repositories.GetBranch(ctx, "acme", "slashed", "harvest/none", 0); err == nil || resp.StatusCode != 404 {
		t.Fatalf("GET branch harvest/none: %v, want a 404", err)
	}
}
