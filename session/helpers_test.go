package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/egress"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/journal"
	"github.com/harvest-dev/harvest/llm"
	"github.com/harvest-dev/harvest/llm/providers"
	"github.com/harvest-dev/harvest/sandbox"
	"github.com/harvest-dev/harvest/sandbox/docker"
	"github.com/harvest-dev/harvest/sandbox/local"
	"github.com/harvest-dev/harvest/sim"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
	"github.com/harvest-dev/harvest/workspace"
)

// The tests run the real thing: SQLite in a temporary directory, the real
// journal, real local sandboxes (their own run dir), the real builtin agent
// and harvest sim over real HTTP on loopback. Time is a testClock the tests
// move, so idle timeouts, lifetimes and the watchdog cost no waiting.

// script is the sim's script for most tests. Rules are tried in order:
//
//	"msg ..."           a plain answer
//	"remember ..."      an answer with a word to find in later requests
//	after "released"    the long task's answer
//	"long task"         a bash call that waits for the file "go" in the
//	                    workspace (the test creates it to end the turn)
//	"tree task"         a bash call that starts a process tree that never ends
//	"step task"         a bash call that prints step-one-output, then one
//	                    that sleeps forever
//	"write a", "write b" a bash call that commits a.txt or b.txt, then
//	                    "committed on {branch}"
//	"look for credentials" a bash call that shows the workspace's git
//	                    config and environment, and greps for a canary
//	"merge"             a bash call that merges workflow wf's parallel branches
//	                    (from /runs) into the workspace
const script = `
rules:
  - name: looked
    when: {tool_result: "looked-for-it"}
    reply: {text: "done looking", usage: {input_tokens: 100, output_tokens: 10}}
  - name: look
    when: {last_user: "look for credentials"}
    reply:
      tool_calls: [{name: bash, input: {command: "git remote -v; git config --list; cat .git/config; env; grep -rl ghp_sessioncanary /workspace /tmp $HOME 2>/dev/null; echo looked-for-it"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: committed
    when: {tool_result: "committed on"}
    reply: {text: "written", usage: {input_tokens: 100, output_tokens: 10}}
  - name: merged
    when: {tool_result: "merged:"}
    reply: {text: "merge done", usage: {input_tokens: 100, output_tokens: 10}}
  - name: write a
    when: {last_user: "write a"}
    reply:
      tool_calls: [{name: bash, input: {command: "echo A > a.txt && git add a.txt && git -c user.name=t -c user.email=t@t commit -qm 'add a' && echo committed on $(git branch --show-current)"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: write b
    when: {last_user: "write b"}
    reply:
      tool_calls: [{name: bash, input: {command: "echo B > b.txt && git add b.txt && git -c user.name=t -c user.email=t@t commit -qm 'add b' && echo committed on $(git branch --show-current)"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: merge
    when: {last_user: "merge"}
    reply:
      tool_calls: [{name: bash, input: {command: "for d in /runs/*/repo; do s=${d#/runs/}; s=${s%/repo}; git fetch -q $d harvest/wf/$s && git -c user.name=t -c user.email=t@t merge -q --no-edit FETCH_HEAD || exit 1; done; echo merged: $(ls *.txt)"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: msg
    when: {last_user_regexp: "^msg"}
    reply: {text: "ok", usage: {input_tokens: 100, output_tokens: 10}}
  - name: remember
    when: {last_user_regexp: "^remember"}
    reply: {text: "I will remember the word pineapple.", usage: {input_tokens: 100, output_tokens: 10}}
  - name: released
    when: {tool_result: "released"}
    reply: {text: "long task done", usage: {input_tokens: 100, output_tokens: 10}}
  - name: long
    when: {last_user: "long task"}
    reply:
      tool_calls: [{name: bash, input: {command: "until [ -e go ]; do sleep 0.01; done; echo released", timeout: 600000}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: step two
    when: {tool_result: "step-one-output"}
    reply:
      tool_calls: [{name: bash, input: {command: "sleep 31339", timeout: 600000}}]
      usage: {input_tokens: 200, output_tokens: 20}
  - name: step one
    when: {last_user: "step task"}
    reply:
      tool_calls: [{name: bash, input: {command: "echo step-one-output"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: tree
    when: {last_user: "tree task"}
    reply:
      tool_calls: [{name: bash, input: {command: "sh -c 'sleep 31337' & sleep 31338; echo never", timeout: 600000}}]
      usage: {input_tokens: 100, output_tokens: 10}
`

const testModel = "anthropic/claude-sonnet-4-5"

// env is one server's worth of session machinery.
type env struct {
	t       testing.TB
	dbPath  string
	runDir  string
	dataDir string
	repo    string // a small repository to give sessions
	simURL  string
	sim     atomic.Pointer[sim.Server]
	clock   *testClock
	prov    *local.Provider
	st      store.Store
	j       *journal.Journal
	m       *Manager
	pool    int
	noOpen  bool
	agent   string // the harvest-agent binary
	key     string // the model endpoint's API key
	egress  *egress.Proxy
	dock    *docker.Provider // with withDocker: the "docker" backend
	disks   bool             // with withDisks: Config.Disks
}

type envOpt func(*env)

func withPool(n int) envOpt { return func(e *env) { e.pool = n } }

// withEgress gives the Manager an egress proxy.
func withEgress(p *egress.Proxy) envOpt { return func(e *env) { e.egress = p } }

// withKey gives the model endpoint the API key k (default "sk-test").
func withKey(k string) envOpt { return func(e *env) { e.key = k } }

// withDocker gives the Manager the docker backend too (its base image, a
// run dir of the test's own); the test fails where docker is required
// and absent, and is skipped elsewhere.
func withDocker(e *env) {
	p := docker.New(docker.Config{Image: testbin.DockerImage(), RunDir: testbin.TempDir(e.t), AgentBinary: testbin.Agent(e.t)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Available(ctx); err != nil {
		if testbin.DockerRequired() {
			e.t.Fatalf("the docker backend is required here: %v", err)
		}
		e.t.Skipf("the docker backend is not available: %v", err)
	}
	e.dock = p
	e.t.Cleanup(func() { destroyAll(e.t, p) })
}

// withoutManager leaves opening the store and the Manager to the test
// (env.open).
func withoutManager(e *env) { e.noOpen = true }

func newEnv(t testing.TB, opts ...envOpt) *env {
	t.Helper()
	e := &env{t: t, clock: newTestClock(), key: "sk-test"}
	for _, o := range opts {
		o(e)
	}
	s, err := sim.ParseScript("session-test.yaml", []byte(script))
	if err != nil {
		t.Fatal(err)
	}
	e.sim.Store(sim.New(s))
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { e.sim.Load().ServeHTTP(w, r) }))
	t.Cleanup(hs.Close)
	e.simURL = hs.URL

	e.runDir = testbin.TempDir(t)
	e.dataDir = testbin.TempDir(t)
	if e.disks {
		t.Cleanup(e.unmountDisks)
	}
	e.dbPath = filepath.Join(t.TempDir(), "harvest.db")
	e.repo = filepath.Join(testbin.TempDir(t), "repo")
	if err := os.Mkdir(e.repo, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.repo, "README.md"), []byte("# a repository\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.agent = testbin.Agent(t)
	e.prov = e.provider()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.prov.Available(ctx); err != nil {
		if testbin.LocalRequired() {
			t.Fatalf("the local sandbox backend is required here: %v", err)
		}
		t.Skipf("the local sandbox backend is not available: %v", err)
	}
	// Last cleanup to run: no box of this test survives it.
	t.Cleanup(e.destroyAllBoxes)
	if !e.noOpen {
		e.open()
	}
	return e
}

func (e *env) provider() *local.Provider {
	p := local.New(local.Config{RunDir: e.runDir, AgentBinary: e.agent, PoolSize: e.pool})
	e.t.Cleanup(func() { p.Close() })
	return p
}

// open opens the store, the journal and a Manager (the state of a server
// that just started; Recover is the test's to call).
func (e *env) open() {
	e.t.Helper()
	st, err := sqlite.Open(e.dbPath)
	if err != nil {
		e.t.Fatal(err)
	}
	e.st = st
	e.j = journal.New(st, journal.Options{Logger: quietLogger()})
	e.m = e.manager(e.st, e.j)
	m, j := e.m, e.j
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			e.t.Errorf("closing the manager: %v", err)
		}
		if err := j.Close(ctx); err != nil {
			e.t.Errorf("closing the journal: %v", err)
		}
		st.Close()
	})
}

func (e *env) manager(st store.Store, j *journal.Journal) *Manager {
	e.t.Helper()
	m, err := NewManager(Config{
		Store: st, Journal: j, Egress: e.egress,
		Backends: func(name string) (sandbox.Provider, error) {
			switch {
			case name == local.Name:
				return e.prov, nil
			case name == docker.Name && e.dock != nil:
				return e.dock, nil
			}
			return nil, fmt.Errorf("unknown backend %q: these tests run local (and docker with withDocker)", name)
		},
		DataDir: e.dataDir,
		// The tests' repositories are temporary directories, as are their
		// data directories (never copyable all the same).
		Sources: tempRoots(e.t),
		Models: providers.Config{
			Endpoints: map[string]providers.Endpoint{"anthropic": {API: "anthropic", BaseURL: e.simURL, APIKey: e.key}},
			Retry:     llm.RetryPolicy{MaxAttempts: 1},
		},
		DefaultModel: testModel,
		Disks:        e.disks,
		Clock:        e.clock,
		Logger:       quietLogger(),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func quietLogger() *slog.Logger {
	if os.Getenv("HARVEST_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// closeAndReopen is a graceful restart. (A crash, dropping everything
// without closing it, needs another process: see TestCrashRecovery.)
func (e *env) closeAndReopen() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.m.Close(ctx); err != nil {
		e.t.Fatal(err)
	}
	if err := e.j.Close(ctx); err != nil {
		e.t.Fatal(err)
	}
	if err := e.st.Close(); err != nil {
		e.t.Fatal(err)
	}
	e.open()
}

func (e *env) destroyAllBoxes() {
	p := local.New(local.Config{RunDir: e.runDir, AgentBinary: e.agent})
	defer p.Close()
	destroyAll(e.t, p)
}

// destroyAll destroys every box p lists.
func destroyAll(t testing.TB, p interface {
	sandbox.Provider
	sandbox.Lister
}) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hs, err := p.List(ctx)
	if err != nil {
		t.Errorf("listing boxes: %v", err)
	}
	for _, h := range hs {
		if err := p.Destroy(ctx, h); err != nil {
			t.Errorf("destroying box %s: %v", h.ID, err)
		}
	}
}

// boxes lists the ids of the boxes running in the test's run dir.
func (e *env) boxes() []string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hs, err := e.prov.List(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var ids []string
	for _, h := range hs {
		ids = append(ids, h.ID)
	}
	slices.Sort(ids)
	return ids
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// create makes a session on the test repository.
func (e *env) create(prompt string, mod ...func(*CreateRequest)) *View {
	e.t.Helper()
	req := CreateRequest{Repos: []RepoSpec{{Source: e.repo}}, Prompt: prompt}
	for _, f := range mod {
		f(&req)
	}
	v, err := e.m.Create(ctxT(e.t), "owner-1", req)
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

func (e *env) send(id, text, mode string) *store.Message {
	e.t.Helper()
	msg, err := e.m.Send(ctxT(e.t), "owner-1", id, text, mode)
	if err != nil {
		e.t.Fatal(err)
	}
	return msg
}

func (e *env) get(id string) *View {
	e.t.Helper()
	v, err := e.m.Get(ctxT(e.t), "", id)
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

// watcher reads a session's events as they are committed.
type watcher struct {
	t    testing.TB
	m    *Manager
	id   string
	sub  *journal.Subscription
	seen []event.Event
}

func (e *env) watch(id string) *watcher {
	e.t.Helper()
	w := &watcher{t: e.t, m: e.m, id: id}
	w.subscribe(0)
	e.t.Cleanup(func() { w.sub.Close() })
	return w
}

func (w *watcher) subscribe(after int64) {
	w.t.Helper()
	sub, err := w.m.Subscribe(context.Background(), "", w.id, after)
	if err != nil {
		w.t.Fatal(err)
	}
	w.sub = sub
}

// waitTimeout bounds every wait of the tests.
const waitTimeout = 90 * time.Second

// until reads events until one satisfies pred and returns it.
func (w *watcher) until(what string, pred func(event.Event) bool) event.Event {
	w.t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		select {
		case ev, ok := <-w.sub.C:
			if !ok {
				err := w.sub.Err()
				if errors.Is(err, journal.ErrTooSlow) {
					w.subscribe(w.lastSeq())
					continue
				}
				w.t.Fatalf("session %s: the event stream ended (%v) while waiting for %s; seen: %s", w.id, err, what, w.describe())
			}
			w.seen = append(w.seen, ev)
			if pred(ev) {
				return ev
			}
		case <-deadline.C:
			w.t.Fatalf("session %s: no %s within %s; seen: %s", w.id, what, waitTimeout, w.describe())
		}
	}
}

func (w *watcher) lastSeq() int64 {
	if len(w.seen) == 0 {
		return 0
	}
	return w.seen[len(w.seen)-1].Seq
}

func (w *watcher) describe() string {
	var b strings.Builder
	for _, ev := range w.seen {
		fmt.Fprintf(&b, "\n  %d %s %s %s", ev.Seq, ev.Turn, ev.Type(), short(ev.Data))
	}
	return b.String()
}

func short(p event.Payload) string {
	s := fmt.Sprintf("%+v", p)
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}

// typed waits for a payload of type T (in turn, if not "") matching pred.
func typed[T event.Payload](w *watcher, turn string, pred func(T) bool) T {
	w.t.Helper()
	var zero T
	ev := w.until(fmt.Sprintf("%s in turn %q", zero.EventType(), turn), func(ev event.Event) bool {
		p, ok := ev.Data.(T)
		return ok && (turn == "" || ev.Turn == turn) && (pred == nil || pred(p))
	})
	return ev.Data.(T)
}

func (w *watcher) state(st store.State) event.SessionState {
	w.t.Helper()
	return typed(w, "", func(p event.SessionState) bool { return p.State == string(st) })
}

func (w *watcher) finished(turn string) event.TurnFinished {
	w.t.Helper()
	return typed[event.TurnFinished](w, turn, nil)
}

// idleAfter waits for the session to be idle after turn ended.
func (w *watcher) idleAfter(turn string) {
	w.t.Helper()
	w.until("the end of turn "+turn, func(ev event.Event) bool {
		switch ev.Data.(type) {
		case event.TurnFinished, event.TurnFailed, event.TurnCancelled:
			return ev.Turn == turn
		}
		return false
	})
	w.state(store.StateIdle)
}

// ofType returns the payloads of type T seen so far, with their turns.
func ofType[T event.Payload](evs []event.Event) (out []T, turns []string) {
	for _, ev := range evs {
		if p, ok := ev.Data.(T); ok {
			out = append(out, p)
			turns = append(turns, ev.Turn)
		}
	}
	return out, turns
}

// storedEvents reads all of a session's events from the store and checks
// their seqs are 1, 2, 3... with no gap.
func checkGapless(t testing.TB, st store.Store, id string) []event.Event {
	t.Helper()
	evs, err := st.Events(ctxT(t), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("session %s: event %d has seq %d: the seqs have a gap or a repeat", id, i+1, ev.Seq)
		}
	}
	return evs
}

// eventually polls cond until it holds, for at most d.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// procsWith lists the host pids whose command line contains all of args
// (as separate arguments): processes inside local boxes are host processes.
func procsWith(args ...string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	want := []byte(strings.Join(args, "\x00"))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if bytes.Contains(b, want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// release ends the "long task" turn of a session.
func release(t testing.TB, v *View) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(v.Repos[0].Path, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// testClock is a Clock the test moves with Advance.
type testClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters map[*clockWaiter]struct{}
}

type clockWaiter struct {
	at time.Time
	c  chan time.Time
}

func newTestClock() *testClock {
	return &testClock{now: time.Now(), waiters: map[*clockWaiter]struct{}{}}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) At(t time.Time) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if !c.now.Before(t) {
		ch <- c.now
		return ch, func() {}
	}
	w := &clockWaiter{at: t, c: ch}
	c.waiters[w] = struct{}{}
	return ch, func() {
		c.mu.Lock()
		delete(c.waiters, w)
		c.mu.Unlock()
	}
}

// Advance moves the clock by d and fires every timer that is due.
func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for w := range c.waiters {
		if !c.now.Before(w.at) {
			w.c <- c.now
			delete(c.waiters, w)
		}
	}
}

func envInt(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}

// tempRoots is a source policy whose one root is the temporary directory.
func tempRoots(t testing.TB) *workspace.Policy {
	t.Helper()
	p, err := workspace.NewPolicy([]string{os.TempDir()}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
