package telemetry_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/stacktest/apitest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testreq"
	"github.com/harvest-dev/harvest/sandbox/disk"
	"github.com/harvest-dev/harvest/session"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/telemetry"
	"github.com/harvest-dev/harvest/wire"
)

// script: "run a tool" runs bash in the box, then answers; "again"
// answers at once. Every reply reports 100 input and 10 output tokens.
const script = `
rules:
  - name: after-tool
    when: {tool_result: "from-the-box"}
    reply: {text: "the tool ran", usage: {input_tokens: 100, output_tokens: 10}}
  - name: tool
    when: {last_user: "run a tool"}
    reply:
      tool_calls: [{name: bash, input: {command: "echo from-the-box"}}]
      usage: {input_tokens: 100, output_tokens: 10}
  - name: again
    when: {last_user: "again"}
    reply: {text: "once more", usage: {input_tokens: 100, output_tokens: 10}}
`

// Families lists every family the issue asks for (docs/running-a-server.md#metrics).
var Families = []string{
	"harvest_sessions", "harvest_session_runners", "harvest_turns_running", "harvest_draining",
	"harvest_turns_total", "harvest_turn_duration_seconds",
	"harvest_box_operation_duration_seconds", "harvest_box_operation_failures_total",
	"harvest_warm_pool_size", "harvest_warm_pool_ready", "harvest_warm_pool_takes_total",
	"harvest_model_requests_total", "harvest_model_request_duration_seconds", "harvest_model_tokens_total", "harvest_model_cost_usd_total",
	"harvest_modelproxy_requests_total", "harvest_egress_requests_total", "harvest_egress_bytes_total",
	"harvest_webhook_deliveries_total",
	"harvest_store_operation_duration_seconds", "harvest_store_operation_errors_total",
	"harvest_journal_events_stored_total", "harvest_journal_commits_total", "harvest_journal_commit_retries_total",
	"harvest_journal_queued_events", "harvest_journal_subscribers", "harvest_journal_subscribers_cut_off_total",
	"harvest_leases_held", "harvest_leases_taken_total", "harvest_leases_renewed_total", "harvest_leases_lost_total", "harvest_leases_taken_over_total",
	"harvest_sessions_disk_limit_bytes", "harvest_disk_promised_bytes", "harvest_disk_promised_free_bytes", "harvest_disk_allocated_bytes",
	"harvest_disk_free_bytes", "harvest_disk_size_bytes", "harvest_disk_floor_bytes",
	"harvest_build_info",
}

// TestSessionObserved is issue 23's acceptance test of the metrics, the
// traces and the logs, through a real server (apitest: the real store,
// journal, Manager, local boxes with a warm pool, the builtin agent on
// harvest sim, the API on loopback), watched as harvest serve watches
// it: a session runs two turns, the first with a tool call; /metrics,
// parsed with Prometheus' parser, has every family and they move; an
// OTLP receiver decoding the real protobuf gets one trace per turn, from
// the API request through provisioning, the turn, its model calls and
// its tool, each span under its parent; the JSON log lines of the turns
// carry the session, the turn, the node and the trace.
func TestSessionObserved(t *testing.T) {
	rx := startOTLP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "harvest-test")
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	ctx := testbin.Context(t)
	tr, err := telemetry.NewTracing(ctx, "test")
	if err != nil || !tr.On() {
		t.Fatalf("NewTracing with an endpoint: %+v, %v; want it on", tr, err)
	}
	var logs testbin.Buffer
	lg, err := telemetry.NewLogger(&logs, telemetry.LogJSON, slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	lg.SetNode("node-a")
	m := telemetry.NewMetrics(telemetry.Config{Version: "test"})
	// With disks, as harvest serve runs sessions.
	testreq.Check(t, testreq.Disks, disk.Check(ctx, ""))
	a := apitest.New(t, script, apitest.WithTelemetry(m, tr), apitest.WithLogger(lg.Logger), apitest.WithStack(stacktest.WithPool(1), stacktest.WithDisks))
	// Before the API's cleanups: the exporter's goroutines end with it.
	t.Cleanup(func() {
		tr.Shutdown(context.Background())
		rx.hangUp()
	})
	metricsURL := a.URL + "/metrics"
	hc := &http.Client{Transport: a.Transport}

	before := scrape(t, hc, metricsURL, a.Admin)
	for _, f := range Families {
		if _, ok := before[f]; !ok && !lazy[f] {
			t.Errorf("family %s is not in a new server's /metrics", f)
		}
	}
	// /metrics is the admin's.
	if resp := get(t, hc, metricsURL, a.Alice); resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /metrics with a user token: %s, want 403", resp.Status)
	}
	if resp := get(t, hc, metricsURL, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /metrics without a token: %s, want 401", resp.Status)
	}
	// Ready: every check passes (and its store read, a miss, is counted).
	var ready wire.Readiness
	if resp := getJSON(t, hc, a.URL+"/readyz", &ready); resp.StatusCode != http.StatusOK || ready.Status != "ready" || len(ready.Checks) != 4 {
		t.Fatalf("GET /readyz: %s %+v; want 200, ready, 4 checks", resp.Status, ready)
	}

	v, err := a.AdminC.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: a.Repo}}, Prompt: "run a tool"})
	if err != nil {
		t.Fatal(err)
	}
	stream := a.AdminC.Events(ctx, v.ID, client.StreamOptions{})
	defer stream.Close()
	stacktest.ReadUntil(t, stream, "the end of turn t1", stacktest.TurnEnded("t1"))
	stacktest.ReadUntil(t, stream, "idle after t1", stacktest.IsState(store.StateIdle))
	// The stream is a subscriber of the journal.
	if n := scrape(t, hc, metricsURL, a.Admin).value("harvest_journal_subscribers", nil); n < 1 {
		t.Errorf("harvest_journal_subscribers = %v with a stream open, want at least 1", n)
	}
	if _, err := a.AdminC.Send(ctx, v.ID, "again", ""); err != nil {
		t.Fatal(err)
	}
	stacktest.ReadUntil(t, stream, "the end of turn t2", stacktest.TurnEnded("t2"))
	stacktest.ReadUntil(t, stream, "idle after t2", stacktest.IsState(store.StateIdle))

	// The turns' metrics are recorded as each turn's last act, just after
	// the session is idle again: wait for them.
	var after families
	testbin.WaitFor(t, 30*time.Second, "two turns counted", func() bool {
		after = scrape(t, hc, metricsURL, a.Admin)
		return after.value("harvest_turns_total", l("agent", "builtin", "outcome", "finished")) == 2
	})
	for _, f := range Families {
		if _, ok := after[f]; !ok {
			t.Errorf("family %s is not in /metrics after a session ran", f)
		}
	}
	moved := func(name string, labels map[string]string, want func(d float64) bool, what string) {
		t.Helper()
		d := after.value(name, labels) - max(before.value(name, labels), 0)
		if !want(d) {
			t.Errorf("%s%v moved by %v; want %s", name, labels, d, what)
		}
	}
	exactly := func(n float64) func(float64) bool { return func(d float64) bool { return d == n } }
	atLeast := func(n float64) func(float64) bool { return func(d float64) bool { return d >= n } }
	const model = "claude-sonnet-4-5"
	moved("harvest_turn_duration_seconds", l("agent", "builtin", "outcome", "finished"), exactly(2), "2 turns")
	moved("harvest_model_requests_total", l("model", model, "via", "client", "outcome", "ok"), exactly(3), "3 model calls")
	moved("harvest_model_request_duration_seconds", l("model", model, "via", "client"), exactly(3), "3 model calls")
	moved("harvest_model_tokens_total", l("model", model, "kind", "input"), exactly(300), "3 x 100 input tokens")
	moved("harvest_model_tokens_total", l("model", model, "kind", "output"), exactly(30), "3 x 10 output tokens")
	moved("harvest_model_cost_usd_total", l("model", model), func(d float64) bool { return d > 0.0013 && d < 0.0014 }, "$0.00135 (300 in at $3/M, 30 out at $15/M)")
	moved("harvest_box_operation_duration_seconds", l("backend", "local", "op", "create"), exactly(1), "one box")
	moved("harvest_box_operation_duration_seconds", l("backend", "local", "op", "exec"), atLeast(1), "the bash tool at least")
	moved("harvest_warm_pool_takes_total", l("backend", "local"), exactly(1), "one box started through the pool")
	moved("harvest_store_operation_duration_seconds", l("op", "CreateSession"), exactly(1), "one session stored")
	moved("harvest_journal_events_stored_total", nil, atLeast(10), "the turns' events")
	moved("harvest_journal_commits_total", nil, atLeast(1), "commits")
	if n := after.value("harvest_store_operation_errors_total", l("op", "GetSession", "error", "not_found")); n < 1 {
		t.Errorf("the readiness probe's store read (a miss) is not counted: %v", n)
	}
	if n := after.value("harvest_sessions", l("state", "idle")); n != 1 {
		t.Errorf("harvest_sessions{state=idle} = %v, want 1", n)
	}
	if n := after.value("harvest_session_runners", nil); n != 1 {
		t.Errorf("harvest_session_runners = %v, want 1", n)
	}
	// The session's disk: in the store's sum of limits, and this node's
	// live disk, holding something, on a filesystem with its floor.
	for _, name := range []string{"harvest_sessions_disk_limit_bytes", "harvest_disk_promised_bytes"} {
		if n := after.value(name, nil); n != float64(disk.DefaultBytes) {
			t.Errorf("%s = %v, want the session's default disk %d", name, n, int64(disk.DefaultBytes))
		}
		if n := before.value(name, nil); n != 0 {
			t.Errorf("%s = %v before any session, want 0", name, n)
		}
	}
	held := after.value("harvest_disk_allocated_bytes", nil)
	if held <= 0 || held >= float64(disk.DefaultBytes) {
		t.Errorf("harvest_disk_allocated_bytes = %v, want what the disk holds: more than nothing, less than its size", held)
	}
	if n := after.value("harvest_disk_promised_free_bytes", nil); n > float64(disk.DefaultBytes)-held || n <= 0 {
		t.Errorf("harvest_disk_promised_free_bytes = %v, want at most the size less what the disk holds (%v)", n, float64(disk.DefaultBytes)-held)
	}
	size, free := after.value("harvest_disk_size_bytes", nil), after.value("harvest_disk_free_bytes", nil)
	if free <= 0 || free > size {
		t.Errorf("harvest_disk_free_bytes = %v of %v", free, size)
	}
	if n, want := after.value("harvest_disk_floor_bytes", nil), float64(session.MinFree{}.Floor(int64(size))); n != want {
		t.Errorf("harvest_disk_floor_bytes = %v, want the default floor %v", n, want)
	}
	checkBounded(t, after, v.ID)

	// One trace per turn.
	var spans []*span
	testbin.WaitFor(t, 30*time.Second, "both turns' spans exported", func() bool {
		tr.Provider.ForceFlush(ctx)
		spans = rx.received()
		return count(spans, "session.turn t1") == 1 && count(spans, "session.turn t2") == 1
	})
	checkTrace(t, spans, "POST /v1/sessions", "t1", true)
	checkTrace(t, spans, "POST /v1/sessions/{id}/messages", "t2", false)
	for _, s := range spans {
		if strings.Contains(s.name, v.ID) {
			t.Errorf("span %q names the session: span names are routes", s.name)
		}
	}
	rx.mu.Lock()
	if !rx.services["harvest-test"] {
		t.Errorf("the spans' service.name is not OTEL_SERVICE_NAME's: %v", rx.services)
	}
	rx.mu.Unlock()

	// The turns' JSON log lines carry the ids, and the trace's.
	traceOf := map[string]string{}
	for _, s := range spans {
		if strings.HasPrefix(s.name, "session.turn ") {
			traceOf[strings.TrimPrefix(s.name, "session.turn ")] = s.trace
		}
	}
	ended := map[string]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("a log line is not JSON: %v: %s", err, sc.Text())
		}
		if line["node"] != "node-a" || line["time"] == nil || line["level"] == nil || line["msg"] == nil {
			t.Errorf("a log line without its node, time, level or message: %s", sc.Text())
		}
		if line["msg"] == "turn ended" {
			ended[line["turn"].(string)] = line
		}
	}
	for _, turn := range []string{"t1", "t2"} {
		line := ended[turn]
		if line == nil || line["session"] != v.ID || line["outcome"] != "finished" || line["trace_id"] != traceOf[turn] || traceOf[turn] == "" {
			t.Errorf("the log line of the end of %s: %v; want session %s, outcome finished, trace %s", turn, line, v.ID, traceOf[turn])
		}
	}
}

// lazy are the families that appear only once their source exists: the
// pool's, once a box of the backend was asked for.
var lazy = map[string]bool{"harvest_warm_pool_size": true, "harvest_warm_pool_ready": true, "harvest_warm_pool_takes_total": true,
	"harvest_store_operation_errors_total": true, "harvest_model_requests_total": true, "harvest_model_request_duration_seconds": true,
	"harvest_model_tokens_total": true, "harvest_model_cost_usd_total": true, "harvest_turn_duration_seconds": true}

func count(spans []*span, name string) int {
	n := 0
	for _, s := range spans {
		if s.name == name {
			n++
		}
	}
	return n
}

// checkTrace checks the trace of a turn: the request's server span is
// its root; the turn (and, for a new session, its provisioning) are its
// children; the model calls and the tool calls are the turn's.
func checkTrace(t *testing.T, spans []*span, request, turn string, provisioned bool) {
	t.Helper()
	var root, turnSpan *span
	for _, s := range spans {
		if s.name == "session.turn "+turn {
			turnSpan = s
		}
	}
	if turnSpan == nil {
		t.Fatalf("no span for turn %s", turn)
	}
	in := map[string][]*span{}
	for _, s := range spans {
		if s.trace == turnSpan.trace {
			in[s.name] = append(in[s.name], s)
			if s.parent == "" {
				if root != nil {
					t.Errorf("trace of %s: two roots, %q and %q", turn, root.name, s.name)
				}
				root = s
			}
		}
	}
	if root == nil || root.name != request || root.kind != 2 /* SERVER */ {
		t.Fatalf("the root of %s's trace is %+v, want the server span %q", turn, root, request)
	}
	if turnSpan.parent != root.id || turnSpan.attrs["harvest.turn"] != turn || turnSpan.attrs["harvest.outcome"] != "finished" {
		t.Errorf("turn span %+v: want a child of the request's span %s, its turn and outcome", turnSpan, root.id)
	}
	for name, ss := range in {
		if strings.HasPrefix(name, "session.turn ") && len(ss) != 1 {
			t.Errorf("trace of %s has %d turn spans", turn, len(ss))
		}
	}
	chats := in["chat claude-sonnet-4-5"]
	wantChats, wantTools := 1, 0
	if provisioned {
		wantChats, wantTools = 2, 1
	}
	if len(chats) != wantChats {
		t.Errorf("trace of %s has %d model-call spans, want %d", turn, len(chats), wantChats)
	}
	for _, c := range chats {
		if c.parent != turnSpan.id || c.attrs["gen_ai.usage.output_tokens"] != "10" || c.kind != 3 /* CLIENT */ {
			t.Errorf("model-call span %+v: want a client span of the turn %s with its usage", c, turnSpan.id)
		}
	}
	tools := in["tool bash"]
	if len(tools) != wantTools {
		t.Errorf("trace of %s has %d tool spans, want %d", turn, len(tools), wantTools)
	}
	for _, s := range tools {
		if s.parent != turnSpan.id {
			t.Errorf("tool span %+v is not the turn's", s)
		}
	}
	prov := in["session.provision"]
	if !provisioned {
		if len(prov) != 0 {
			t.Errorf("the trace of %s provisions: %+v", turn, prov)
		}
		return
	}
	if len(prov) != 1 || prov[0].parent != root.id {
		t.Fatalf("trace of %s: provisioning spans %+v, want one, a child of the request's", turn, prov)
	}
	for _, name := range []string{"session.workspaces", "session.box"} {
		if ss := in[name]; len(ss) != 1 || ss[0].parent != prov[0].id {
			t.Errorf("trace of %s: %s spans %+v, want one, a child of the provisioning", turn, name, ss)
		}
	}
}

// checkBounded fails when a label value of the scrape is not one the
// metrics' fixed sets allow, or names the session.
func checkBounded(t *testing.T, f families, session string) {
	t.Helper()
	for name, mf := range f {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if strings.Contains(lp.GetValue(), session) {
					t.Errorf("%s has the session's id in its label %s", name, lp.GetName())
				}
				if allowed, ok := labelSets[lp.GetName()]; ok && !slices.Contains(allowed, lp.GetValue()) {
					t.Errorf("%s{%s=%q}: not a value of the label's set %v", name, lp.GetName(), lp.GetValue(), allowed)
				}
			}
		}
	}
}

func get(t *testing.T, hc *http.Client, url, token string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func getJSON(t *testing.T, hc *http.Client, url string, v any) *http.Response {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp
}
