// Package storecopy copies one harvest server's state from a store to
// another (harvest store migrate: SQLite to PostgreSQL, or back) and
// verifies the copy.
//
// # What is copied, and how
//
// Through store.Store's own calls, listing on one side and creating on
// the other, wherever they keep a row as it is:
//
//   - sessions (CreateSession: every field, times included);
//   - their messages (AddMessage, in seq order: it assigns the next seq,
//     which is the source's since a session's messages are numbered 1, 2,
//     ... and never deleted one by one; Copy checks it);
//   - their events (AppendEvents: the caller gives the seqs, so they are
//     the source's);
//   - users with their identities (CreateUser, AddIdentity), before the
//     tokens that belong to them;
//   - teams with their members (CreateTeam, AddTeamMember), after the
//     users;
//   - budgets (SetQuota, their UpdatedAt kept) and each user's spend of
//     each day (AddSpend), after the users and teams, listed through
//     store.Copier (DumpQuotas, DumpSpend);
//   - the audit log (AppendAudit, oldest first: the new store numbers
//     the entries again, in the same order);
//   - API tokens (CreateToken: the SHA-256 of each secret is copied as it
//     is, so every token keeps working; the secrets themselves are not in
//     any store);
//   - environments (CreateEnvironment);
//   - web sessions that have not expired (CreateWebSession);
//   - sessions' Slack threads (PutSlackThread keeps every field, the
//     seq the thread shows and its last turn's progress message
//     included), after the sessions;
//   - the Slack event ids processed (AddSlackEvent keeps when each was
//     received, so they are pruned when they would have been): a
//     delivery Slack retries across the migration is still processed
//     once; an event not done yet is copied pending with its payload
//     (AddSlackEventPending), to be processed where it is copied to.
//
// Through store.Copier, which both stores implement, where Store has no
// call to list the rows or its writes would change them:
//
//   - webhook deliveries (AddDelivery makes a delivery pending, with no
//     attempts; LoadDelivery keeps its state, attempts and result);
//   - secrets (PutSecret makes a new secret's creation time its update
//     time). They stay sealed: the key that opens them is the server's
//     key file in its data directory, which is not in the store; the new
//     store needs the same data directory (or key file);
//   - the repositories' memory (its writes stamp every row with the
//     writer's session and the time now; LoadMemory keeps each row's);
//   - sessions' leases (AcquireLease starts epochs over at 1; LoadLease
//     keeps them, so a session's epochs never go back);
//   - Slack channels' default repositories (SetSlackChannel stamps the
//     time now; LoadSlackChannel keeps it).
//
// Not copied: locks (a sequential workflow's lock is held by a running
// server and expires by itself), nodes (a node is a running server,
// and none may run on the source while it is copied), sign-ins under
// way and Slack accounts waiting to be linked (store.SlackLink: both
// last minutes; a person asks the Slack app for a new link) and what GitHub granted to users who signed
// in with it (store.OAuthGrant: a user signs in with GitHub again, and
// the server keeps the new grant). Times are kept to
// the microsecond: PostgreSQL keeps no finer ones.
//
// # Verification
//
// After copying, Verify takes an inventory of both stores through the
// same calls and compares them: for every kind of row its count and a
// SHA-256 of the rows, and for every session a checksum of its events
// (seq, type, time, turn, agent, repo and payload JSON) and one of its
// messages, so a mismatch names the session.
//
// The source must not change while it is copied: the caller (internal/cli)
// makes sure no server runs on it. The destination must be empty: Copy
// refuses one that has anything a server keeps, rather than mix two
// servers' state.
package storecopy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// eventPage is how many events are read and appended at a time.
const eventPage = 1000

// Copy copies everything from holds (see the package doc) into to, which
// must be empty; web sessions expired at now are left out. It writes a
// line per kind of row to log as it goes. On error, to holds part of the
// copy: drop it and copy again.
func Copy(ctx context.Context, from, to store.Store, now time.Time, log io.Writer) error {
	src, ok := from.(store.Copier)
	if !ok {
		return fmt.Errorf("the source store (%T) cannot be copied: it does not implement store.Copier", from)
	}
	dst, ok := to.(store.Copier)
	if !ok {
		return fmt.Errorf("the destination store (%T) cannot be copied into: it does not implement store.Copier", to)
	}
	if err := checkEmpty(ctx, to, dst); err != nil {
		return err
	}
	steps := []struct {
		what string
		fn   func() (int, error)
	}{
		{"users", func() (int, error) { return copyUsers(ctx, from, to) }},
		{"teams", func() (int, error) { return copyTeams(ctx, from, to) }},
		{"budgets", func() (int, error) { return copyQuotas(ctx, src, to) }},
		{"days of spend", func() (int, error) { return copySpend(ctx, src, to) }},
		{"tokens", func() (int, error) { return copyTokens(ctx, from, to) }},
		{"audit entries", func() (int, error) { return copyAudit(ctx, from, to) }},
		{"sessions", func() (int, error) { return copySessions(ctx, from, to, dst) }},
		{"environments", func() (int, error) { return copyEnvironments(ctx, from, to) }},
		{"secrets", func() (int, error) { return copySecrets(ctx, from, dst) }},
		{"deliveries", func() (int, error) { return copyDeliveries(ctx, src, dst) }},
		{"web sessions", func() (int, error) { return copyWebSessions(ctx, src, to, now) }},
		{"memory scopes", func() (int, error) { return copyMemory(ctx, from, src, dst) }},
		{"slack threads", func() (int, error) { return copySlackThreads(ctx, src, to) }},
		{"slack channels", func() (int, error) { return copySlackChannels(ctx, src, dst) }},
		{"slack event ids", func() (int, error) { return copySlackEvents(ctx, src, to) }},
	}
	for _, s := range steps {
		n, err := s.fn()
		if err != nil {
			return fmt.Errorf("copying %s: %w", s.what, err)
		}
		fmt.Fprintf(log, "copied %d %s\n", n, s.what)
	}
	return nil
}

// checkEmpty refuses a destination that holds anything.
func checkEmpty(ctx context.Context, to store.Store, dst store.Copier) error {
	var has []string
	ss, err := to.ListSessions(ctx, store.SessionFilter{Limit: 1})
	if err != nil {
		return fmt.Errorf("reading the destination: %w", err)
	}
	if len(ss) > 0 {
		has = append(has, "sessions (session "+ss[0].ID+" for one)")
	}
	var errs []error
	count := func(what string, n int, err error) {
		errs = append(errs, err)
		if n > 0 {
			has = append(has, fmt.Sprintf("%d %s", n, what))
		}
	}
	toks, err := to.ListTokens(ctx)
	count("API tokens", len(toks), err)
	users, err := to.ListUsers(ctx)
	count("users", len(users), err)
	teams, err := to.ListTeams(ctx)
	count("teams", len(teams), err)
	audit, err := to.ListAudit(ctx, store.AuditFilter{Limit: 1})
	count("audit entries", len(audit), err)
	envs, err := to.ListEnvironments(ctx, store.EnvironmentFilter{})
	count("environments", len(envs), err)
	secs, err := to.ListSecrets(ctx)
	count("secrets", len(secs), err)
	dels, err := dst.DumpDeliveries(ctx)
	count("webhook deliveries", len(dels), err)
	mem, err := dst.DumpMemoryScopes(ctx)
	count("memory scopes", len(mem), err)
	quotas, err := dst.DumpQuotas(ctx)
	count("budgets", len(quotas), err)
	spend, err := dst.DumpSpend(ctx)
	count("days of spend", len(spend), err)
	sch, err := dst.DumpSlackChannels(ctx)
	count("slack channels", len(sch), err)
	sev, err := dst.DumpSlackEvents(ctx)
	count("slack event ids", len(sev), err)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("reading the destination: %w", err)
	}
	if len(has) > 0 {
		return fmt.Errorf("the destination is not empty: it already has %s; migrate into a new, empty store (a new PostgreSQL database, or a SQLite file that does not exist)", strings.Join(has, ", "))
	}
	return nil
}

func copyUsers(ctx context.Context, from, to store.Store) (int, error) {
	us, err := from.ListUsers(ctx)
	if err != nil {
		return 0, err
	}
	for _, u := range us {
		c := *u
		if err := to.CreateUser(ctx, &c); err != nil {
			return 0, err
		}
		ids, err := from.Identities(ctx, u.ID)
		if err != nil {
			return 0, err
		}
		for _, i := range ids {
			ci := *i
			if err := to.AddIdentity(ctx, &ci); err != nil {
				return 0, err
			}
		}
	}
	return len(us), nil
}

// auditPage is how many audit entries are read at a time.
const auditPage = 1000

// copyAudit copies the audit log, oldest first.
func copyAudit(ctx context.Context, from, to store.Store) (int, error) {
	var all []*store.AuditEntry
	f := store.AuditFilter{Limit: auditPage}
	for {
		es, err := from.ListAudit(ctx, f)
		if err != nil {
			return 0, err
		}
		all = append(all, es...)
		if len(es) < auditPage {
			break
		}
		f.Before = es[len(es)-1].ID
	}
	slices.Reverse(all)
	for _, e := range all {
		c := *e
		c.ID = 0
		if err := to.AppendAudit(ctx, &c); err != nil {
			return 0, err
		}
	}
	return len(all), nil
}

func copyTokens(ctx context.Context, from, to store.Store) (int, error) {
	ts, err := from.ListTokens(ctx)
	if err != nil {
		return 0, err
	}
	for _, t := range ts {
		c := *t
		if err := to.CreateToken(ctx, &c); err != nil {
			return 0, err
		}
	}
	return len(ts), nil
}

// copySessions copies the sessions, oldest first, each with its messages,
// events and lease.
func copySessions(ctx context.Context, from, to store.Store, dst store.Copier) (int, error) {
	ss, err := from.ListSessions(ctx, store.SessionFilter{})
	if err != nil {
		return 0, err
	}
	slices.Reverse(ss)
	for _, s := range ss {
		if err := copySession(ctx, from, to, dst, s); err != nil {
			return 0, fmt.Errorf("session %s: %w", s.ID, err)
		}
	}
	return len(ss), nil
}

func copySession(ctx context.Context, from, to store.Store, dst store.Copier, s *store.Session) error {
	c := *s
	if err := to.CreateSession(ctx, &c, nil); err != nil {
		return err
	}
	msgs, err := from.Messages(ctx, s.ID)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		mc := *m
		if err := to.AddMessage(ctx, &mc); err != nil {
			return fmt.Errorf("message %s: %w", m.ID, err)
		}
		if mc.Seq != m.Seq {
			return fmt.Errorf("message %s has seq %d in the source but got %d: the source's messages are not numbered 1, 2, ...", m.ID, m.Seq, mc.Seq)
		}
	}
	for after := int64(0); ; {
		evs, err := from.Events(ctx, s.ID, after, eventPage)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			break
		}
		if err := to.AppendEvents(ctx, evs); err != nil {
			return fmt.Errorf("events after seq %d: %w", after, err)
		}
		after = evs[len(evs)-1].Seq
	}
	l, err := from.GetLease(ctx, s.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return dst.LoadLease(ctx, l)
}

func copyEnvironments(ctx context.Context, from, to store.Store) (int, error) {
	es, err := from.ListEnvironments(ctx, store.EnvironmentFilter{})
	if err != nil {
		return 0, err
	}
	for _, e := range es {
		c := *e
		if err := to.CreateEnvironment(ctx, &c); err != nil {
			return 0, err
		}
	}
	return len(es), nil
}

func copySecrets(ctx context.Context, from store.Store, dst store.Copier) (int, error) {
	xs, err := from.ListSecrets(ctx)
	if err != nil {
		return 0, err
	}
	for _, x := range xs {
		if err := dst.LoadSecret(ctx, x); err != nil {
			return 0, err
		}
	}
	return len(xs), nil
}

func copyDeliveries(ctx context.Context, src, dst store.Copier) (int, error) {
	ds, err := src.DumpDeliveries(ctx)
	if err != nil {
		return 0, err
	}
	for _, d := range ds {
		if err := dst.LoadDelivery(ctx, d); err != nil {
			return 0, err
		}
	}
	return len(ds), nil
}

// liveWebSessions are the web sessions not expired at now, oldest first
// (so CreateWebSession's pruning of expired ones removes none of them).
func liveWebSessions(ctx context.Context, src store.Copier, now time.Time) ([]*store.WebSession, error) {
	ws, err := src.DumpWebSessions(ctx)
	if err != nil {
		return nil, err
	}
	ws = slices.DeleteFunc(ws, func(w *store.WebSession) bool { return !w.ExpiresAt.After(now) })
	slices.SortStableFunc(ws, func(a, b *store.WebSession) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return ws, nil
}

func copyWebSessions(ctx context.Context, src store.Copier, to store.Store, now time.Time) (int, error) {
	ws, err := liveWebSessions(ctx, src, now)
	if err != nil {
		return 0, err
	}
	for _, w := range ws {
		c := *w
		if err := to.CreateWebSession(ctx, &c); err != nil {
			return 0, err
		}
	}
	return len(ws), nil
}

func copyMemory(ctx context.Context, from store.Store, src, dst store.Copier) (int, error) {
	scopes, err := src.DumpMemoryScopes(ctx)
	if err != nil {
		return 0, err
	}
	for _, sc := range scopes {
		g, err := from.ReadMemory(ctx, sc.Scope, store.MemoryQuery{})
		if err != nil {
			return 0, err
		}
		if err := dst.LoadMemory(ctx, sc.Scope, g, sc.Seeded); err != nil {
			return 0, err
		}
	}
	return len(scopes), nil
}

func copySlackThreads(ctx context.Context, src store.Copier, to store.Store) (int, error) {
	ts, err := src.DumpSlackThreads(ctx)
	if err != nil {
		return 0, err
	}
	for _, t := range ts {
		c := *t
		if err := to.PutSlackThread(ctx, &c); err != nil {
			return 0, err
		}
	}
	return len(ts), nil
}

func copySlackChannels(ctx context.Context, src, dst store.Copier) (int, error) {
	cs, err := src.DumpSlackChannels(ctx)
	if err != nil {
		return 0, err
	}
	for _, c := range cs {
		if err := dst.LoadSlackChannel(ctx, c); err != nil {
			return 0, err
		}
	}
	return len(cs), nil
}

func copySlackEvents(ctx context.Context, src store.Copier, to store.Store) (int, error) {
	es, err := src.DumpSlackEvents(ctx)
	if err != nil {
		return 0, err
	}
	for _, e := range es {
		var err error
		if e.Payload != nil { // pending: processed where it is copied to
			err = to.AddSlackEventPending(ctx, e.ID, e.Payload, e.ReceivedAt)
		} else {
			err = to.AddSlackEvent(ctx, e.ID, e.ReceivedAt)
		}
		if err != nil {
			return 0, fmt.Errorf("event %s: %w", e.ID, err)
		}
	}
	return len(es), nil
}
