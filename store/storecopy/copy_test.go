package storecopy_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/postgres"
	"github.com/harvest-dev/harvest/store/sqlite"
	"github.com/harvest-dev/harvest/store/storecopy"
)

func openSQLite(t *testing.T) store.Store {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func openPostgres(t *testing.T) store.Store {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := postgres.Open(ctx, testbin.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// fill writes one of every kind of row a server keeps, with times at
// nanoseconds where the store keeps them, through the calls a server makes.
func fill(t *testing.T, st store.Store) {
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	base := time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)
	must(st.CreateToken(ctx, &store.Token{ID: "tok1", Name: "admin", Hash: []byte("0123456789abcdef0123456789abcdef"), Admin: true, CreatedAt: base}))
	must(st.CreateUser(ctx, &store.User{ID: "usr-ann", Name: "Ann", Role: store.RoleViewer, CreatedAt: base}))
	must(st.AddIdentity(ctx, &store.Identity{User: "usr-ann", Kind: store.IdentityGitHub, Subject: "9", Login: "ann", CreatedAt: base}))
	must(st.CreateTeam(ctx, &store.Team{Name: "qa", CreatedAt: base}))
	must(st.AddTeamMember(ctx, "qa", "usr-ann"))
	must(st.SetQuota(ctx, &store.Quota{Scope: store.QuotaUser, Subject: "usr-ann", DailyUSD: 2.5, MaxSessions: 2, UpdatedAt: base}))
	must(st.SetQuota(ctx, &store.Quota{Scope: store.QuotaTeam, Subject: "qa", DailyUSD: 10, UpdatedAt: base}))
	must(st.AddSpend(ctx, "usr-ann", store.Day(base), 0.125))
	must(st.AddSpend(ctx, "usr-ann", store.Day(base.Add(24*time.Hour)), 1.5))
	must(st.CreateToken(ctx, &store.Token{ID: "tok2", Name: "ann's", Hash: []byte("fedcba9876543210fedcba9876543210"), User: "usr-ann", CreatedAt: base}))
	must(st.AppendAudit(ctx, &store.AuditEntry{Time: base, User: "usr-ann", Channel: store.ChannelAPI, Action: "session.create", Target: "s1", Result: store.AuditOK, Detail: []byte(`{"b": 1, "a": [2]}`)}))
	must(st.AppendAudit(ctx, &store.AuditEntry{Time: base.Add(time.Second), Channel: store.ChannelGitHub, Action: "github.refuse", Result: "forbidden"}))
	for i, id := range []string{"s1", "s2"} {
		at := base.Add(time.Duration(i) * time.Minute)
		must(st.CreateSession(ctx, &store.Session{ID: id, Owner: "tok1", State: store.StateIdle, Agent: "builtin", Backend: "local",
			Repos: []store.Repo{{Name: "api", Source: "/src/api"}}, Mode: "queue", AgentState: []byte("conversation"),
			CreatedAt: at, UpdatedAt: at, ActiveAt: at}, &store.Message{ID: id + "-m1", Text: "hello", Mode: "queue", CreatedAt: at}))
		must(st.AppendEventsWith(ctx, []event.Event{
			{Session: id, Seq: 1, Time: at, Data: event.SessionState{State: "idle", Reason: "created"}},
			{Session: id, Seq: 2, Time: at, Data: event.MessageQueued{MessageID: id + "-m2", Text: "again", Mode: "queue", Position: 1}},
			{Session: id, Seq: 3, Time: at, Turn: "t1", Data: event.TerminalOutput{Data: []byte{0, 1, 0xff}}},
		}, []*store.Message{{ID: id + "-m2", Session: id, Text: "again", Mode: "queue", Key: "k", KeyOwner: "tok1", RequestHash: []byte{1, 2}, CreatedAt: at}}))
		must(st.SetMessageState(ctx, id, id+"-m1", store.MessageDelivered, "t1"))
	}
	l, err := st.AcquireLease(ctx, "s1", "node-a", time.Minute)
	must(err)
	must(st.ReleaseLease(ctx, l))
	_, err = st.AcquireLease(ctx, "s1", "node-b", time.Minute)
	must(err)
	must(st.CreateEnvironment(ctx, &store.Environment{ID: "env1", Repo: "api", Name: "api", Fingerprint: "f", Backend: "local", State: store.EnvReady, CreatedAt: base}))
	must(st.PutSecret(ctx, &store.Secret{Scope: "repo:o/api", Name: "TOKEN", Ciphertext: []byte("sealed"), KeyID: "k1", SetBy: "tok1", UpdatedAt: base}))
	must(st.PutSecret(ctx, &store.Secret{Scope: "repo:o/api", Name: "TOKEN", Ciphertext: []byte("sealed2"), KeyID: "k1", SetBy: "tok1", UpdatedAt: base.Add(time.Hour)}))
	must(st.AddDelivery(ctx, &store.Delivery{ID: "d1", Event: "issues", Payload: []byte(`{"a":1}`), ReceivedAt: base}))
	_, err = st.BeginDelivery(ctx, "d1")
	must(err)
	must(st.FinishDelivery(ctx, "d1", store.DeliveryDone, "started s1"))
	must(st.CreateWebSession(ctx, &store.WebSession{Hash: []byte("websession"), TokenID: "tok1", ExpiresAt: time.Now().Add(time.Hour)}))
	sc := store.MemoryScope{Repo: "github.com/o/api"}
	_, err = st.SeedMemory(ctx, sc, []*store.MemoryEntity{{Name: "api", Type: "service", Observations: []*store.MemoryObservation{{Text: "written in Go"}}}}, store.MemoryWrite{Session: "s1", Turn: 1})
	must(err)
	_, err = st.CreateMemoryEntities(ctx, store.MemoryScope{Repo: "github.com/o/api", Owner: "tok1"}, []*store.MemoryEntity{{Name: "db", Type: "store"}, {Name: "cache", Type: "store"}}, store.MemoryWrite{Session: "s2", Turn: 3})
	must(err)
	_, err = st.CreateMemoryRelations(ctx, store.MemoryScope{Repo: "github.com/o/api", Owner: "tok1"}, []*store.MemoryRelation{{From: "cache", To: "db", Type: "fronts"}}, store.MemoryWrite{Session: "s2", Turn: 3})
	must(err)
	_, err = st.AddMemoryObservations(ctx, sc, "api", []string{"has a REST API", "uses PostgreSQL"}, store.MemoryWrite{Session: "s2", Turn: 1})
	must(err)
	must(st.PutSlackThread(ctx, &store.SlackThread{Session: "s1", Team: "T1", Channel: "C1", ThreadTS: "1700000000.000100", User: "U1", CreatedAt: base}))
	must(st.SetSlackThreadShown(ctx, "s1", 3))
	must(st.SetSlackThreadTurn(ctx, "s1", "t-2", "1700000000.000300", "1700000000.000250"))
	must(st.PutSlackThread(ctx, &store.SlackThread{Session: "s2", Team: "T1", Channel: "C2", ThreadTS: "1700000000.000200", CreatedAt: base.Add(time.Minute)}))
	must(st.SetSlackChannel(ctx, &store.SlackChannel{Team: "T1", Channel: "C1", Repo: "o/api", SetBy: "usr-ann"}))
	must(st.AddSlackEvent(ctx, "Ev1", base))
	must(st.AddSlackEvent(ctx, "Ev2", base.Add(time.Second)))
	must(st.AddSlackEventPending(ctx, "Ev3", []byte(`{"event":"Ev3"}`), base.Add(2*time.Second)))
}

// TestCopy copies a store that has every kind of row to an empty store of
// the other kind, and the copy verifies: same counts, same checksums.
func TestCopy(t *testing.T) {
	for _, c := range []struct {
		name     string
		from, to func(*testing.T) store.Store
	}{
		{"sqlite to postgres", openSQLite, openPostgres},
		{"postgres to sqlite", openPostgres, openSQLite},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			from, to := c.from(t), c.to(t)
			fill(t, from)
			now := time.Now()
			var log bytes.Buffer
			if err := storecopy.Copy(ctx, from, to, now, &log); err != nil {
				t.Fatalf("Copy: %v\n%s", err, &log)
			}
			fi, err := storecopy.Take(ctx, from, now)
			if err != nil {
				t.Fatal(err)
			}
			ti, err := storecopy.Take(ctx, to, now)
			if err != nil {
				t.Fatal(err)
			}
			r := storecopy.Compare(fi, ti)
			var sum bytes.Buffer
			r.Print(&sum)
			if !r.OK() {
				t.Fatalf("the copy differs:\n%s", &sum)
			}
			for k, v := range fi.Kinds {
				if v.N == 0 {
					t.Errorf("the test wrote no %s: it checks nothing of them\n%s", k, &sum)
				}
			}
			l, err := to.GetLease(ctx, "s1")
			if err != nil || l.Epoch != 2 || l.Node != "node-b" {
				t.Errorf("lease of s1 in the copy: %+v, %v; want node-b's at epoch 2", l, err)
			}
			// The copy works as a store: the sessions go on at their seqs.
			if err := to.AddMessage(ctx, &store.Message{ID: "s1-m3", Session: "s1", Text: "more"}); err != nil {
				t.Error(err)
			}
			if n, err := to.LastSeq(ctx, "s2"); err != nil || n != 3 {
				t.Errorf("LastSeq(s2) in the copy = %d, %v; want 3", n, err)
			}
			// The Slack app goes on: s1's thread shows up to seq 3, C1's
			// default holds, and Ev1 is a delivery seen already.
			if th, err := to.SlackThread(ctx, "s1"); err != nil || th.Shown != 3 || th.ThreadTS != "1700000000.000100" || th.User != "U1" ||
				th.Turn != "t-2" || th.ProgressTS != "1700000000.000300" || th.TriggerTS != "1700000000.000250" {
				t.Errorf("slack thread of s1 in the copy: %+v, %v; want ts 1700000000.000100 by U1, shown 3", th, err)
			}
			if ch, err := to.SlackChannel(ctx, "T1", "C1"); err != nil || ch.Repo != "o/api" {
				t.Errorf("slack channel C1 in the copy: %+v, %v; want o/api", ch, err)
			}
			if err := to.AddSlackEvent(ctx, "Ev1", time.Time{}); !errors.Is(err, store.ErrConflict) {
				t.Errorf("AddSlackEvent(Ev1) on the copy: %v; want ErrConflict (copied as processed)", err)
			}
			if ps, err := to.PendingSlackEvents(ctx); err != nil || len(ps) != 1 || ps[0].ID != "Ev3" || string(ps[0].Payload) != `{"event":"Ev3"}` {
				t.Errorf("the pending Slack events of the copy: %+v, %v; want Ev3 with its payload", ps, err)
			}

			// A second copy into it is refused, saying what it has; and a
			// difference is found.
			err = storecopy.Copy(ctx, from, to, now, &log)
			if err == nil || !strings.Contains(err.Error(), "not empty") || !strings.Contains(err.Error(), "sessions") {
				t.Errorf("a copy into a store with sessions: %v; want it refused", err)
			}
			ti, err = storecopy.Take(ctx, to, now)
			if err != nil {
				t.Fatal(err)
			}
			if r := storecopy.Compare(fi, ti); r.OK() || len(r.Sessions) != 1 || !strings.Contains(r.Sessions[0], "session s1: messages differ") {
				t.Errorf("after a message added to s1, the comparison says OK=%v, %q", r.OK(), r.Sessions)
			}
		})
	}
}
