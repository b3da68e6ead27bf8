package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox/disk"
	"github.com/harvest-dev/harvest/sandbox/local"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/wire"
)

// serveScript: "msg ..." gets "ok"; "long task" runs a bash command that
// waits for the file "go" in its workspace; "slow ..." gets its answer
// after an hour (the request stays in flight).
const serveScript = `
rules:
  - name: msg
    when: {last_user_regexp: "^msg"}
    reply: {text: "ok", usage: {input_tokens: 100, output_tokens: 10}}
  - name: released
    when: {tool_result: "released"}
    reply: {text: "long task done", usage: {input_tokens: 100, output_tokens: 10}}
  - name: long
    when: {last_user: "long task"}
    reply:
      tool_calls: [{name: bash, input: {command: "until [ -e go ]; do sleep 0.01; done; echo released", timeout: 600000}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: slow
    when: {last_user_regexp: "^slow"}
    reply: {text: "finally", delay: 1h}
`

// serveEnv is a real `harvest serve` process's surroundings: its data
// dir, its own run dir, harvest sim in this process as its model.
type serveEnv struct {
	t       testing.TB
	env     []string
	home    string
	runDir  string
	sim     *stacktest.Sim
	slowReq chan struct{} // a value per "slow" model request received
	store   string        // with onPostgres: the PostgreSQL database's URL
	// dataDirs are the nodes' own data directories (dataDir), beside home.
	dataDirs []string
}

func newServeEnv(t testing.TB) *serveEnv {
	t.Helper()
	return newServeEnvWith(t, serveScript)
}

// newServeEnvWith is newServeEnv with the model playing script.
func newServeEnvWith(t testing.TB, script string) *serveEnv {
	t.Helper()
	needRoot(t)
	env, home := runEnv(t)
	e := &serveEnv{t: t, home: home, slowReq: make(chan struct{}, 16)}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "HARVEST_RUN_DIR="); ok {
			e.runDir = v
		}
	}
	e.sim = stacktest.StartSim(t, script, func(r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"slow`)) && !bytes.Contains(body, []byte(`"assistant"`)) {
			e.slowReq <- struct{}{}
		}
	})
	e.env = append(env, "ANTHROPIC_API_KEY=sk-test", "ANTHROPIC_BASE_URL="+e.sim.URL, "HARVEST_MODEL=anthropic/claude-sonnet-4-5",
		"HARVEST_SERVER=", "HARVEST_TOKEN=")
	// Last: no box of this test outlives it.
	t.Cleanup(func() {
		p := e.provider()
		defer p.Close()
		stacktest.DestroyAll(t, p)
		for _, dir := range append([]string{e.home}, e.dataDirs...) {
			if _, err := disk.UnmountUnder(dir); err != nil { // the sessions' disks
				t.Error(err)
			}
		}
	})
	return e
}

func (e *serveEnv) provider() *local.Provider {
	return local.New(local.Config{RunDir: filepath.Join(e.runDir, local.Name), AgentBinary: testbin.Agent(e.t)})
}

// boxes lists the boxes of the test's run dir.
func (e *serveEnv) boxes() []string {
	e.t.Helper()
	p := e.provider()
	defer p.Close()
	return stacktest.BoxIDs(e.t, p)
}

// dataDir is a data directory of its own for a node (another machine's
// disk): its sessions' disks are unmounted when the test ends.
func (e *serveEnv) dataDir() string {
	e.t.Helper()
	dir := testbin.TempDir(e.t)
	if err := os.Chmod(dir, 0o711); err != nil { // the box user reaches the workspaces below it
		e.t.Fatal(err)
	}
	e.dataDirs = append(e.dataDirs, dir)
	return dir
}

// serveProc is one `harvest serve` process.
type serveProc struct {
	cmd    *exec.Cmd
	url    string
	stderr *testbin.Buffer
	exited chan struct{} // closed when it has exited; then err is its Wait
	err    error
}

// wait waits for the process to exit.
func (s *serveProc) wait() error {
	<-s.exited
	return s.err
}

// start runs `harvest serve` and waits until it listens.
func (e *serveEnv) start(args ...string) *serveProc {
	e.t.Helper()
	return e.startWith([]string{testbin.Harvest(e.t)}, args...)
}

// startWith runs `harvest serve` through a wrapper (whose last word is
// the harvest binary: unshare ... harvest) and waits until it listens.
func (e *serveEnv) startWith(wrapper []string, args ...string) *serveProc {
	e.t.Helper()
	cmd := exec.Command(wrapper[0], slices.Concat(wrapper[1:], []string{"serve", "--listen", "127.0.0.1:0", "--quiet"}, args)...)
	cmd.Env = e.env
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	s := &serveProc{cmd: cmd, stderr: &testbin.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, stdout)
		s.err = cmd.Wait()
		close(s.exited)
	}()
	e.t.Cleanup(func() {
		cmd.Process.Kill()
		s.wait()
	})
	select {
	case line, ok := <-lines:
		u, found := strings.CutPrefix(line, "harvest serve listening on ")
		if !ok || !found {
			e.t.Fatalf("harvest serve did not start: %q\n%s", line, s.stderr)
		}
		s.url = u
	case <-time.After(2 * time.Minute):
		e.t.Fatalf("harvest serve did not start within 2 minutes:\n%s", s.stderr)
	}
	return s
}

func (e *serveEnv) client(s *serveProc) *client.Client {
	e.t.Helper()
	tok, err := os.ReadFile(filepath.Join(e.home, "admin-token"))
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := client.New(s.url, strings.TrimSpace(string(tok)), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// follow reads a session's events until pred holds.
func follow(t testing.TB, c *client.Client, id string, after int64, what string, pred func(event.Event) bool) []event.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := c.Events(ctx, id, client.StreamOptions{After: after})
	defer st.Close()
	return stacktest.ReadUntil(t, st, what+" in session "+id, pred)
}

var boxSession = regexp.MustCompile(`^(s-[a-z2-7]{16})-[0-9a-f]{6}$`)

// TestServeKill9 kills `harvest serve` with SIGKILL in the middle of turns
// (a bash tool running in one session, a model request in flight in
// another, messages queued behind both), restarts it on the same data,
// and checks that nothing is lost: every session and queued message is
// there and delivered, event seqs have no gaps, the interrupted turns say
// so, and every box belongs to a session (one each).
func TestServeKill9(t *testing.T) { testServeKill9(t, newServeEnv(t)) }

func testServeKill9(t *testing.T, e *serveEnv) {
	repo := filepath.Join(testbin.TempDir(t), "repo")
	os.Mkdir(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "README.md"), []byte("# a repository\n"), 0o644)

	s1 := e.start()
	c := e.client(s1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	type sess struct {
		id     string
		queued []string // message ids
	}
	var sessions []*sess
	for _, prompt := range []string{"long task", "long task", "slow answer please"} {
		v, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: prompt})
		if err != nil {
			t.Fatal(err)
		}
		s := &sess{id: v.ID}
		for _, text := range []string{"msg first queued", "msg second queued"} {
			m, err := c.Send(ctx, v.ID, text, "")
			if err != nil {
				t.Fatal(err)
			}
			s.queued = append(s.queued, m.ID)
		}
		sessions = append(sessions, s)
	}
	// Mid-turn: the bash tools are running, the slow model request is in
	// flight. A stream of the first session stays open across the crash.
	live := c.Events(ctx, sessions[0].id, client.StreamOptions{MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	defer live.Close()
	var liveSeen []event.Event
	for {
		ev, err := live.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Live > 0 {
			continue // a live piece: never stored, it carries the seq before it
		}
		liveSeen = append(liveSeen, ev)
		if ev.Type() == event.TypeToolStarted {
			break
		}
	}
	follow(t, c, sessions[1].id, 0, "the bash tool to start", func(ev event.Event) bool { return ev.Type() == event.TypeToolStarted })
	select {
	case <-e.slowReq:
	case <-ctx.Done():
		t.Fatal("the slow model request never came")
	}
	before := map[string]int64{}
	for _, s := range sessions {
		p, err := c.EventLog(ctx, s.id, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		before[s.id] = p.LastSeq
	}
	boxesBefore := e.boxes()
	if len(boxesBefore) != 3 {
		t.Fatalf("boxes before the kill: %v", boxesBefore)
	}

	if err := s1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s1.wait()
	// The boxes outlive the server (their tools still run).
	if got := e.boxes(); !slices.Equal(got, boxesBefore) {
		t.Errorf("boxes after kill -9: %v, before %v", got, boxesBefore)
	}

	// The same address, so that the open stream finds it again.
	s2 := e.start("--listen", strings.TrimPrefix(s1.url, "http://"))
	c = e.client(s2)
	list, err := c.ListSessions(ctx, client.ListOptions{})
	if err != nil || len(list) != 3 {
		t.Fatalf("sessions after the restart: %v %v", list, err)
	}
	// The stream open across the crash reconnected with Last-Event-ID and
	// got every event once, in order.
	for !stacktest.TurnEnded("t3")(liveSeen[len(liveSeen)-1]) {
		ev, err := live.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Live > 0 {
			continue
		}
		liveSeen = append(liveSeen, ev)
	}
	for i, ev := range liveSeen {
		if ev.Seq != int64(i+1) {
			t.Fatalf("the stream open across the crash: event %d has seq %d", i+1, ev.Seq)
		}
	}
	if live.Reconnects() < 1 {
		t.Errorf("the stream open across the crash never reconnected")
	}

	for _, s := range sessions {
		// The interrupted turn says so; then both queued messages are
		// delivered, in order, and answered.
		seen := follow(t, c, s.id, 0, "turn t3 to end", stacktest.TurnEnded("t3"))
		var delivered []string
		interrupted := false
		for _, ev := range seen {
			switch p := ev.Data.(type) {
			case event.MessageDelivered:
				delivered = append(delivered, p.MessageID)
			case event.TurnFailed:
				if ev.Turn == "t1" && p.Kind == "interrupted" {
					interrupted = true
				}
			}
		}
		if !interrupted {
			t.Errorf("session %s: no turn.failed kind interrupted for t1", s.id)
		}
		if len(delivered) != 3 || !slices.Equal(delivered[1:], s.queued) {
			t.Errorf("session %s: delivered %v, want the prompt then %v", s.id, delivered, s.queued)
		}
		if ev := seen[len(seen)-1]; ev.Type() != event.TypeTurnFinished {
			t.Errorf("session %s: turn t3 ended with %s", s.id, ev.Type())
		}
		// Seqs: 1, 2, 3, ... with nothing missing across the crash.
		all := storedLog(t, ctx, c, s.id)
		for i, ev := range all {
			if ev.Seq != int64(i+1) {
				t.Fatalf("session %s: event %d has seq %d", s.id, i+1, ev.Seq)
			}
		}
		if int64(len(all)) <= before[s.id] {
			t.Errorf("session %s: %d events after the restart, %d before", s.id, len(all), before[s.id])
		}
		v, err := c.GetSession(ctx, s.id)
		if err != nil || len(v.Queue) != 0 || v.Turns != 3 {
			t.Errorf("session %s after the restart: %+v %v", s.id, v, err)
		}
	}
	// No orphans: every box is a session's, one each.
	owners := map[string]int{}
	for _, b := range e.boxes() {
		m := boxSession.FindStringSubmatch(b)
		if m == nil || !slices.ContainsFunc(sessions, func(s *sess) bool { return s.id == m[1] }) {
			t.Errorf("box %s belongs to no session", b)
			continue
		}
		owners[m[1]]++
	}
	for _, s := range sessions {
		if owners[s.id] > 1 {
			t.Errorf("session %s has %d boxes", s.id, owners[s.id])
		}
	}

	// A graceful stop: SIGTERM, exit 0.
	s2.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s2.exited:
		if s2.err != nil {
			t.Errorf("harvest serve after SIGTERM: %v\n%s", s2.err, s2.stderr)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("harvest serve did not stop on SIGTERM:\n%s", s2.stderr)
	}
}

// TestSessionCommands drives the session and token commands against a
// real harvest serve.
func TestSessionCommands(t *testing.T) {
	e := newServeEnv(t)
	repo := filepath.Join(testbin.TempDir(t), "proj")
	os.Mkdir(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "README.md"), []byte("# a repository\n"), 0o644)
	s := e.start()
	for _, kv := range e.env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	t.Setenv("HARVEST_SERVER", s.url)
	t.Setenv("HARVEST_TOKEN", "")
	t.Setenv("HARVEST_HOME", e.home)

	harvest := func(want int, args ...string) (string, string) {
		t.Helper()
		code, out, errOut := runCLI(t, "", args...)
		if code != want {
			t.Fatalf("harvest %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errOut)
		}
		return out, errOut
	}
	out, errOut := harvest(0, "session", "new", "--repo", repo, "--title", "the demo", "-f", "msg one")
	id := strings.SplitN(out, "\n", 2)[0]
	if !session.ValidID(id) || !strings.Contains(out, "── t1: msg one") || !strings.Contains(out, "ok") || !strings.Contains(out, "✓ done") {
		t.Fatalf("session new -f:\n%s\n%s", out, errOut)
	}
	if !strings.Contains(errOut, "harvest session logs -f "+id) {
		t.Errorf("session new does not say how to follow: %s", errOut)
	}
	out, _ = harvest(0, "session", "ls")
	if !strings.Contains(out, id) || !strings.Contains(out, "the demo") || !strings.Contains(out, "STATE") {
		t.Errorf("session ls:\n%s", out)
	}
	out, _ = harvest(0, "session", "show", id)
	if !strings.Contains(out, "queue:   0 messages") || !strings.Contains(out, "turns:   1") || !strings.Contains(out, "limits:  enforced: memory, pids, disk\n") {
		t.Errorf("session show:\n%s", out)
	}
	out, _ = harvest(0, "session", "info", id)
	for _, want := range []string{"repo proj:", repo, "limits:", "idle 5m0s", "owner:", "tok-", "enforced: memory, pids, disk\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("session info lacks %q:\n%s", want, out)
		}
	}
	// The turn's lock is free, or still held by the run of t1 when the
	// runner has not let go of it yet.
	if !regexp.MustCompile(`lock: +(free|held by ` + id + `/t1 until )`).MatchString(out) {
		t.Errorf("session info: the lock:\n%s", out)
	}
	out, _ = harvest(0, "session", "send", "-f", id, "msg two")
	if !strings.HasPrefix(out, "m-") || !strings.Contains(out, "── t2: msg two") {
		t.Errorf("session send -f:\n%s", out)
	}
	out, _ = harvest(0, "session", "logs", id)
	if !strings.Contains(out, "── t1: msg one") || !strings.Contains(out, "── t2: msg two") {
		t.Errorf("session logs:\n%s", out)
	}
	out, _ = harvest(0, "session", "logs", "--json", "--since", "3", id)
	prev := int64(3)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev event.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Seq != prev+1 {
			t.Fatalf("logs --json --since 3: %q after %d: %v", line, prev, err)
		}
		prev = ev.Seq
	}
	// Following from past the last event is refused at once, saying
	// where the session is, rather than waiting for events that will not come.
	_, errOut = harvest(1, "session", "logs", "-f", "--since", "100000", id)
	if !regexp.MustCompile(`100000 is past the session's last event, \d+`).MatchString(errOut) {
		t.Errorf("logs -f --since past the last event: %s", errOut)
	}
	harvest(0, "session", "cancel", id)
	harvest(0, "session", "unlock", id)

	// Mistakes: exit 2 for usage, 1 for what the server refuses.
	_, errOut = harvest(1, "session", "show", "s-aaaaaaaaaaaaaaaa")
	if !strings.Contains(errOut, "not found") {
		t.Errorf("show of an unknown session: %s", errOut)
	}
	_, errOut = harvest(2, "session", "show")
	if !strings.Contains(errOut, "give one session id") {
		t.Errorf("show without an id: %s", errOut)
	}
	_, errOut = harvest(2, "session", "new", "do it")
	if !strings.Contains(errOut, "no repository") {
		t.Errorf("new without --repo: %s", errOut)
	}
	_, errOut = harvest(2, "session", "cleanup")
	if !strings.Contains(errOut, "--older-than is required") {
		t.Errorf("cleanup without --older-than: %s", errOut)
	}
	_, errOut = harvest(1, "session", "send", id, "  ")
	if !strings.Contains(errOut, `"text" is empty`) {
		t.Errorf("an empty message: %s", errOut)
	}

	// Tokens: made on the local data directory while the server runs, or
	// through the API; a user token sees none of the admin's sessions.
	t.Setenv("HARVEST_SERVER", "") // the local data directory, the server running
	secret, errOut := harvest(0, "token", "create", "ci")
	t.Setenv("HARVEST_SERVER", s.url)
	secret = strings.TrimSpace(secret)
	if !strings.HasPrefix(secret, "hvt_") || !strings.Contains(errOut, "shown only now") {
		t.Fatalf("token create: %q %s", secret, errOut)
	}
	out, _ = harvest(0, "token", "create", "--server", s.url, "--admin", "ops")
	if !strings.HasPrefix(out, "hvt_") {
		t.Errorf("token create through the API: %q", out)
	}
	out, _ = harvest(0, "token", "ls")
	if strings.Count(out, "\n") != 4 || !strings.Contains(out, "ci") || !strings.Contains(out, "ops") {
		t.Errorf("token ls:\n%s", out)
	}
	t.Setenv("HARVEST_TOKEN", secret)
	out, _ = harvest(0, "session", "ls")
	if strings.Contains(out, id) {
		t.Errorf("a user token lists the admin's session:\n%s", out)
	}
	_, errOut = harvest(1, "session", "unlock", id)
	if !strings.Contains(errOut, "not found") && !strings.Contains(errOut, "admin") {
		t.Errorf("unlock with a user token: %s", errOut)
	}
	t.Setenv("HARVEST_TOKEN", "")

	// Cleanup: a dry run lists, then rm deletes. (The session goes idle
	// just after its turn ends.)
	c := e.client(s)
	testbin.WaitFor(t, time.Minute, "the session to be idle", func() bool {
		v, err := c.GetSession(context.Background(), id)
		return err == nil && v.State == "idle"
	})
	out, errOut = harvest(0, "session", "cleanup", "--older-than", "0s", "--state", "idle", "--dry-run")
	if !strings.Contains(out, id) || !strings.Contains(errOut, "would delete 1 session") {
		t.Errorf("cleanup --dry-run:\n%s%s", out, errOut)
	}
	_, errOut = harvest(0, "session", "cleanup", "--older-than", "7d")
	if !strings.Contains(errOut, "deleted 0 sessions") {
		t.Errorf("cleanup --older-than 7d: %s", errOut)
	}
	out, _ = harvest(0, "session", "rm", id)
	if strings.TrimSpace(out) != id {
		t.Errorf("session rm: %q", out)
	}
	harvest(1, "session", "show", id)

	t.Setenv("HARVEST_SERVER", "http://127.0.0.1:1")
	_, errOut = harvest(1, "session", "ls")
	if !strings.Contains(errOut, "cannot reach the Harvest server at http://127.0.0.1:1") {
		t.Errorf("no server: %s", errOut)
	}
}

// TestServeAdminToken: the first start writes an admin token (0600) and
// says where; a restart keeps it; a lost database gets a new one.
func TestServeAdminToken(t *testing.T) {
	e := newServeEnv(t)
	s := e.start()
	path := filepath.Join(e.home, "admin-token")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin-token: %v %v", fi, err)
	}
	if !strings.Contains(s.stderr.String(), "created an admin token and wrote it to "+path) {
		t.Errorf("the first start does not say where the token is:\n%s", s.stderr)
	}
	first, _ := os.ReadFile(path)
	if _, err := e.client(s).ListSessions(context.Background(), client.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	if err := s.wait(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, s.stderr)
	}
	s = e.start()
	if again, _ := os.ReadFile(path); !bytes.Equal(first, again) || !strings.Contains(s.stderr.String(), "the admin token is in "+path) {
		t.Errorf("a restart changed the admin token:\n%s", s.stderr)
	}
	if _, err := e.client(s).ListSessions(context.Background(), client.ListOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestServeSessionBadInput: usage mistakes of serve and the session and
// token commands are caught before anything is started or sent: exit 2
// and one line that says what to change.
func TestServeSessionBadInput(t *testing.T) {
	t.Setenv("HARVEST_HOME", t.TempDir())
	t.Setenv("HARVEST_SERVER", "http://127.0.0.1:1") // nothing may reach it
	t.Setenv("HARVEST_TOKEN", "hvt_x")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--backend", "podman"}, `--backend: unknown backend "podman"`},
		{[]string{"serve", "--pool", "-1"}, "--pool -1: must be positive"},
		{[]string{"serve", "--runtime", "run sc"}, `--runtime "run sc": give the name of an OCI runtime registered with dockerd`},
		{[]string{"serve", "now"}, `unknown command "now"`},
		{[]string{"serve", "--repo-root", "repos"}, `repository root "repos": give an absolute path`},
		{[]string{"serve", "--repo-root", "/nonexistent-harvest-root"}, "repository root /nonexistent-harvest-root"},
		{[]string{"serve", "--repo-root", "/proc/self"}, "which sessions may never copy"},
		{[]string{"serve", "--git-host", "https://github.com"}, "give a host name like github.com"},
		{[]string{"serve", "--memory-hook", "/nonexistent/harvest-hook"}, "--memory-hook: memory hook \"/nonexistent/harvest-hook\""},
		{[]string{"serve", "--clone-timeout", "0s"}, "--clone-timeout and --clone-stall-timeout must be positive"},
		{[]string{"serve", "--shutdown-grace", "-1s"}, "--shutdown-grace -1s: must be 0 or more"},
		{[]string{"serve", "--github-app-id", "5"}, "--github-app-id needs --github-app-key"},
		{[]string{"serve", "--github-token-file", "/nonexistent-harvest-token"}, "--github-token-file"},
		{[]string{"serve", "--github-token-file", "/dev/null"}, "--github-token-file /dev/null is not a regular file"},
		{[]string{"serve", "--repo-config", "/nonexistent-harvest-repos.yaml"}, "--repo-config: open /nonexistent-harvest-repos.yaml"},
		{[]string{"serve", "--mcp-config", "/nonexistent-harvest-mcp.yaml"}, "--mcp-config: open /nonexistent-harvest-mcp.yaml"},
		{[]string{"serve", "--refresh-environments", "5s"}, "--refresh-environments 5s: give 0 (never) or a minute or more"},
		{[]string{"serve", "--event-retention", "30 days"}, `--event-retention "30 days": give how long`},
		{[]string{"serve", "--event-retention", "5m"}, `--event-retention "5m": give how long`},
		{[]string{"serve", "--egress-internal", "pypi.corp"}, "--egress-internal \"pypi.corp\": want NAME=IP:PORT"},
		{[]string{"serve", "--egress-internal", "pypi.corp=127.0.0.1:3141"}, "a loopback address is the Harvest host itself"},
		{[]string{"serve", "--store", "mysql://u:pw@db/harvest"}, "--store (scheme mysql): give a postgres://"},
		{[]string{"serve", "--store", "/var/lib/harvest.db"}, "--store (no scheme): give a postgres://"},
		{[]string{"prepare"}, "--repo is required"},
		{[]string{"session", "new", "--repo", ".", "--pr", "maybe", "fix it"}, `--pr "maybe": use draft, ready or none`},
		{[]string{"session", "new", "fix it"}, "no repository: give --repo DIR"},
		{[]string{"session", "new", "--repo", ".", "--mode", "later", "fix it"}, `--mode "later": use queue or interrupt`},
		{[]string{"session", "new", "--repo", ".", "--memory", "lots", "fix it"}, "--memory: size"},
		{[]string{"session", "new", "--repo", ".", "--budget", "-1", "fix it"}, "--budget -1: must be positive"},
		{[]string{"session", "new", "--repo", ".", "--command", "python3 -i", "fix it"}, "add --agent terminal"},
		{[]string{"session", "new", "--repo", ".", "--egress", " , ", "fix it"}, `--egress: give hosts (comma-separated), "registries", or "none"`},
		{[]string{"session", "new", "--repo", ".", "--agent", "terminal", "--command", "python3 -i", "fix it"}, "give --done-pattern"},
		{[]string{"session", "new", "--repo", ".", "--agent", "terminal", "--command", "python3 -i", "--terminal-idle", "1ms", "fix it"}, "--terminal-idle 1ms"},
		{[]string{"session", "new", "--repo", ".", "--mcp", "docs", "fix it"}, `--mcp "docs": give NAME=..., like --mcp docs=https://`},
		{[]string{"session", "new", "--repo", ".", "--mcp-stdio", "lint=", "fix it"}, `--mcp-stdio "lint=": give NAME=...`},
		{[]string{"session", "new", "--repo", ".", "--mcp", "a=https://h/", "--mcp-stdio", "a=x", "fix it"}, `two MCP servers are named "a"`},
		{[]string{"session", "new", "--repo", ".", "--mcp", "Docs=https://h/", "fix it"}, `MCP server "Docs" (the command line): the name must be`},
		{[]string{"session", "new", "--repo", ".", "--mcp", "gh=https://h/", "--mcp-secret", "gh:Authorization=Bearer ghp_x", "fix it"}, `is not a secret's name (A-Z, 0-9 and _, like GITHUB_MCP): store the value with harvest secret set`},
		{[]string{"session", "new", "--repo", ".", "--mcp-stdio", "lint=x", "--mcp-secret", "lint:A=TOKEN", "fix it"}, `no --mcp server is named "lint" (headers are for remote servers)`},
		{[]string{"session", "new", "--repo", ".", "--mcp-secret", "gh=TOKEN", "fix it"}, `give NAME:HEADER=SECRET`},
		{[]string{"session", "show"}, "give one session id"},
		{[]string{"session", "show", "a", "b"}, "give one session id"},
		{[]string{"session", "send", "s-aaaaaaaaaaaaaaaa"}, "give a session id and the message"},
		{[]string{"session", "logs", "--since", "-1", "s-aaaaaaaaaaaaaaaa"}, "--since -1: give the seq of the last event you have"},
		{[]string{"session", "cleanup"}, "--older-than is required"},
		{[]string{"session", "cleanup", "--older-than", "soon"}, `--older-than "soon": give a duration like 7d`},
		{[]string{"session", "rm"}, "give session ids"},
		{[]string{"token", "create"}, "give the token a name"},
	}
	for _, c := range cases {
		code, _, stderr := runCLI(t, "", c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("harvest %s:\n  exit %d, want 2\n  stderr %q\n  want it to contain %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
		if strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("harvest %s: more than one line:\n%s", strings.Join(c.args, " "), stderr)
		}
	}
	// No token anywhere: said before any request.
	t.Setenv("HARVEST_TOKEN", "")
	code, _, stderr := runCLI(t, "", "session", "ls")
	if code != 2 || !strings.Contains(stderr, "no token: set HARVEST_TOKEN") {
		t.Errorf("no token: exit %d %q", code, stderr)
	}
}

func TestParseAge(t *testing.T) {
	for s, want := range map[string]time.Duration{"7d": 7 * 24 * time.Hour, "2w": 14 * 24 * time.Hour, "1.5d": 36 * time.Hour, "90m": 90 * time.Minute, "0s": 0} {
		if got, err := parseAge(s); err != nil || got != want {
			t.Errorf("%s: %v %v", s, got, err)
		}
	}
	for _, s := range []string{"", "d", "-1d", "7", "7y", "-5m"} {
		if _, err := parseAge(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}
