package session

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/agent/agents"
	"github.com/harvest-dev/harvest/agent/agenttest"
	"github.com/harvest-dev/harvest/agent/claudecode"
	"github.com/harvest-dev/harvest/agent/opencode"
	"github.com/harvest-dev/harvest/agent/terminal"
	"github.com/harvest-dev/harvest/egress"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/docker"
	"github.com/harvest-dev/harvest/sandbox/local"
	"github.com/harvest-dev/harvest/sim"
	"github.com/harvest-dev/harvest/store"
)

// canaryKey is the real key of the test's model endpoint: it must reach
// the sim (through the model proxy) and nothing in or from the box.
const canaryKey = "sk-ant-canary-4c1f0e9b7d2a48e3a6f1-never-in-the-box"

// The same scripted task and session life with every kind of agent: the
// builtin loop, and the real Claude Code driven through stream-json
// (claudecode) or typed into its interactive TUI in a terminal (terminal):
// events of the same kinds, a follow-up queued behind a running turn,
// cancel during a tool, idle suspension and resume with the whole
// conversation. The external agents reach the model only through the
// model proxy: the real key is absent from the box and from every event,
// and the sim sees it arrive.
func TestAgentSessions(t *testing.T) {
	for _, kind := range []string{AgentBuiltin, claudecode.Kind.Name, opencode.Kind.Name, terminal.Kind.Name} {
		t.Run(kind, func(t *testing.T) { testAgentSession(t, kind, local.Name) })
	}
	// And on the docker backend, in its base image: the same contract.
	for _, kind := range agents.Names()[1:] {
		t.Run(kind+"-docker", func(t *testing.T) { testAgentSession(t, kind, docker.Name) })
	}
}

func testAgentSession(t *testing.T, kind, backend string) {
	switch kind {
	case opencode.Kind.Name:
		testbin.OpenCode(t)
	case claudecode.Kind.Name, terminal.Kind.Name:
		testbin.Claude(t)
	}
	opts := []envOpt{withKey(canaryKey), withDisks} // as harvest serve runs them: HOME and /tmp on the session's disk
	if backend == docker.Name {
		opts = append(opts, withDocker)
	}
	e := newEnv(t, opts...)
	s, err := sim.ParseScript("conformance.yaml", []byte(agenttest.ConformanceScript))
	if err != nil {
		t.Fatal(err)
	}
	e.Sim.Store(sim.New(s))
	ctx := testbin.Context(t)
	// The repository's AGENTS.md: every kind of agent gets it, after
	// Harvest's own instructions.
	if err := os.WriteFile(filepath.Join(e.Repo, "AGENTS.md"), []byte("Repository rule: agents-md-canary-5521.\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	v := e.create("Task one: make fixed.txt", func(r *CreateRequest) { r.Agent, r.Backend = kind, backend })
	if v.Agent != kind || v.Backend != backend {
		t.Fatalf("agent %q on %q", v.Agent, v.Backend)
	}
	w := e.watch(v.ID)
	stacktest.Typed[event.ToolStarted](w, "t1", func(p event.ToolStarted) bool { return strings.EqualFold(p.Tool, "bash") })
	e.send(v.ID, "Task two, after that", "")
	if q := e.get(v.ID).Queue; len(q) != 1 {
		t.Fatalf("queue %d while Claude Code works, want the follow-up", len(q))
	}

	// The box holds no real key while the agent works.
	var mustSee []string // the proxy settings the CLI got: the scan looked where it runs
	switch kind {
	case claudecode.Kind.Name, terminal.Kind.Name:
		mustSee = []string{"ANTHROPIC_BASE_URL=http://127.0.0.1:", "ANTHROPIC_API_KEY=harvest-session-"}
	case opencode.Kind.Name:
		mustSee = []string{"OPENCODE_CONFIG_CONTENT=", "harvest-session-"}
	}
	scanSessionBox(t, e, v.ID, mustSee...)

	release(t, v)
	if f := w.Finished("t1"); f.Result != "Task one done." || f.Usage.InputTokens == 0 || f.CostUSD <= 0 {
		t.Fatalf("t1 finished with %+v", f)
	}
	if f := w.Finished("t2"); f.Result != "Task two done." {
		t.Fatalf("t2 finished with %+v", f)
	}
	w.State(store.StateIdle)
	if b, err := os.ReadFile(filepath.Join(v.Repos[0].Path, "fixed.txt")); err != nil || string(b) != "fixed\n" {
		t.Fatalf("the workspace after t1: fixed.txt %q, %v", b, err)
	}
	kinds := map[string]bool{}
	for _, ev := range w.Seen {
		if ev.Turn == "t1" {
			kinds[string(ev.Data.EventType())] = true
		}
	}
	want := []string{"turn.started", "tool.started", "tool.finished", "assistant.message", "step.finished", "turn.finished"}
	if kind == terminal.Kind.Name {
		want = append(want, "terminal.output")
	}
	for _, want := range want {
		if !kinds[want] {
			t.Errorf("turn t1 has no %s event (it has %v)", want, kinds)
		}
	}

	// Idle suspension destroys the box; the next message resumes Claude
	// Code's conversation in a new one.
	e.Clock.Advance(DefaultIdleTimeout)
	w.State(store.StateSuspended)
	e.send(v.ID, "Task three: what did you do?", "")
	if f := w.Finished("t3"); f.Result != "I remember both tasks." {
		t.Fatalf("t3 finished with %+v", f)
	}
	var last sim.Request
	instructed := 0
	for _, r := range e.Sim.Load().Requests() {
		if r.Rule == "three" {
			last = r
		}
		if strings.HasPrefix(r.Rule, "one") || r.Rule == "three" {
			instructed++
			for _, want := range []string{"You are a coding agent run by Harvest", "agents-md-canary-5521", "write STUCK.md"} {
				if !bytes.Contains(r.Body, []byte(want)) {
					t.Errorf("request %d (rule %s) of the %s agent lacks Harvest's instructions (%q)", r.Seq, r.Rule, kind, want)
				}
			}
		}
		if got := r.Header.Get("X-Api-Key"); got != canaryKey {
			t.Errorf("request %d (%s) reached the model with key %q, want the real one added by the proxy", r.Seq, r.Path, got)
		}
	}
	if instructed < 2 {
		t.Errorf("only %d main-loop requests were checked for the instructions", instructed)
	}
	for _, want := range []string{"Task one: make fixed.txt", "Task one done.", "Task two, after that", "Task two done."} {
		if !bytes.Contains(last.Body, []byte(want)) {
			t.Fatalf("the resumed turn's request lacks %q: the conversation was not resumed\n%.3000s", want, last.Body)
		}
	}

	// Cancel during a Bash tool: its process tree is gone within a
	// second, the session is idle with its queue kept, and the next turn
	// goes on in the same conversation.
	e.send(v.ID, "Task four: run forever", "")
	stacktest.Typed[event.ToolStarted](w, "t4", nil)
	testbin.WaitFor(t, 10*time.Second, "the tool's process tree runs", func() bool {
		return len(testbin.ProcsWithArgs("sleep", "51337")) > 0 && len(testbin.ProcsWithArgs("sleep", "51338")) > 0
	})
	queued := e.send(v.ID, "Task five: still there?", "")
	start := time.Now()
	if err := e.m.Cancel(ctx, "owner-1", v.ID); err != nil {
		t.Fatal(err)
	}
	testbin.WaitFor(t, time.Second-time.Since(start), "the process tree is gone", func() bool {
		return len(testbin.ProcsWithArgs("sleep", "51337")) == 0 && len(testbin.ProcsWithArgs("sleep", "51338")) == 0
	})
	t.Logf("cancel to process tree gone: %s", time.Since(start))
	stacktest.Typed[event.TurnCancelled](w, "t4", nil)
	if got := e.get(v.ID); got.State != store.StateIdle || len(got.Queue) != 1 || got.Queue[0].ID != queued.ID {
		t.Fatalf("after cancel: %s with queue %+v, want idle with the queued message", got.State, got.Queue)
	}
	e.send(v.ID, "Task five, again", "") // resumes the paused queue
	if f := w.Finished("t5"); f.Result != "Still here." {
		t.Fatalf("t5 finished with %+v", f)
	}

	// No event carries the key.
	evs, err := e.st.Events(ctx, v.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		b, _ := json.Marshal(ev)
		if strings.Contains(string(b), canaryKey[:20]) {
			t.Fatalf("event %d carries the real key: %s", ev.Seq, b)
		}
	}
	stacktest.CheckGapless(t, e.st, v.ID)
}

// scanSessionBox connects to the session's box and looks, from inside,
// everywhere a process there could find a key: every process's environment
// and command line, and the files under HOME, the workspaces and /tmp.
// The scan must show mustSee, the agent CLI's proxy settings (proof that it
// looked where the CLI runs).
func scanSessionBox(t *testing.T, e *env, id string, mustSee ...string) {
	t.Helper()
	scanBoxFor(t, e, id, []string{canaryKey, canaryKey[:20], canaryKey[len(canaryKey)-20:]}, mustSee...)
}

// scanBoxFor is scanSessionBox for any secrets.
func scanBoxFor(t *testing.T, e *env, id string, secrets []string, mustSee ...string) {
	t.Helper()
	s, err := e.st.GetSession(testbin.Context(t), id)
	if err != nil {
		t.Fatal(err)
	}
	h, err := decodeHandle(s.Sandbox)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var p sandbox.Provider = e.Local
	if h.Backend == docker.Name {
		p = e.Docker
	}
	sb, err := p.Recover(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	var out, errb bytes.Buffer // one writer each: the streams are copied concurrently
	script := `for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do echo "== $f"; tr '\0' '\n' < "$f"; echo; done
find "$HOME" /workspace /tmp -type f -size -16M -exec cat {} + 2>/dev/null; echo scan-done`
	st, err := sb.Run(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb, Timeout: time.Minute})
	if err != nil || !strings.Contains(out.String(), "scan-done") || st.Dropped > 0 {
		t.Fatalf("scanning the box: %v %v (%d bytes dropped)\n%s\n%s", st, err, st.Dropped, out.String(), errb.String())
	}
	scan := out.String()
	for _, want := range mustSee {
		if !strings.Contains(scan, want) {
			t.Fatalf("the scan does not show %q, so it did not look where it should:\n%s", want, scan)
		}
	}
	for _, part := range secrets {
		if strings.Contains(scan, part) {
			t.Fatalf("a secret (%q) is in the box", part)
		}
	}
}

// A request for an external agent is checked like the rest: an unknown
// kind, a backend it cannot run on, and a terminal CLI that is not one (or
// has no way to end a turn) are input errors.
func TestExternalAgentValidation(t *testing.T) {
	e := newEnv(t)
	for name, tc := range map[string]struct {
		req  CreateRequest
		want string
	}{
		"unknown kind":  {CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Agent: "aider"}, `agent "aider": use "builtin"`},
		"other backend": {CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Agent: claudecode.Kind.Name, Backend: "host"}, `on the local or docker backend; not on "host"`},
		"terminal for another agent": {CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Agent: claudecode.Kind.Name,
			Terminal: &store.TerminalCLI{Command: []string{"bash"}, DonePattern: `\$ $`}}, `terminal is for agent "terminal"`},
		"empty command": {CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Agent: terminal.Kind.Name,
			Terminal: &store.TerminalCLI{DonePattern: `\$ $`}}, "terminal.command is empty"},
		"bad pattern": {CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Agent: terminal.Kind.Name,
			Terminal: &store.TerminalCLI{Command: []string{"python3", "-i"}, DonePattern: `>>> (`}}, "terminal.done_pattern: error parsing regexp"},
		"no way to end a turn": {CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Agent: terminal.Kind.Name,
			Terminal: &store.TerminalCLI{Command: []string{"python3", "-i"}}}, "give done_pattern"},
		"idle timeout too short": {CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Agent: terminal.Kind.Name,
			Terminal: &store.TerminalCLI{Command: []string{"python3", "-i"}, IdleTimeout: time.Millisecond}}, "terminal.idle_timeout 1ms"},
	} {
		_, err := e.m.Create(testbin.Context(t), "owner-1", tc.req)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", name, err, tc.want)
		}
	}
}

// egressScript: a Bash command that fetches from an allowed registry and
// from a host that is not allowed, through the egress proxy.
const egressScript = `
rules:
  - name: fetch-builtin
    when: {api: anthropic, last_user: "Fetch", turn: 1, tools: [bash]}
    reply:
      tool_calls: [{name: bash, input: {command: "curl -sS http://registry.test/pkg; echo; curl -s -o /dev/null -w 'evil %{http_code}' http://evil.test/"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: fetch
    when: {api: anthropic, last_user: "Fetch", turn: 1, tools: [Bash]}
    reply:
      tool_calls: [{name: Bash, input: {command: "curl -sS http://registry.test/pkg; echo; curl -s -o /dev/null -w 'evil %{http_code}' http://evil.test/", description: "Fetch"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: fetched
    when: {api: anthropic, turn: 2}
    reply: {text: "Fetched.", usage: {input_tokens: 100, output_tokens: 5}}
`

// An agent's commands — the builtin agent's bash, an external agent's
// CLI's — reach an allowed package registry through the egress proxy
// bridged into the box, and are refused any other host; the box still has
// no network of its own.
func TestEgress(t *testing.T) {
	for _, kind := range []string{AgentBuiltin, claudecode.Kind.Name} {
		t.Run(kind, func(t *testing.T) { testEgress(t, kind) })
	}
}

func testEgress(t *testing.T, kind string) {
	if kind == claudecode.Kind.Name {
		testbin.Claude(t)
	}
	e := newEnv(t, withEgress(registryProxy(t, "registry.test")))
	s, err := sim.ParseScript("egress.yaml", []byte(egressScript))
	if err != nil {
		t.Fatal(err)
	}
	e.Sim.Store(sim.New(s))
	v := e.create("Fetch the package", func(r *CreateRequest) { r.Agent = kind })
	w := e.watch(v.ID)
	out := stacktest.Typed[event.ToolFinished](w, "t1", nil).Output
	if !strings.Contains(out, "package-bytes-from-the-registry") || !strings.Contains(out, "evil 403") {
		t.Fatalf("the command printed %q; want the registry's bytes and a 403 for evil.test", out)
	}
	w.Finished("t1")
}

// A session narrows the server's egress allowlist: with egress
// ["other.test"] the registry the server allows is refused (403, the
// session's own list named); with [] the box has no proxy at all; a host
// the server does not allow, or egress on a server without a proxy, is an
// input error.
func TestSessionEgress(t *testing.T) {
	e := newEnv(t, withEgress(registryProxy(t, "registry.test", "other.test")))
	s, err := sim.ParseScript("egress.yaml", []byte(egressScript))
	if err != nil {
		t.Fatal(err)
	}
	e.Sim.Store(sim.New(s))

	narrow := e.create("Fetch the package", func(r *CreateRequest) { r.Egress = &[]string{"other.test"} })
	if narrow.Egress == nil || !slices.Equal(*narrow.Egress, []string{"other.test"}) {
		t.Fatalf("the session's egress: %v", narrow.Egress)
	}
	out := stacktest.Typed[event.ToolFinished](e.watch(narrow.ID), "t1", nil).Output
	if strings.Contains(out, "package-bytes") || !strings.Contains(out, "evil 403") {
		t.Errorf("with egress [other.test] the command printed %q; want no registry bytes (403) and 403 for evil.test", out)
	}

	none := e.create("Fetch the package", func(r *CreateRequest) { r.Egress = &[]string{} })
	out = stacktest.Typed[event.ToolFinished](e.watch(none.ID), "t1", nil).Output
	if strings.Contains(out, "package-bytes") || strings.Contains(out, "evil 403") {
		t.Errorf("with egress [] the command printed %q; want no proxy at all (no 403 from it either)", out)
	}

	for _, tc := range []struct {
		egress []string
		want   string
	}{
		{[]string{"evil.test"}, "evil.test not on the server's egress allowlist"},
		{[]string{"*.test"}, "too broad"},
	} {
		_, err := e.m.Create(testbin.Context(t), "owner-1", CreateRequest{Repos: []RepoSpec{{Source: e.Repo}}, Egress: &tc.egress})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("egress %q: %v, want an error with %q", tc.egress, err, tc.want)
		}
	}
	plain := newEnv(t)
	if _, err := plain.m.Create(testbin.Context(t), "owner-1", CreateRequest{Repos: []RepoSpec{{Source: plain.Repo}}, Egress: &[]string{"registries"}}); err == nil || !strings.Contains(err.Error(), "this server has no egress proxy") {
		t.Errorf("egress on a server without a proxy: %v", err)
	}
}

// registryProxy is an egress proxy allowing allow, where registry.test,
// other.test and evil.test resolve to a public address and every dial
// reaches a loopback server answering "package-bytes-from-the-registry".
func registryProxy(t *testing.T, allow ...string) *egress.Proxy {
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "package-bytes-from-the-registry")
	}))
	t.Cleanup(reg.Close)
	public := netip.MustParseAddr("203.0.113.7") // what the names resolve to; the dial goes to reg
	ep, err := egress.New(egress.Config{
		Allow:    allow,
		Resolver: fixedResolver{"registry.test": public, "other.test": public, "evil.test": public},
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr != netip.AddrPortFrom(public, 80).String() {
				return nil, fmt.Errorf("dialed %s", addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, reg.Listener.Addr().String())
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

type fixedResolver map[string]netip.Addr

func (f fixedResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return []netip.Addr{a}, nil
	}
	return nil, fmt.Errorf("no such host %s", host)
}

// genericScript answers the generic CLI's own model call.
const genericScript = `
rules:
  - name: ping
    when: {api: anthropic, last_user: "Generic ping"}
    reply: {text: "pong-from-the-sim", usage: {input_tokens: 42, output_tokens: 7}}
`

// The terminal agent runs a CLI of the request's own (here an interactive
// bash; any REPL works the same): the command and its done pattern come
// through the API and are stored, the prompt is typed into it, the turn
// ends on the pattern, and the CLI finds the model through the proxy in
// its environment — a token, never the key — with the usage metered.
func TestGenericTerminalSession(t *testing.T) {
	e := newEnv(t, withKey(canaryKey))
	s, err := sim.ParseScript("generic.yaml", []byte(genericScript))
	if err != nil {
		t.Fatal(err)
	}
	e.Sim.Store(sim.New(s))
	body := `{"model":"` + strings.TrimPrefix(stacktest.Model, "anthropic/") + `","max_tokens":16,"messages":[{"role":"user","content":"Generic ping"}]}`
	prompt := `echo made > made.txt; echo "key=${ANTHROPIC_API_KEY:0:16} token=${HARVEST_MODEL_TOKEN:0:16}"; ` +
		`curl -sS "$ANTHROPIC_BASE_URL/v1/messages" -H "x-api-key: $ANTHROPIC_API_KEY" -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' -d '` + body + `'; echo; echo END-OF-TURN`
	v := e.create(prompt, func(r *CreateRequest) {
		r.Agent = terminal.Kind.Name
		r.Terminal = &store.TerminalCLI{Command: []string{"bash", "--norc", "--noprofile", "-i"}, DonePattern: `END-OF-TURN\r?\n.*\$ $`, ReadyPattern: `\$ $`}
	})
	if v.Terminal == nil || v.Terminal.Command[0] != "bash" {
		t.Fatalf("the session's terminal: %+v", v.Terminal)
	}
	if got, err := e.st.GetSession(testbin.Context(t), v.ID); err != nil || got.Terminal == nil || got.Terminal.DonePattern == "" {
		t.Fatalf("stored terminal: %+v, %v", got, err)
	}
	w := e.watch(v.ID)
	f := w.Finished("t1")
	t.Logf("the turn's result:\n%s", f.Result)
	for _, want := range []string{"key=harvest-session-", "token=harvest-session-", "pong-from-the-sim"} {
		if !strings.Contains(f.Result, want) {
			t.Errorf("the turn's result lacks %q:\n%s", want, f.Result)
		}
	}
	if f.Usage.InputTokens != 42 || f.Usage.OutputTokens != 7 {
		t.Errorf("usage %+v: want the CLI's model call metered by the proxy (42 in, 7 out)", f.Usage)
	}
	if b, err := os.ReadFile(filepath.Join(v.Repos[0].Path, "made.txt")); err != nil || string(b) != "made\n" {
		t.Errorf("made.txt: %q, %v", b, err)
	}
	reqs := e.Sim.Load().Requests()
	if len(reqs) != 1 || reqs[0].Header.Get("X-Api-Key") != canaryKey {
		t.Fatalf("the sim saw %d requests; want one, with the real key the proxy added", len(reqs))
	}
	evs, err := e.st.Events(testbin.Context(t), v.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if b, _ := json.Marshal(ev); strings.Contains(string(b), canaryKey[:20]) {
			t.Fatalf("event %d carries the real key: %s", ev.Seq, b)
		}
	}
}

// stuckScript: the agent writes STUCK.md with its shell tool and says so.
const stuckScript = `
rules:
  - name: title
    when: {api: anthropic, system: "Generate a concise, sentence-case title"}
    reply: {text: '{"title": "Get stuck"}', usage: {input_tokens: 100, output_tokens: 10}}
  - name: said
    when: {api: anthropic, last_user: "get stuck", tool_result: "WROTE"}
    reply: {text: "I am blocked: see STUCK.md.", usage: {input_tokens: 100, output_tokens: 10}}
  - name: write-opencode
    when: {api: anthropic, last_user: "get stuck", tools: [bash, todowrite]}
    reply:
      tool_calls: [{name: bash, input: {command: "printf 'Blocked: the tests need a database.\\n' > STUCK.md; echo WROTE", description: "Say why"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: write-claude
    when: {api: anthropic, last_user: "get stuck", tools: [Bash]}
    reply:
      tool_calls: [{name: Bash, input: {command: "printf 'Blocked: the tests need a database.\\n' > STUCK.md; echo WROTE", description: "Say why"}}]
      usage: {input_tokens: 100, output_tokens: 10}
`

// TestStuckEveryAgent: a STUCK.md written by an agent that does not look
// for one itself (Claude Code, OpenCode) is reported as a stuck event, just
// before the turn's end.
func TestStuckEveryAgent(t *testing.T) {
	for _, kind := range []string{claudecode.Kind.Name, opencode.Kind.Name} {
		t.Run(kind, func(t *testing.T) {
			if kind == opencode.Kind.Name {
				testbin.OpenCode(t)
			} else {
				testbin.Claude(t)
			}
			e := newEnv(t, withKey(canaryKey), withDisks)
			s, err := sim.ParseScript("stuck.yaml", []byte(stuckScript))
			if err != nil {
				t.Fatal(err)
			}
			e.Sim.Store(sim.New(s))
			v := e.create("get stuck", func(r *CreateRequest) { r.Agent = kind })
			w := e.watch(v.ID)
			st := stacktest.Typed[event.Stuck](w, "t1", nil)
			if st.Repo != v.Repos[0].Name || !strings.Contains(st.Text, "need a database") {
				t.Fatalf("stuck event %+v", st)
			}
			w.Finished("t1")
			var stuckAt, endAt int64
			for _, ev := range w.Seen {
				switch ev.Data.(type) {
				case event.Stuck:
					stuckAt = ev.Seq
				case event.TurnFinished:
					endAt = ev.Seq
				}
			}
			if stuckAt == 0 || stuckAt > endAt {
				t.Fatalf("stuck at seq %d, the turn's end at %d: want it just before", stuckAt, endAt)
			}
		})
	}
}
