package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v75/github"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sim/ghsim"
	"github.com/harvest-dev/harvest/sim/ghsim/ghschema"
	"github.com/harvest-dev/harvest/wire"
)

// globex adds a second account to g: the app installed on globex (with
// perms, or the app's), its repository globex/calc (the same failing
// test) with ada (write) and mallory (read), and an issue on it.
func (g *ghEnv) globex(t testing.TB, perms map[string]string) (inst int64, issue int) {
	t.Helper()
	src := t.TempDir()
	testbin.Git(t, src, "clone", "-q", filepath.Join(g.gs.Dir(), "repos", "acme", "calc.git"), ".")
	if _, err := g.gs.CreateRepo(context.Background(), ghsim.RepoSpec{Owner: "globex", Name: "calc", Dir: src, DefaultBranch: "main", Private: true}); err != nil {
		t.Fatal(err)
	}
	inst, err := g.gs.CreateInstallation(ghsim.InstallationSpec{AppID: g.app.ID, Account: "globex", Permissions: perms})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []ghsim.PermissionSpec{{Repo: "globex/calc", Login: "ada", Permission: "write"}, {Repo: "globex/calc", Login: "mallory", Permission: "read"}} {
		if err := g.gs.SetPermission(p); err != nil {
			t.Fatal(err)
		}
	}
	if issue, err = g.gs.OpenIssue(ghsim.IssueSpec{Login: "ada", Repo: "globex/calc", Title: "add is wrong", Body: "test.sh fails."}); err != nil {
		t.Fatal(err)
	}
	return inst, issue
}

// byHarvest reports whether the stand-in's request was Harvest's: with an
// installation token, the app's JWT, or git with an installation token
// (not a person's token, as the test's own reads are).
func byHarvest(r ghsim.Request) bool {
	a := r.Header.Get("Authorization")
	switch {
	case strings.HasPrefix(a, "token ghs_"), strings.HasPrefix(a, "Bearer ey"):
		return true
	case strings.HasPrefix(a, "Basic "):
		b, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(a, "Basic "))
		_, pass, _ := strings.Cut(string(b), ":")
		return strings.HasPrefix(pass, "ghs_")
	}
	return false
}

// of reports whether the request concerns account's repositories or its
// installation.
func of(r ghsim.Request, account string, inst int64) bool {
	return strings.Contains(r.Path, "/"+account+"/") || strings.Contains(r.Path, fmt.Sprintf("/installations/%d/", inst))
}

// checkExchanges validates everything the stand-in said in the test
// against GitHub's whole published descriptions.
func checkExchanges(t testing.TB, g *ghEnv) {
	t.Helper()
	ds, err := g.gs.WaitDeliveries(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range ghschema.CheckExchanges(g.gs.Requests(), ds) {
		t.Error(err)
	}
}

// TestGitHubRateLimits: GitHub answers a secondary limit (403,
// Retry-After: 10) on acme's installation and has globex's primary limit
// used up until a reset 20 s away. A mention on each: Harvest sends acme
// nothing for 10 s after the refusal and globex nothing before the reset
// (one refused request each, the one that told it), then does the work:
// the 👀 and a pull request on each. The deliveries' attempts are not
// burned by the wait. This takes the real 20 seconds (gh's tests check the
// same with a clock that does not).
func TestGitHubRateLimits(t *testing.T) {
	g := newGHEnv(t)
	globexInst, globexIssue := g.globex(t, nil)
	e, s := g.serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ada := g.client(t, g.ada)
	// Harvest knows both installations and has its tokens: mallory is
	// refused on each (politely, with a reply).
	for _, at := range []struct {
		repo  string
		issue int
	}{{"acme/calc", g.issue}, {"globex/calc", globexIssue}} {
		if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "mallory", Repo: at.repo, Number: at.issue, Body: "@harvest hello"}); err != nil {
			t.Fatal(err)
		}
	}
	waitHTTP(t, time.Minute, "the replies to mallory", func() bool {
		n := 0
		for _, r := range g.gs.Requests() {
			if r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/comments") && byHarvest(r) && r.Status == http.StatusCreated {
				n++
			}
		}
		return n == 2
	})

	start := time.Now()
	if err := g.gs.SetSecondaryLimit(ghsim.SecondaryLimitSpec{LimitScope: ghsim.LimitScope{InstallationID: g.inst}, For: 10}); err != nil {
		t.Fatal(err)
	}
	if err := g.gs.SetRateLimit(ghsim.RateLimitSpec{LimitScope: ghsim.LimitScope{InstallationID: globexInst}, Remaining: 0, ResetIn: 20}); err != nil {
		t.Fatal(err)
	}
	reset := start.Add(20 * time.Second).Truncate(time.Second)
	for _, at := range []struct {
		repo  string
		issue int
	}{{"acme/calc", g.issue}, {"globex/calc", globexIssue}} {
		if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: at.repo, Number: at.issue, Body: "@harvest fix the failing test"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, repo := range []string{"acme", "globex"} {
		waitHTTP(t, 3*time.Minute, "the pull request on "+repo+"/calc", func() bool {
			prs, _, err := ada.PullRequests.List(ctx, repo, "calc", &github.PullRequestListOptions{State: "open"})
			return err == nil && len(prs) == 1
		})
	}

	windows := []struct {
		account string
		inst    int64
		until   time.Time
	}{{"acme", g.inst, start.Add(10 * time.Second)}, {"globex", globexInst, reset}}
	for _, w := range windows {
		var inside []string
		refused, after := 0, 0
		for _, r := range g.gs.Requests() {
			if !byHarvest(r) || !of(r, w.account, w.inst) || r.Time.Before(start) {
				continue
			}
			switch {
			case r.Time.Before(w.until) && r.Status == http.StatusForbidden:
				refused++
			case r.Time.Before(w.until):
				inside = append(inside, fmt.Sprintf("%s %s %d at +%s", r.Method, r.Path, r.Status, r.Time.Sub(start).Round(time.Millisecond)))
			default:
				after++
			}
		}
		if refused != 1 || len(inside) > 0 {
			t.Errorf("%s: %d refused requests and %d others inside the window (until +%s): %v; want the one refused and nothing else",
				w.account, refused, len(inside), w.until.Sub(start).Round(time.Millisecond), inside)
		}
		if after == 0 {
			t.Errorf("%s: no request after the window: the work was not done", w.account)
		}
	}
	// The wait burned no attempt: each delivery was done in one.
	c := e.client(s)
	ds, err := c.GitHubDeliveries(ctx, wire.DeliveryDone, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Event == "issue_comment" && d.Sender == "ada" && d.Attempts != 1 {
			t.Errorf("delivery %s on %s: %d attempts; want 1 (a wait for GitHub's limit is not an attempt)", d.ID, d.Repo, d.Attempts)
		}
	}
	if logs := s.stderr.String(); !strings.Contains(logs, "GitHub's rate limit: holding requests back") {
		t.Errorf("harvest serve's log does not say it held requests back:\n%s", logs)
	}
}

// harvestCLI runs the real harvest binary with args in e's environment and
// returns its exit code and output.
func (e *serveEnv) harvestCLI(args ...string) (int, string) {
	e.t.Helper()
	cmd := exec.Command(testbin.Harvest(e.t), args...)
	cmd.Env = e.env
	b, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(b)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return 0, string(b)
}

// delivery waits for the stored delivery that match accepts to be in
// state, and returns it.
func delivery(t testing.TB, c *client.Client, state string, match func(wire.GitHubDelivery) bool) wire.GitHubDelivery {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ds, err := c.GitHubDeliveries(context.Background(), "", maxListed)
		if err == nil {
			for _, d := range ds {
				if d.State == state && match(d) {
					return d
				}
			}
		}
		if time.Now().After(deadline) {
			// What there is instead: every delivery the match takes, in
			// whatever state, and the ones not done.
			var b strings.Builder
			for _, d := range ds {
				if match(d) || d.State != wire.DeliveryDone {
					fmt.Fprintf(&b, "\n  %s %s/%s %s attempts %d not before %s: %s", d.ID, d.Event, d.Action, d.State, d.Attempts,
						d.NotBefore.Format(time.RFC3339Nano), d.Result)
				}
			}
			t.Fatalf("waited 2m0s for a %s delivery (listing: %v); the matching or unfinished deliveries:%s", state, err, b.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// maxListed is the server's bound on a listing of deliveries.
const maxListed = 1000

// TestGitHubPermanentFailures: GitHub's refusals fail a delivery at once,
// and the person who asked is told where a comment can be posted. An
// installation without the permissions Harvest asks for: one attempt, and
// a reply on the issue saying what the account's admin does. A repository
// the app is no longer installed on (the delivery redelivered after it was
// taken out): one attempt, no reply possible, the result and the log say
// so. Both are listed by harvest github deliveries --failed.
func TestGitHubPermanentFailures(t *testing.T) {
	g := newGHEnv(t)
	_, globexIssue := g.globex(t, map[string]string{"metadata": "read", "issues": "write", "contents": "read"})
	if _, err := g.gs.CreateRepo(context.Background(), ghsim.RepoSpec{Owner: "acme", Name: "other", Dir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	e := newServeEnvWith(t, githubScript)
	s := e.start(g.serveArgs()...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := e.client(s)

	// Taken out of the installation while its delivery did not arrive
	// (GitHub could not reach Harvest); GitHub's "Redeliver" sends it
	// later.
	if err := g.gs.SetWebhookURL(g.app.ID, "http://127.0.0.1:1/nowhere"); err != nil {
		t.Fatal(err)
	}
	cid, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: g.issue, Body: "@harvest fix the failing test"})
	if err != nil {
		t.Fatal(err)
	}
	lost, err := g.gs.WaitDelivery(ctx, func(d ghsim.Delivery) bool {
		return d.Event == "issue_comment" && strings.Contains(string(d.Payload), fmt.Sprintf(`"id":%d`, cid))
	})
	if err != nil || lost.State != ghsim.DeliveryFailed {
		t.Fatalf("the delivery to nowhere: %+v, %v", lost, err)
	}
	if err := g.gs.SetInstallationRepos(ghsim.InstallationReposSpec{InstallationID: g.inst, Remove: []string{"calc"}}); err != nil {
		t.Fatal(err)
	}
	if err := g.gs.SetWebhookURL(g.app.ID, s.url+"/v1/github/webhook"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.gs.Redeliver(lost.ID); err != nil {
		t.Fatal(err)
	}
	d := delivery(t, c, wire.DeliveryFailed, func(d wire.GitHubDelivery) bool { return d.ID == lost.GUID })
	if d.Attempts != 1 || !strings.Contains(d.Result, "not installed") || !strings.Contains(d.Result, "not told") {
		t.Errorf("the delivery for a repository the app left: %d attempts, result %q; want 1, saying the app is not installed and nobody could be told", d.Attempts, d.Result)
	}
	if logs := s.stderr.String(); !strings.Contains(logs, "install the app on it") {
		t.Errorf("the log does not say what to do:\n%s", logs)
	}

	// Permissions the installation was not granted: the reply says what
	// to do.
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "globex/calc", Number: globexIssue, Body: "@harvest fix the failing test"}); err != nil {
		t.Fatal(err)
	}
	d = delivery(t, c, wire.DeliveryFailed, func(d wire.GitHubDelivery) bool { return d.Repo == "globex/calc" })
	if d.Attempts != 1 || !strings.Contains(d.Result, "told on globex/calc#") {
		t.Errorf("the delivery without the permissions: %d attempts, result %q; want 1, told on the issue", d.Attempts, d.Result)
	}
	var reply string
	waitHTTP(t, time.Minute, "the reply on globex/calc", func() bool {
		cs, _, err := g.client(t, g.ada).Issues.ListComments(ctx, "globex", "calc", globexIssue, nil)
		for _, cm := range cs {
			if err == nil && strings.Contains(cm.GetBody(), "Harvest could not do this") {
				reply = cm.GetBody()
			}
		}
		return reply != ""
	})
	for _, want := range []string{"@ada", "has not been granted the permissions", "An admin of globex", "harvest github replay " + d.ID} {
		if !strings.Contains(reply, want) {
			t.Errorf("the reply lacks %q:\n%s", want, reply)
		}
	}

	code, out := e.harvestCLI("github", "deliveries", "--failed", "--server", s.url)
	if code != 0 || !strings.Contains(out, lost.GUID) || !strings.Contains(out, d.ID) || strings.Count(out, "\n") != 3 {
		t.Errorf("harvest github deliveries --failed: exit %d\n%s", code, out)
	}
	if n := len(mustSessions(t, c)); n != 0 {
		t.Errorf("%d sessions; the failures started none", n)
	}
}

// TestGitHubReplay: a delivery that failed for good (the repository was
// not in the installation) is replayed once the app is installed on it
// again: two replays at once (harvest github replay, twice) do the work
// once (one wins, the other is refused); the work is done once (one
// session, one 👀). A delivery still pending (retrying after 5xx answers)
// is not replayed.
func TestGitHubReplay(t *testing.T) {
	g := newGHEnv(t)
	if _, err := g.gs.CreateRepo(context.Background(), ghsim.RepoSpec{Owner: "acme", Name: "other", Dir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	e := newServeEnvWith(t, githubScript)
	s := e.start(g.serveArgs()...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := e.client(s)
	if err := g.gs.SetWebhookURL(g.app.ID, "http://127.0.0.1:1/nowhere"); err != nil {
		t.Fatal(err)
	}
	cid, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: g.issue, Body: "@harvest fix the failing test"})
	if err != nil {
		t.Fatal(err)
	}
	lost, err := g.gs.WaitDelivery(ctx, func(d ghsim.Delivery) bool {
		return d.Event == "issue_comment" && strings.Contains(string(d.Payload), fmt.Sprintf(`"id":%d`, cid))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.gs.SetInstallationRepos(ghsim.InstallationReposSpec{InstallationID: g.inst, Remove: []string{"calc"}}); err != nil {
		t.Fatal(err)
	}
	if err := g.gs.SetWebhookURL(g.app.ID, s.url+"/v1/github/webhook"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.gs.Redeliver(lost.ID); err != nil {
		t.Fatal(err)
	}
	delivery(t, c, wire.DeliveryFailed, func(d wire.GitHubDelivery) bool { return d.ID == lost.GUID })

	// Installed on it again (Harvest hears of it), then replayed twice
	// at once.
	if err := g.gs.SetInstallationRepos(ghsim.InstallationReposSpec{InstallationID: g.inst, Add: []string{"calc"}}); err != nil {
		t.Fatal(err)
	}
	delivery(t, c, wire.DeliveryDone, func(d wire.GitHubDelivery) bool { return d.Event == "installation_repositories" && d.Action == "added" })
	var wg sync.WaitGroup
	codes, outs := make([]int, 2), make([]string, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], outs[i] = e.harvestCLI("github", "replay", lost.GUID, "--server", s.url)
		}()
	}
	wg.Wait()
	won := 0
	for i := range 2 {
		switch {
		case codes[i] == 0 && strings.Contains(outs[i], "pending again"):
			won++
		case codes[i] == 1 && (strings.Contains(outs[i], "not failed") || strings.Contains(outs[i], "conflict")):
		default:
			t.Errorf("harvest github replay: exit %d\n%s", codes[i], outs[i])
		}
	}
	if won != 1 {
		t.Fatalf("%d replays won; want exactly 1:\n%s\n%s", won, outs[0], outs[1])
	}
	d := delivery(t, c, wire.DeliveryDone, func(d wire.GitHubDelivery) bool { return d.ID == lost.GUID })
	if d.Replays != 1 || d.Attempts != 1 || !strings.Contains(d.Result, "started session") {
		t.Errorf("the replayed delivery: %+v", d)
	}
	waitHTTP(t, 2*time.Minute, "the pull request", func() bool {
		prs, _, err := g.client(t, g.ada).PullRequests.List(ctx, "acme", "calc", nil)
		return err == nil && len(prs) == 1
	})
	if n := len(mustSessions(t, c)); n != 1 {
		t.Errorf("%d sessions after the replays; want 1", n)
	}
	if n := g.reactions(fmt.Sprintf("/api/v3/repos/acme/calc/issues/comments/%d/reactions", cid), "eyes"); n != 1 {
		t.Errorf("the comment got %d 👀; want 1", n)
	}
	// Replaying it again: it is done, not failed.
	if code, out := e.harvestCLI("github", "replay", lost.GUID, "--server", s.url); code != 1 || !strings.Contains(out, "not failed") {
		t.Errorf("replaying a done delivery: exit %d\n%s", code, out)
	}

	// A delivery whose attempts are under way (GitHub answers 502) is
	// pending: it is not replayed beside its own retries.
	if err := g.gs.AddFault(ghsim.FaultSpec{Status: http.StatusBadGateway, Count: 1000, Path: "/repos/acme/calc/collaborators"}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "mallory", Repo: "acme/calc", Number: g.issue, Body: "@harvest please"}); err != nil {
		t.Fatal(err)
	}
	p := delivery(t, c, wire.DeliveryPending, func(d wire.GitHubDelivery) bool {
		return d.Sender == "mallory" && d.Attempts >= 1 && strings.Contains(d.Result, "502")
	})
	if code, out := e.harvestCLI("github", "replay", p.ID, "--server", s.url); code != 1 || !strings.Contains(out, "pending") {
		t.Errorf("replaying a pending delivery: exit %d\n%s", code, out)
	}
}

// TestGitHubInstallationsAndMirrors: the mirror a session clones is kept
// fresh in the background: a push to main is fetched after its push
// event, and the next session's checkout fetches nothing (its branch
// starts from the pushed commit). A suspended installation: a delivery
// for it is done as "suspended" and nothing is sent to GitHub for it;
// unsuspended, uninstalled and installed again (a new id), Harvest works
// on the repository again without a restart.
func TestGitHubInstallationsAndMirrors(t *testing.T) {
	g := newGHEnv(t)
	e, s := g.serve(t, "--github-mirror-refresh", "5m")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ada := g.client(t, g.ada)
	c := e.client(s)
	prOf := func(issue int) *github.PullRequest {
		t.Helper()
		var pr *github.PullRequest
		waitHTTP(t, 2*time.Minute, fmt.Sprintf("the pull request fixing #%d", issue), func() bool {
			prs, _, _ := ada.PullRequests.List(ctx, "acme", "calc", &github.PullRequestListOptions{State: "open"})
			for _, p := range prs {
				if strings.Contains(p.GetBody(), fmt.Sprintf("Fixes #%d", issue)) {
					pr = p
				}
			}
			return pr != nil
		})
		return pr
	}
	harvestGit := func(from, to time.Time, suffix string) int {
		n := 0
		for _, r := range g.gs.Requests() {
			if byHarvest(r) && strings.HasSuffix(r.Path, suffix) && !r.Time.Before(from) && r.Time.Before(to) {
				n++
			}
		}
		return n
	}
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: g.issue, Body: "@harvest fix the failing test"}); err != nil {
		t.Fatal(err)
	}
	prOf(g.issue)

	// The session's own push (through Harvest's endpoint) holds the
	// mirror's fetch back until its turn's end is told: the fetch the push
	// event wakes does not take the cores from the turn's end.
	var sessionPush, told time.Time
	waitHTTP(t, time.Minute, "the turn's end told", func() bool {
		for _, r := range g.gs.Requests() {
			switch {
			case sessionPush.IsZero() && byHarvest(r) && strings.HasSuffix(r.Path, "/acme/calc.git/git-receive-pack"):
				sessionPush = r.Time
			case told.IsZero() && r.Method == http.MethodPost && strings.HasSuffix(r.Path, fmt.Sprintf("/issues/%d/comments", g.issue)) &&
				strings.Contains(string(r.Body), "harvest-turn-end"):
				told = r.Time
			}
		}
		return !sessionPush.IsZero() && !told.IsZero()
	})
	waitHTTP(t, time.Minute, "the mirror's fetch after the session's push", func() bool {
		return harvestGit(sessionPush, time.Now().Add(time.Hour), "/acme/calc.git/git-upload-pack") > 0
	})
	if n := harvestGit(sessionPush, told, "/acme/calc.git/git-upload-pack"); n != 0 {
		t.Errorf("%d mirror fetches between the session's push and its turn's end told; want none (held back)", n)
	}

	// Ada pushes to main: the push event has the mirror fetched.
	work := t.TempDir()
	u := strings.Replace(g.gs.URL(), "http://", "http://ada:"+g.ada.Token+"@", 1) + "/acme/calc.git"
	testbin.Git(t, work, "clone", "-q", u, "w")
	w := filepath.Join(work, "w")
	testbin.Git(t, w, "-c", "user.name=Ada", "-c", "user.email=ada@example.com", "commit", "-q", "--allow-empty", "-m", "Ada's commit on main")
	testbin.Git(t, w, "push", "-q", "origin", "main")
	pushed := mustBranch(t, g, "main")
	pushAt := time.Now()
	waitHTTP(t, time.Minute, "the mirror's fetch after the push event", func() bool {
		return harvestGit(pushAt, time.Now().Add(time.Hour), "/acme/calc.git/git-upload-pack") > 0
	})
	// Heard of: the push event is done (the mirror's fetch may still run;
	// the next checkout waits for it rather than fetching again).
	delivery(t, c, wire.DeliveryDone, func(d wire.GitHubDelivery) bool { return d.Event == "push" && d.Sender == "ada" })

	// The next session clones the fresh mirror: no fetch before its push.
	issue2, err := g.gs.OpenIssue(ghsim.IssueSpec{Login: "ada", Repo: "acme/calc", Title: "add is still wrong"})
	if err != nil {
		t.Fatal(err)
	}
	asked := time.Now()
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: issue2, Body: "@harvest fix the failing test"}); err != nil {
		t.Fatal(err)
	}
	pr2 := prOf(issue2)
	// The turn's end tells Ada after the pull request: wait for it, so that
	// nothing of this session's is sent once the installation is suspended.
	waitComment(t, context.Background(), g.client(t, g.ada), issue2, "<!-- harvest-turn-end: ")
	var boxPush time.Time
	for _, r := range g.gs.Requests() {
		if byHarvest(r) && strings.HasSuffix(r.Path, "/git-receive-pack") && r.Time.After(asked) && boxPush.IsZero() {
			boxPush = r.Time
		}
	}
	if boxPush.IsZero() {
		t.Fatal("no push of the second session")
	}
	if n := harvestGit(asked, boxPush, "/acme/calc.git/git-upload-pack"); n != 0 {
		t.Errorf("%d fetches between the second mention and its session's push; want none (the mirror was fresh)", n)
	}
	head := mustBranch(t, g, pr2.GetHead().GetRef())
	bare := filepath.Join(g.gs.Dir(), "repos", "acme", "calc.git")
	if parent := testbin.Git(t, bare, "rev-parse", head+"^"); parent != pushed {
		t.Errorf("the second session's commit is on %s; want Ada's pushed %s (the mirror was stale)", parent, pushed)
	}

	// Suspended while a delivery waits (a secondary limit): it is done as
	// suspended, and nothing is sent for it.
	if err := g.gs.SetSecondaryLimit(ghsim.SecondaryLimitSpec{LimitScope: ghsim.LimitScope{InstallationID: g.inst}, For: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: issue2, Body: "@harvest while suspended"}); err != nil {
		t.Fatal(err)
	}
	held := delivery(t, c, wire.DeliveryPending, func(d wire.GitHubDelivery) bool {
		return d.Event == "issue_comment" && d.Sender == "ada" && !d.NotBefore.IsZero()
	})
	if err := g.gs.SuspendInstallation(ghsim.InstallationActionSpec{InstallationID: g.inst, Login: "ada"}); err != nil {
		t.Fatal(err)
	}
	suspendedAt := time.Now()
	d := delivery(t, c, wire.DeliveryDone, func(d wire.GitHubDelivery) bool { return d.ID == held.ID })
	if !strings.HasPrefix(d.Result, "suspended:") {
		t.Errorf("the delivery for a suspended installation: %q; want suspended", d.Result)
	}
	sus := delivery(t, c, wire.DeliveryDone, func(d wire.GitHubDelivery) bool { return d.Event == "installation" && d.Action == "suspend" })
	// Once Harvest has heard of the suspension nothing is sent for the
	// installation. (Before it has, under load, the held delivery's retry
	// may ask GitHub and be told: 403, suspended.)
	if sus.DoneAt.After(suspendedAt) {
		suspendedAt = sus.DoneAt
	}
	if logs := s.stderr.String(); !strings.Contains(logs, "the app's installation is suspended") {
		t.Errorf("no log line says the installation is suspended:\n%s", logs)
	}
	for _, r := range g.gs.Requests() {
		if byHarvest(r) && of(r, "acme", g.inst) && r.Time.After(suspendedAt) {
			t.Errorf("a request for the suspended installation: %s %s at +%s", r.Method, r.Path, r.Time.Sub(suspendedAt))
		}
	}

	// Unsuspended, uninstalled, installed again: a new installation id,
	// which Harvest finds on its own.
	if err := g.gs.UnsuspendInstallation(ghsim.InstallationActionSpec{InstallationID: g.inst}); err != nil {
		t.Fatal(err)
	}
	if err := g.gs.DeleteInstallation(ghsim.InstallationActionSpec{InstallationID: g.inst}); err != nil {
		t.Fatal(err)
	}
	inst, err := g.gs.CreateInstallation(ghsim.InstallationSpec{AppID: g.app.ID, Account: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	delivery(t, c, wire.DeliveryDone, func(d wire.GitHubDelivery) bool { return d.Event == "installation" && d.Action == "created" })
	issue3, err := g.gs.OpenIssue(ghsim.IssueSpec{Login: "ada", Repo: "acme/calc", Title: "once more"})
	if err != nil {
		t.Fatal(err)
	}
	cid, err := g.gs.Comment(ghsim.CommentSpec{Login: "ada", Repo: "acme/calc", Number: issue3, Body: "@harvest fix the failing test"})
	if err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, time.Minute, "the 👀 after the reinstall", func() bool {
		return g.requested(http.MethodPost, fmt.Sprintf("/api/v3/repos/acme/calc/issues/comments/%d/reactions", cid))
	})
	minted := false
	for _, r := range g.gs.Requests() {
		minted = minted || (r.Method == http.MethodPost && r.Path == fmt.Sprintf("/api/v3/app/installations/%d/access_tokens", inst) && r.Status == http.StatusCreated)
	}
	if !minted {
		t.Errorf("no token of the new installation %d was minted", inst)
	}
	prOf(issue3)
}
