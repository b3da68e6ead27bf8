package cli

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/sim/slacksim"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/postgres"
)

// TestSlackMigrate: the Slack app's state moves with harvest store
// migrate (SQLite to PostgreSQL): the server started on the copy knows
// the mention's event (a retry of it is a delivery seen already), the
// thread (a reply there is a follow-up of the same session, and the
// finished turn's final message is not posted again) and the channel's
// default repository (a mention naming none uses it).
func TestSlackMigrate(t *testing.T) {
	url := testbin.Postgres(t)
	se := newSlackEnv(t, slacksim.Options{RetryBackoff: []time.Duration{0}})
	se.serve(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	if err := se.ss.Command(slacksim.CommandSpec{User: se.alice.ID, Channel: se.general.ID, Command: "/harvest", Text: "repo calc"}); err != nil {
		t.Fatal(err)
	}
	se.ephemeralTo(t, ctx, se.alice, "This channel's default repository is now `calc`")
	m := se.post(t, se.alice, se.mention()+" fix calc please", "")
	final := se.waitFinal(t, ctx, m.TS, 1)
	if !strings.Contains(final.Text, "Fixed calc") {
		t.Errorf("final message: %q", final.Text)
	}
	waitUntil(t, ctx, "✅ on the mention", func() bool { return slices.Contains(se.reactions(m.TS), "white_check_mark") })
	if _, err := se.ss.WaitEnvelopes(ctx); err != nil {
		t.Fatal(err)
	}
	var mention slacksim.Envelope
	for _, e := range se.ss.Envelopes() {
		if e.Topic == "app.mention" && e.State == slacksim.StateAcked {
			mention = e
		}
	}
	var ev struct {
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal(mention.Payload, &ev); err != nil || ev.EventID == "" {
		t.Fatalf("the mention's envelope: %v, %s", err, mention.Payload)
	}
	if err := se.s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := se.s.wait(); err != nil {
		t.Fatalf("harvest serve after SIGTERM: %v\n%s", err, se.s.stderr)
	}

	code, out := se.e.migrate("--from", "sqlite:"+filepath.Join(se.e.home, "harvest.db"), "--to", url)
	if code != 0 || !strings.Contains(out, "the copy verifies") {
		t.Fatalf("migrate: exit %d:\n%s", code, out)
	}
	for _, want := range []string{"copied 1 slack threads", "copied 1 slack channels"} {
		if !strings.Contains(out, want) {
			t.Errorf("migrate's output lacks %q:\n%s", want, out)
		}
	}
	// The mention's event id is in the copy, as processed.
	pg, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	err = pg.AddSlackEvent(ctx, ev.EventID, time.Time{})
	pg.Close()
	if !errors.Is(err, store.ErrConflict) {
		t.Errorf("the mention's event %s in the copy: %v; want ErrConflict (processed)", ev.EventID, err)
	}

	se.serve(t, true, "--store", url)
	if got := status(t, signed(t, se.s.url+"/v1/slack/events", se.tok.SigningSecret, time.Now(), mention.Payload, 1)); got != http.StatusOK {
		t.Errorf("a retry of the mention after the migration: %d, want 200", got)
	}
	r := se.post(t, se.alice, "msg after the migration", m.TS)
	// The second final message is the follow-up's: had the thread's
	// Shown been lost, the first turn's would be posted again.
	if final2 := se.waitFinal(t, ctx, m.TS, 2); !strings.HasPrefix(final2.Text, "ok") {
		t.Errorf("the second final message in the thread: %q; want the follow-up's", final2.Text)
	}
	waitUntil(t, ctx, "✅ on the reply", func() bool { return slices.Contains(se.reactions(r.TS), "white_check_mark") })
	m2 := se.post(t, se.alice, se.mention()+" msg: no repository named", "")
	if f := se.waitFinal(t, ctx, m2.TS, 1); !strings.HasPrefix(f.Text, "ok") {
		t.Errorf("a mention naming no repository after the migration: %q; want the channel's default used", f.Text)
	}

	pg, err = postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	ss, err := pg.ListSessions(ctx, store.SessionFilter{Owner: "slack"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 2 {
		t.Fatalf("slack sessions after the migration: %d, want 2 (the mention's, the second mention's)", len(ss))
	}
	for _, s := range ss {
		if len(s.Repos) != 1 || !strings.HasSuffix(s.Repos[0].Source, "/calc") {
			t.Errorf("session %s's repositories: %+v; want calc", s.ID, s.Repos)
		}
	}
}
