package session

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
)

// retentionScript is a turn as a coding agent's often is: some thinking,
// a sentence, a build whose log is a few KiB, then an answer of a
// paragraph; and the summary the builtin agent asks for when its context
// is full.
var retentionScript = `
rules:
  - name: summary
    when: {system: "You are compacting the history"}
    reply:
      text: "The user asks, turn after turn, for the retry in client.go to be fixed; each turn the agent ran the build (green) and answered. Nothing is pending."
      usage: {input_tokens: 20000, output_tokens: 60}
` + retentionRules("a") + retentionRules("b")

// retentionRules are the rules of the turns whose prompt starts "turn
// <x>": the turns alternate a and b, so that the newest tool result (the
// sim's tool_result) is the previous turn's until this turn's build ran.
func retentionRules(x string) string {
	return strings.NewReplacer("X", x).Replace(`
  - name: answer X
    when: {last_user_regexp: "^turn X", tool_result: "build-log-end-X"}
    reply:
      text: "The build passes: every package compiled and the tests ran green. I changed the retry loop in client.go so that a 503 waits for the Retry-After the server gives before it tries again, and added a test that a server answering 503 twice and then 200 is asked three times. Nothing else changed; the diff is small and the branch is pushed."
      usage: {input_tokens: 2000, output_tokens: 120}
  - name: work X
    when: {last_user_regexp: "^turn X"}
    reply:
      thinking: "The user wants the retry fixed. I should run the build first to see what fails, then read client.go."
      text: "Let me run the build and the tests first."
      tool_calls: [{name: bash, input: {command: "for i in $(seq 1 60); do echo \"ok  \tgithub.com/acme/service/pkg$i\t0.0${i}s\"; done; echo build-log-end-X"}}]
      usage: {input_tokens: 1800, output_tokens: 90}
`)
}

// dbSize is the SQLite database's size in bytes (pages in use times the
// page size, as of its last commit) and its events' count and payload
// bytes.
func dbSize(t testing.TB, path string) (bytes, events, payload int64) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var pages, size int64
	if err := db.QueryRow(`SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()`).Scan(&size); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT COUNT(*), COALESCE(SUM(length(data)), 0) FROM events`).Scan(&events, &payload); err != nil {
		t.Fatal(err)
	}
	return size, events, payload
}

// BenchmarkRetentionSize measures what event retention saves on a
// realistic session: -benchtime Nx runs a session of N turns (each:
// thinking, a sentence, a build with ~3 KiB of output, a paragraph)
// through the builtin agent and the sim, suspends it, and lets the
// janitor compact it 31 days later (retention 30 days); it reports the
// SQLite database's size and the events' before and after.
//
//	go test ./session -run '^$' -bench 'BenchmarkRetentionSize$' -benchtime 1000x -timeout 30m
func BenchmarkRetentionSize(b *testing.B) {
	e, id := retentionRun(b)
	before, evBefore, payBefore := dbSize(b, e.DBPath)
	typesBefore := typeCounts(b, e.st, id)
	b.ResetTimer()
	retainNow(b, e, month+24*time.Hour)
	b.StopTimer()
	after, evAfter, payAfter := dbSize(b, e.DBPath)
	retentionDone(b, e, id)
	b.Logf("events by type before: %v", typesBefore)
	b.Logf("events by type after: %v", typeCounts(b, e.st, id))
	b.ReportMetric(float64(before), "db-bytes-before")
	b.ReportMetric(float64(after), "db-bytes-after")
	b.ReportMetric(float64(evBefore), "events-before")
	b.ReportMetric(float64(evAfter), "events-after")
	b.Logf("%d turns: SQLite database %s → %s (%.1f%%); events %d → %d; payloads %s → %s",
		b.N, mib(before), mib(after), 100*float64(after)/float64(before), evBefore, evAfter, mib(payBefore), mib(payAfter))
}

// BenchmarkRetentionSizePostgres is BenchmarkRetentionSize on
// PostgreSQL: the events table's size (pg_total_relation_size: heap,
// TOAST, index) before, after the compaction and a VACUUM (what
// autovacuum does: the space becomes reusable, the table does not
// shrink), and after a VACUUM FULL (what giving it back would take).
//
//	go test ./session -run '^$' -bench 'BenchmarkRetentionSizePostgres$' -benchtime 1000x -timeout 30m
func BenchmarkRetentionSizePostgres(b *testing.B) {
	e, id := retentionRun(b, withPostgres)
	ctx := testbin.Context(b)
	conn, err := pgx.Connect(ctx, e.StoreURL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	size := func(vacuum string) int64 {
		b.Helper()
		if vacuum != "" {
			if _, err := conn.Exec(ctx, vacuum); err != nil {
				b.Fatal(err)
			}
		}
		var n int64
		if err := conn.QueryRow(ctx, `SELECT pg_total_relation_size('events')`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	before := size("VACUUM events")
	b.ResetTimer()
	retainNow(b, e, month+24*time.Hour)
	b.StopTimer()
	retentionDone(b, e, id)
	vacuumed := size("VACUUM events")
	full := size("VACUUM FULL events")
	b.ReportMetric(float64(before), "events-bytes-before")
	b.ReportMetric(float64(vacuumed), "events-bytes-vacuumed")
	b.ReportMetric(float64(full), "events-bytes-vacuum-full")
	b.Logf("%d turns: PostgreSQL events table %s; after compaction and VACUUM %s (reusable, not returned); after VACUUM FULL %s (%.1f%%)",
		b.N, mib(before), mib(vacuumed), mib(full), 100*float64(full)/float64(before))
}

// retentionRun runs a session of b.N turns with retention 30 days and
// suspends it.
func retentionRun(b *testing.B, opts ...envOpt) (*env, string) {
	e := newEnv(b, append([]envOpt{withRetention(month), withScript(retentionScript)}, opts...)...)
	ctx := testbin.Context(b)
	if err := e.m.Recover(ctx); err != nil {
		b.Fatal(err)
	}
	v := e.create("turn a 1", func(r *CreateRequest) { r.Limits = store.Limits{MaxLifetime: 3 * month} })
	w := e.watch(v.ID)
	w.IdleAfter("t1")
	for i := 2; i <= b.N; i++ {
		e.send(v.ID, fmt.Sprintf("turn %s %d: fix the retry", []string{"b", "a"}[i%2], i), "")
		w.IdleAfter(fmt.Sprintf("t%d", i))
	}
	e.Clock.Advance(DefaultIdleTimeout)
	w.State(store.StateSuspended)
	failed := map[string]int{}
	for _, ev := range w.Seen {
		if f, ok := ev.Data.(event.TurnFailed); ok {
			failed[string(f.Kind)+": "+f.Error]++
		}
	}
	if len(failed) > 0 {
		b.Logf("turns that failed: %v", failed)
	}
	return e, v.ID
}

// retentionDone checks the janitor compacted session id and its seqs
// still run without a gap.
func retentionDone(b *testing.B, e *env, id string) {
	b.Helper()
	stacktest.CheckGapless(b, e.st, id)
	if n := e.m.Retained(); n.Sessions != 1 {
		b.Fatalf("Retained = %+v: the session was not compacted", n)
	}
}

func mib(n int64) string { return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20)) }

// typeCounts counts session id's stored events by type.
func typeCounts(t testing.TB, st store.Store, id string) map[string]int {
	t.Helper()
	evs, err := st.Events(testbin.Context(t), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, ev := range evs {
		out[string(ev.Type())]++
	}
	return out
}
