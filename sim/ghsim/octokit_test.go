package ghsim_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sim/ghsim"
)

// octokitVersion pins the official JavaScript client the second check uses.
const octokitVersion = "22.0.1"

// needNode returns node and npm, or skips (fails where testreq.NPM is
// required, as in CI: CI must run the check).
func needNode(t *testing.T) (node, npm string) {
	t.Helper()
	node, err1 := exec.LookPath("node")
	npm, err2 := exec.LookPath("npm")
	if err1 != nil || err2 != nil {
		testreq.Unavailable(t, testreq.NPM, "node and npm are needed to run @octokit/rest against the stand-in: %v %v", err1, err2)
	}
	return node, npm
}

// TestOctokit: the official @octokit/rest client, pointed at the stand-in,
// gets a repository, comments, opens a pull request and lists it.
func TestOctokit(t *testing.T) {
	node, npm := needNode(t)
	dir := t.TempDir()
	install := exec.Command(npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "--silent", "@octokit/rest@"+octokitVersion)
	if out, err := install.CombinedOutput(); err != nil {
		testreq.Unavailable(t, testreq.NPM, "npm install @octokit/rest@%s failed (no registry?): %v\n%s", octokitVersion, err, out)
	}
	w := newWorld(t, ghsim.Options{})
	if _, err := w.srv.OpenIssue(ghsim.IssueSpec{Login: "alice", Repo: "acme/widget", Title: "Bug"}); err != nil {
		t.Fatal(err)
	}
	tok, err := w.srv.Token(w.instID)
	if err != nil {
		t.Fatal(err)
	}
	script, _ := filepath.Abs("testdata/octokit/calls.mjs")
	cmd := exec.Command(node, script)
	cmd.Env = append(os.Environ(), "OCTOKIT_DIR="+dir, "GH_TOKEN="+tok, "GH_BASE_URL="+w.srv.URL()+"/api/v3")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("node: %v\n%s%s", err, out, stderr)
	}
	var got struct {
		Repo struct {
			Status        int    `json:"status"`
			FullName      string `json:"full_name"`
			DefaultBranch string `json:"default_branch"`
		}
		Comment struct {
			Status int
			Body   string
			User   string
		}
		Pull struct {
			Status int
			Number int
			Draft  bool
			Head   string
		}
		List struct {
			Status  int
			Numbers []int
		}
		Duplicate struct {
			Status  int
			Message string
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.Repo.Status != 200 || got.Repo.FullName != "acme/widget" || got.Repo.DefaultBranch != "main" {
		t.Errorf("repos.get: %+v", got.Repo)
	}
	if got.Comment.Status != 201 || got.Comment.Body != "from octokit" || got.Comment.User != "harvest-test[bot]" {
		t.Errorf("issues.createComment: %+v", got.Comment)
	}
	if got.Pull.Status != 201 || got.Pull.Number != 2 || !got.Pull.Draft || got.Pull.Head != "feature" {
		t.Errorf("pulls.create: %+v", got.Pull)
	}
	if got.List.Status != 200 || len(got.List.Numbers) != 1 || got.List.Numbers[0] != 2 {
		t.Errorf("pulls.list: %+v", got.List)
	}
	if got.Duplicate.Status != 422 || got.Duplicate.Message != "A pull request already exists for acme:feature." {
		t.Errorf("duplicate pulls.create: %+v", got.Duplicate)
	}
	// What octokit sent is in the request log.
	var paths []string
	for _, r := range w.srv.Requests() {
		if ua := r.Header.Get("User-Agent"); len(ua) >= 11 && ua[:11] == "octokit-res" {
			paths = append(paths, r.Method+" "+r.Path)
		}
	}
	if len(paths) != 5 {
		t.Errorf("octokit requests logged: %v", paths)
	}
}
