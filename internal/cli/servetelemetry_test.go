package cli

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// TestServeTelemetry: a real `harvest serve --log-format json
// --metrics-listen ADDR` runs a turn; its metrics, on the API with the
// admin token and on the metrics address without one, parse with
// Prometheus' parser and count the turn; /readyz passes every check; its
// log lines are JSON, and the turn's carry the session, the turn and the
// node.
func TestServeTelemetry(t *testing.T) {
	e := newServeEnv(t)
	p := e.start("--log-format", "json", "--metrics-listen", "127.0.0.1:0", "--quiet=false")
	c := e.client(p)
	if !p.stderr.WaitFor("(no token)", 30*time.Second) {
		t.Fatalf("serve did not say where its metrics are:\n%s", p.stderr)
	}
	m := regexp.MustCompile(`metrics on (http://\S+/metrics) \(no token\)`).FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("no metrics address in:\n%s", p.stderr)
	}
	metricsURL := m[1]
	tok, _ := os.ReadFile(filepath.Join(e.home, "admin-token"))

	repo := filepath.Join(testbin.TempDir(t), "repo")
	os.Mkdir(repo, 0o755)
	os.WriteFile(filepath.Join(repo, "README.md"), []byte("# a repository\n"), 0o644)
	ctx := testbin.Context(t)
	v, err := c.CreateSession(ctx, wire.CreateRequest{Repos: []wire.RepoSpec{{Source: repo}}, Prompt: "msg one"})
	if err != nil {
		t.Fatal(err)
	}
	follow(t, c, v.ID, 0, "the end of t1", stacktest.TurnEnded("t1"))
	follow(t, c, v.ID, 0, "idle", stacktest.IsState(store.StateIdle))

	finished := func(f map[string]*dto.MetricFamily) float64 {
		for _, mt := range f["harvest_turns_total"].GetMetric() {
			lb := map[string]string{}
			for _, lp := range mt.GetLabel() {
				lb[lp.GetName()] = lp.GetValue()
			}
			if lb["agent"] == "builtin" && lb["outcome"] == "finished" {
				return mt.GetCounter().GetValue()
			}
		}
		return -1
	}
	for _, src := range []struct{ url, token string }{{metricsURL, ""}, {p.url + "/metrics", strings.TrimSpace(string(tok))}} {
		var f map[string]*dto.MetricFamily
		// The turn's metrics are its last act, just after the session is
		// idle: wait for its count and its duration.
		testbin.WaitFor(t, 30*time.Second, "the turn counted and timed at "+src.url, func() bool {
			f = scrapeText(t, src.url, src.token)
			return finished(f) == 1 && f["harvest_turn_duration_seconds"] != nil
		})
		for _, name := range []string{"harvest_sessions", "harvest_turn_duration_seconds", "harvest_box_operation_duration_seconds",
			"harvest_model_requests_total", "harvest_store_operation_duration_seconds", "harvest_journal_events_stored_total",
			"harvest_warm_pool_takes_total", "harvest_disk_promised_bytes", "harvest_disk_free_bytes", "harvest_disk_floor_bytes",
			"harvest_sessions_disk_limit_bytes", "harvest_leases_held",
			"harvest_webhook_deliveries_total", "harvest_egress_requests_total", "harvest_modelproxy_requests_total", "go_goroutines", "process_resident_memory_bytes"} {
			if f[name] == nil {
				t.Errorf("%s: no family %s", src.url, name)
			}
		}
	}
	// The API's /metrics wants the admin token; the metrics address none.
	if resp, err := http.Get(p.url + "/metrics"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /metrics without a token: %v %v; want 401", resp, err)
	} else {
		resp.Body.Close()
	}

	resp, err := http.Get(p.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready wire.Readiness
	err = json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || ready.Status != "ready" {
		t.Fatalf("GET /readyz: %d %+v %v", resp.StatusCode, ready, err)
	}
	names := map[string]bool{}
	for _, ch := range ready.Checks {
		names[ch.Name] = ch.OK
	}
	for _, want := range []string{"draining", "store", "disk", "backend local"} {
		if !names[want] {
			t.Errorf("/readyz: check %q missing or failed: %+v", want, ready.Checks)
		}
	}

	// The log: JSON lines; the turn's carry its ids.
	host, _ := os.Hostname()
	var turnLines int
	testbin.WaitFor(t, 30*time.Second, "the turn's end in the log", func() bool { return strings.Contains(p.stderr.String(), `"msg":"turn ended"`) })
	sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "harvest") {
			continue // the messages for the person who started it
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("a log line that is neither JSON nor a harvest message: %q", line)
			continue
		}
		if rec["msg"] == "turn started" || rec["msg"] == "turn ended" {
			turnLines++
			if rec["session"] != v.ID || rec["turn"] != "t1" || rec["node"] != host {
				t.Errorf("a turn's log line without its ids (session %s, turn t1, node %s): %s", v.ID, host, line)
			}
		}
	}
	if turnLines != 2 {
		t.Errorf("%d log lines of the turn's start and end, want 2:\n%s", turnLines, p.stderr)
	}
}

// scrapeText GETs a Prometheus text scrape and parses it.
func scrapeText(t *testing.T, url, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	f, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return f
}
