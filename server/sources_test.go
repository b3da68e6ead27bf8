package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/wire"
)

// TestSourcePolicy: which directories a session may copy is the server's
// policy. A user token cannot name /etc, /, /dev, /proc/self, the data
// directory, a symlink into any of them, a relative path or another
// session's workspace: each is a 400 at create that says why, and nothing
// is copied. The admin token may name other directories, never those.
// Views show a user the source as given, never a host path.
func TestSourcePolicy(t *testing.T) {
	e := newAPIEnv(t)
	alice := e.create(e.AliceC, "")
	waitState(t, e, alice.ID, wire.StateIdle)
	other := e.create(e.BobC, "") // another tenant's session and workspace
	waitState(t, e, other.ID, wire.StateIdle)
	otherWS := e.adminView(other.ID).Repos[0].Path
	if _, err := os.Stat(otherWS); err != nil {
		t.Fatalf("bob's workspace: %v", err)
	}
	for link, target := range map[string]string{"to-etc": "/etc", "to-root": "/", "to-dev": "/dev", "to-proc": "/proc/self",
		"to-data": e.DataDir, "to-other": otherWS} {
		if err := os.Symlink(target, filepath.Join(e.RepoRoot, link)); err != nil {
			t.Fatal(err)
		}
	}
	before := workspaceDirs(t, e.DataDir)
	outside := testbin.TempDir(t) // a sibling of the root

	// Every directory a user may not copy gets the same answer, whatever
	// is there (see workspace.Policy): no oracle on the host's files.
	refused := "is not a directory this server copies for you: give an existing repository directory under " + e.RepoRoot
	bad := map[string]string{
		"/etc":                                refused,
		"/":                                   refused,
		"/dev":                                refused,
		"/proc/self":                          refused,
		"/proc/self/exe":                      refused,
		"/root":                               refused,
		"/root/nothere":                       refused,
		"/etc/shadow":                         refused,
		e.DataDir:                             refused,
		filepath.Join(e.DataDir, "nothere"):   refused,
		otherWS:                               refused,
		filepath.Join(e.RepoRoot, "to-etc"):   refused,
		filepath.Join(e.RepoRoot, "to-root"):  refused,
		filepath.Join(e.RepoRoot, "to-dev"):   refused,
		filepath.Join(e.RepoRoot, "to-proc"):  refused,
		filepath.Join(e.RepoRoot, "to-data"):  refused,
		filepath.Join(e.RepoRoot, "to-other"): refused,
		"../":                                 "relative path",
		filepath.Join(e.RepoRoot, "..", filepath.Base(outside)): refused,
		filepath.Join(e.RepoRoot, "missing"):                    refused,
		"https://git.example.com/acme/app.git":                  "no --git-host",
		"https://git.example.com/x.git --upload-pack=touch":     "contains whitespace",
		"https://git.example.com/x.git\n":                       "control character",
		e.Repo + "\t":                                           "control character",
		"file:///etc":                                           "file:// URLs are not accepted",
	}
	answers := map[string][]string{}
	for src, want := range bad {
		body, _ := json.Marshal(wire.CreateRequest{Repos: []wire.RepoSpec{{Source: src}}, Prompt: "msg hi"})
		code, info, _ := e.doRaw("POST", "/v1/sessions", "Bearer "+e.Alice, "application/json", body)
		if code != 400 || !strings.Contains(info.Message, want) || !strings.Contains(info.Message, "repos[0].source") {
			t.Errorf("a user's %q: %d %+v, want 400 saying %q", src, code, info, want)
		}
		if want == refused {
			// The whole answer (status, code, message, details), the
			// argument taken out: byte for byte one answer.
			details := make([]string, len(info.Details))
			for i, d := range info.Details {
				details[i] = strings.Replace(d, src, "SRC", 1)
			}
			msg := fmt.Sprintf("%d %s %s %q", code, info.Code, strings.Replace(info.Message, src, "SRC", 1), details)
			answers[msg] = append(answers[msg], src)
			if strings.Contains(msg, e.DataDir) || strings.Contains(msg, "which is") {
				t.Errorf("a user's %q: the answer gives away a host path: %s", src, info.Message)
			}
		}
	}
	if len(answers) != 1 {
		t.Errorf("a user can tell refused directories apart: %d different answers: %q", len(answers), answers)
	}
	// The admin may copy directories outside the roots, but never these.
	for _, src := range []string{"/", "/proc/self", "/dev", e.DataDir, otherWS, filepath.Join(e.RepoRoot, "to-other"), filepath.Join(e.RepoRoot, "to-data")} {
		body, _ := json.Marshal(wire.CreateRequest{Repos: []wire.RepoSpec{{Source: src}}})
		code, info, _ := e.doRaw("POST", "/v1/sessions", "Bearer "+e.Admin, "application/json", body)
		if code != 400 || !strings.Contains(info.Message, "may never copy") {
			t.Errorf("the admin's %q: %d %+v, want 400", src, code, info)
		}
	}
	if after := workspaceDirs(t, e.DataDir); after != before {
		t.Errorf("refused sessions copied something: the workspaces went from\n%s\nto\n%s", before, after)
	}

	// Several problems are all listed.
	body, _ := json.Marshal(wire.CreateRequest{Repos: []wire.RepoSpec{{Source: "/etc"}, {Source: "/proc/self"}}})
	if code, info, _ := e.doRaw("POST", "/v1/sessions", "Bearer "+e.Alice, "application/json", body); code != 400 || !strings.Contains(info.Message, "repos[0]") || !strings.Contains(info.Message, "repos[1]") {
		t.Errorf("two bad sources: %d %+v", code, info)
	}

	// A user sees the source as given; the admin also sees where it
	// resolved to and the host path of the copy.
	link := filepath.Join(e.RepoRoot, "link-to-repo")
	if err := os.Symlink(e.Repo, link); err != nil {
		t.Fatal(err)
	}
	v, err := e.AliceC.CreateSession(testbin.Context(t), wire.CreateRequest{Repos: []wire.RepoSpec{{Source: link}}})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, e, v.ID, wire.StateIdle)
	raw := e.rawJSON("GET", "/v1/sessions/"+v.ID, e.Alice)
	for _, leak := range []string{e.DataDir, `"path"`, `"origin"`, `"sandbox"`, e.Repo + `"`} {
		if strings.Contains(raw, leak) {
			t.Errorf("a user's view shows %s: %s", leak, raw)
		}
	}
	if !strings.Contains(raw, `"source":"`+link+`"`) {
		t.Errorf("a user's view does not show the source as given: %s", raw)
	}
	list := e.rawJSON("GET", "/v1/sessions", e.Alice)
	if strings.Contains(list, e.DataDir) || strings.Contains(list, `"sandbox"`) {
		t.Errorf("a user's list shows host paths: %s", list)
	}
	av := e.adminView(v.ID)
	if av.Repos[0].Origin != e.Repo || !strings.HasPrefix(av.Repos[0].Path, e.DataDir) || len(av.Sandbox) == 0 {
		t.Errorf("the admin's view: %+v", av.Repos)
	}
}

// TestDeleteProvisioningClone: a session whose clone hangs (a server that
// accepts and never answers) is deleted within 2 s, and no process of the
// clone is left.
func TestDeleteProvisioningClone(t *testing.T) {
	e := newAPIEnv(t)
	url, _ := testbin.HangingGitServer(t)
	v, err := e.AdminC.CreateSession(testbin.Context(t), wire.CreateRequest{Repos: []wire.RepoSpec{{Source: url}}, Prompt: "msg hi"})
	if err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, stacktest.WaitTimeout, "the clone to start", func() bool { return len(testbin.ProcsWith(url)) > 0 })
	if s := e.adminView(v.ID); s.State != wire.StateProvisioning {
		t.Fatalf("the session is %s, want provisioning", s.State)
	}
	start := time.Now()
	if err := e.AdminC.DeleteSession(testbin.Context(t), v.ID); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("DELETE of a provisioning session took %s", took)
	if took > 2*time.Second {
		t.Errorf("DELETE took %s, want at most 2 s", took)
	}
	testbin.WaitFor(t, stacktest.WaitTimeout, "the clone's processes to go", func() bool { return len(testbin.ProcsWith(url)) == 0 })
}

func waitState(t *testing.T, e *apiEnv, id string, want wire.State) {
	t.Helper()
	testbin.WaitFor(t, stacktest.WaitTimeout, fmt.Sprintf("session %s %s", id, want), func() bool { return e.adminView(id).State == want })
}

func (e *apiEnv) adminView(id string) *wire.View {
	e.T.Helper()
	v, err := e.AdminC.GetSession(testbin.Context(e.T), id)
	if err != nil {
		e.T.Fatal(err)
	}
	return v
}

// rawJSON is the body of a GET, as sent.
func (e *apiEnv) rawJSON(method, path, token string) string {
	e.T.Helper()
	req, err := http.NewRequestWithContext(testbin.Context(e.T), method, e.URL+path, nil)
	if err != nil {
		e.T.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.Transport.RoundTrip(req)
	if err != nil {
		e.T.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		e.T.Fatalf("%s %s: %d %v %s", method, path, resp.StatusCode, err, b)
	}
	return string(b)
}

// workspaceDirs lists every directory under the data dir's workspaces.
func workspaceDirs(t *testing.T, data string) string {
	var b strings.Builder
	filepath.WalkDir(filepath.Join(data, "workspaces"), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			b.WriteString(p + "\n")
		}
		return nil
	})
	return b.String()
}
