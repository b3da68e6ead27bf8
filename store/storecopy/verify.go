package storecopy

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// Kinds of rows an Inventory counts, in the order a Report lists them.
var kinds = []string{
	"sessions", "messages", "events", "leases", "users", "identities", "teams", "team members", "budgets", "days of spend", "tokens", "audit entries", "environments", "secrets",
	"deliveries", "web sessions", "memory scopes seeded", "memory entities",
	"memory observations", "memory relations", "slack threads", "slack channels", "slack event ids",
}

// Tally is a count of rows and a SHA-256 of them (in a fixed order, times
// to the microsecond).
type Tally struct {
	N   int
	Sum string // hex
}

// Inventory is what Verify compares: a Tally per kind of row, and per
// session one of its events and one of its messages.
type Inventory struct {
	Kinds    map[string]Tally
	Sessions map[string]SessionTally
}

// SessionTally is a session's events and messages.
type SessionTally struct{ Events, Messages Tally }

// tally hashes rows one at a time.
type tally struct {
	n int
	h hash.Hash
}

func newTally() *tally { return &tally{h: sha256.New()} }

// add hashes one row: the JSON of v, then the raw bytes Store keeps out
// of its JSON (hashes, ciphertexts, payloads), each with its length.
func (t *tally) add(v any, raw ...[]byte) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	t.n++
	for _, p := range append([][]byte{b}, raw...) {
		t.h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(p))))
		t.h.Write(p)
	}
	return nil
}

func (t *tally) done() Tally { return Tally{N: t.n, Sum: hex.EncodeToString(t.h.Sum(nil))} }

// us is t in UTC to the microsecond: what both stores keep.
func us(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Microsecond)
}

// Take takes st's inventory; web sessions expired at now are left out
// (Copy does not copy them).
func Take(ctx context.Context, st store.Store, now time.Time) (*Inventory, error) {
	cp, ok := st.(store.Copier)
	if !ok {
		return nil, fmt.Errorf("the store (%T) does not implement store.Copier", st)
	}
	inv := &Inventory{Kinds: map[string]Tally{}, Sessions: map[string]SessionTally{}}
	t := map[string]*tally{}
	for _, k := range kinds {
		t[k] = newTally()
	}
	ss, err := st.ListSessions(ctx, store.SessionFilter{})
	if err != nil {
		return nil, fmt.Errorf("sessions: %w", err)
	}
	slices.SortFunc(ss, func(a, b *store.Session) int { return strings.Compare(a.ID, b.ID) })
	for _, s := range ss {
		st, err := takeSession(ctx, st, s, t)
		if err != nil {
			return nil, fmt.Errorf("session %s: %w", s.ID, err)
		}
		inv.Sessions[s.ID] = st
	}
	for _, step := range []func() error{
		func() error { return takeUsers(ctx, st, t["users"], t["identities"]) },
		func() error { return takeTeams(ctx, st, t["teams"], t["team members"]) },
		func() error { return takeQuotas(ctx, cp, t["budgets"], t["days of spend"]) },
		func() error { return takeTokens(ctx, st, t["tokens"]) },
		func() error { return takeAudit(ctx, st, t["audit entries"]) },
		func() error { return takeEnvironments(ctx, st, t["environments"]) },
		func() error { return takeSecrets(ctx, st, t["secrets"]) },
		func() error { return takeDeliveries(ctx, cp, t["deliveries"]) },
		func() error { return takeWebSessions(ctx, cp, now, t["web sessions"]) },
		func() error { return takeMemory(ctx, st, cp, t) },
		func() error { return takeSlack(ctx, cp, t) },
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	for k, v := range t {
		inv.Kinds[k] = v.done()
	}
	return inv, nil
}

func takeSession(ctx context.Context, st store.Store, s *store.Session, t map[string]*tally) (SessionTally, error) {
	c := *s
	c.CreatedAt, c.UpdatedAt, c.ActiveAt = us(c.CreatedAt), us(c.UpdatedAt), us(c.ActiveAt)
	if err := t["sessions"].add(c, c.AgentState); err != nil {
		return SessionTally{}, err
	}
	evs, msgs := newTally(), newTally()
	for after := int64(0); ; {
		page, err := st.Events(ctx, s.ID, after, eventPage)
		if err != nil {
			return SessionTally{}, fmt.Errorf("events: %w", err)
		}
		if len(page) == 0 {
			break
		}
		for _, ev := range page {
			ev.Time = us(ev.Time)
			if err := evs.add(ev); err != nil {
				return SessionTally{}, fmt.Errorf("event %d: %w", ev.Seq, err)
			}
			if err := t["events"].add(ev); err != nil {
				return SessionTally{}, err
			}
		}
		after = page[len(page)-1].Seq
	}
	ms, err := st.Messages(ctx, s.ID)
	if err != nil {
		return SessionTally{}, fmt.Errorf("messages: %w", err)
	}
	for _, m := range ms {
		c := *m
		c.CreatedAt, c.DeliveredAt = us(c.CreatedAt), us(c.DeliveredAt)
		raw := [][]byte{[]byte(c.Key), []byte(c.KeyOwner), c.RequestHash}
		if err := msgs.add(c, raw...); err != nil {
			return SessionTally{}, err
		}
		if err := t["messages"].add(c, raw...); err != nil {
			return SessionTally{}, err
		}
	}
	l, err := st.GetLease(ctx, s.ID)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return SessionTally{}, fmt.Errorf("lease: %w", err)
	default:
		// Its expiry is its node's heartbeat's, and nodes are not copied
		// (store.Copier's LoadLease): compared are node, epoch and
		// generation.
		l.Expires = time.Time{}
		if err := t["leases"].add(l); err != nil {
			return SessionTally{}, err
		}
	}
	return SessionTally{Events: evs.done(), Messages: msgs.done()}, nil
}

func takeTokens(ctx context.Context, st store.Store, t *tally) error {
	ts, err := st.ListTokens(ctx)
	if err != nil {
		return fmt.Errorf("tokens: %w", err)
	}
	slices.SortFunc(ts, func(a, b *store.Token) int { return strings.Compare(a.ID, b.ID) })
	for _, tok := range ts {
		c := *tok
		c.CreatedAt = us(c.CreatedAt)
		if err := t.add(c, c.Hash); err != nil {
			return err
		}
	}
	return nil
}

func takeUsers(ctx context.Context, st store.Store, users, idents *tally) error {
	list, err := st.ListUsers(ctx)
	if err != nil {
		return fmt.Errorf("users: %w", err)
	}
	slices.SortFunc(list, func(a, b *store.User) int { return strings.Compare(a.ID, b.ID) })
	for _, u := range list {
		c := *u
		c.CreatedAt = us(c.CreatedAt)
		if err := users.add(c); err != nil {
			return err
		}
		ids, err := st.Identities(ctx, u.ID)
		if err != nil {
			return fmt.Errorf("identities of %s: %w", u.ID, err)
		}
		for _, i := range ids {
			ci := *i
			ci.CreatedAt = us(ci.CreatedAt)
			if err := idents.add(ci); err != nil {
				return err
			}
		}
	}
	return nil
}

// takeAudit tallies the audit log in its order, without the ids (a copy
// numbers its entries again) and with its details compacted (PostgreSQL
// keeps them as jsonb, which normalizes the text).
func takeAudit(ctx context.Context, st store.Store, t *tally) error {
	f := store.AuditFilter{Limit: 1000}
	for {
		es, err := st.ListAudit(ctx, f)
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		for _, e := range es {
			c := *e
			c.ID, c.Time = 0, us(c.Time)
			if len(c.Detail) > 0 {
				var v any
				if err := json.Unmarshal(c.Detail, &v); err != nil {
					return fmt.Errorf("audit entry %d: %w", e.ID, err)
				}
				c.Detail, _ = json.Marshal(v)
			}
			if err := t.add(c); err != nil {
				return err
			}
		}
		if len(es) < f.Limit {
			return nil
		}
		f.Before = es[len(es)-1].ID
	}
}

func takeEnvironments(ctx context.Context, st store.Store, t *tally) error {
	es, err := st.ListEnvironments(ctx, store.EnvironmentFilter{})
	if err != nil {
		return fmt.Errorf("environments: %w", err)
	}
	slices.SortFunc(es, func(a, b *store.Environment) int { return strings.Compare(a.ID, b.ID) })
	for _, e := range es {
		c := *e
		c.CreatedAt, c.BuiltAt = us(c.CreatedAt), us(c.BuiltAt)
		if err := t.add(c); err != nil {
			return err
		}
	}
	return nil
}

func takeSecrets(ctx context.Context, st store.Store, t *tally) error {
	xs, err := st.ListSecrets(ctx)
	if err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	slices.SortFunc(xs, func(a, b *store.Secret) int {
		return strings.Compare(a.Scope+"\x00"+a.Name, b.Scope+"\x00"+b.Name)
	})
	for _, x := range xs {
		c := *x
		c.CreatedAt, c.UpdatedAt = us(c.CreatedAt), us(c.UpdatedAt)
		if err := t.add(c, c.Ciphertext); err != nil {
			return err
		}
	}
	return nil
}

func takeDeliveries(ctx context.Context, cp store.Copier, t *tally) error {
	ds, err := cp.DumpDeliveries(ctx)
	if err != nil {
		return fmt.Errorf("deliveries: %w", err)
	}
	slices.SortFunc(ds, func(a, b *store.Delivery) int { return strings.Compare(a.ID, b.ID) })
	for _, d := range ds {
		c := *d
		c.ReceivedAt, c.DoneAt = us(c.ReceivedAt), us(c.DoneAt)
		if err := t.add(c, c.Payload); err != nil {
			return err
		}
	}
	return nil
}

func takeWebSessions(ctx context.Context, cp store.Copier, now time.Time, t *tally) error {
	ws, err := liveWebSessions(ctx, cp, now)
	if err != nil {
		return fmt.Errorf("web sessions: %w", err)
	}
	slices.SortFunc(ws, func(a, b *store.WebSession) int { return strings.Compare(string(a.Hash), string(b.Hash)) })
	for _, w := range ws {
		c := *w
		c.CreatedAt, c.ExpiresAt = us(c.CreatedAt), us(c.ExpiresAt)
		if err := t.add(c); err != nil {
			return err
		}
	}
	return nil
}

func takeMemory(ctx context.Context, st store.Store, cp store.Copier, t map[string]*tally) error {
	scopes, err := cp.DumpMemoryScopes(ctx)
	if err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	slices.SortFunc(scopes, func(a, b store.MemoryScopeInfo) int {
		return strings.Compare(a.Scope.Repo+"\x00"+a.Scope.Owner, b.Scope.Repo+"\x00"+b.Scope.Owner)
	})
	for _, sc := range scopes {
		if !sc.Seeded.IsZero() {
			if err := t["memory scopes seeded"].add(store.MemoryScopeInfo{Scope: sc.Scope, Seeded: us(sc.Seeded)}); err != nil {
				return err
			}
		}
		g, err := st.ReadMemory(ctx, sc.Scope, store.MemoryQuery{})
		if err != nil {
			return fmt.Errorf("memory %s/%s: %w", sc.Scope.Repo, sc.Scope.Owner, err)
		}
		for _, e := range g.Entities {
			if err := t["memory entities"].add([]any{sc.Scope, e.Name, e.Type, e.Session, e.Turn, us(e.CreatedAt)}); err != nil {
				return err
			}
			for _, o := range e.Observations {
				if err := t["memory observations"].add([]any{sc.Scope, e.Name, o.Text, o.Session, o.Turn, us(o.CreatedAt)}); err != nil {
					return err
				}
			}
		}
		for _, r := range g.Relations {
			c := *r
			c.CreatedAt = us(c.CreatedAt)
			if err := t["memory relations"].add([]any{sc.Scope, c}); err != nil {
				return err
			}
		}
	}
	return nil
}

// takeSlack tallies the Slack threads, channels and event ids, in the
// order the dumps list them (by key).
func takeSlack(ctx context.Context, cp store.Copier, t map[string]*tally) error {
	ts, err := cp.DumpSlackThreads(ctx)
	if err != nil {
		return fmt.Errorf("slack threads: %w", err)
	}
	for _, th := range ts {
		c := *th
		c.CreatedAt = us(c.CreatedAt)
		if err := t["slack threads"].add(c); err != nil {
			return err
		}
	}
	cs, err := cp.DumpSlackChannels(ctx)
	if err != nil {
		return fmt.Errorf("slack channels: %w", err)
	}
	for _, ch := range cs {
		c := *ch
		c.UpdatedAt = us(c.UpdatedAt)
		if err := t["slack channels"].add(c); err != nil {
			return err
		}
	}
	es, err := cp.DumpSlackEvents(ctx)
	if err != nil {
		return fmt.Errorf("slack event ids: %w", err)
	}
	for _, e := range es {
		e.ReceivedAt = us(e.ReceivedAt)
		if err := t["slack event ids"].add(e); err != nil {
			return err
		}
	}
	return nil
}

// Report compares two inventories.
type Report struct {
	From, To *Inventory
	// Sessions lists what differs in sessions' events and messages, one
	// line each ("session ID: events: ...").
	Sessions []string
}

// Compare compares the source's inventory with the destination's.
func Compare(from, to *Inventory) *Report {
	r := &Report{From: from, To: to}
	ids := map[string]bool{}
	for id := range from.Sessions {
		ids[id] = true
	}
	for id := range to.Sessions {
		ids[id] = true
	}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		f, inF := from.Sessions[id]
		d, inD := to.Sessions[id]
		switch {
		case !inD:
			r.Sessions = append(r.Sessions, "session "+id+": missing from the destination")
		case !inF:
			r.Sessions = append(r.Sessions, "session "+id+": in the destination only")
		default:
			if f.Events != d.Events {
				r.Sessions = append(r.Sessions, fmt.Sprintf("session %s: events differ (%d, sha256 %.12s in the source; %d, %.12s in the destination)", id, f.Events.N, f.Events.Sum, d.Events.N, d.Events.Sum))
			}
			if f.Messages != d.Messages {
				r.Sessions = append(r.Sessions, fmt.Sprintf("session %s: messages differ (%d, sha256 %.12s in the source; %d, %.12s in the destination)", id, f.Messages.N, f.Messages.Sum, d.Messages.N, d.Messages.Sum))
			}
		}
	}
	return r
}

// OK reports whether the two stores hold the same.
func (r *Report) OK() bool {
	if len(r.Sessions) > 0 {
		return false
	}
	for _, k := range kinds {
		if r.From.Kinds[k] != r.To.Kinds[k] {
			return false
		}
	}
	return true
}

// Print writes the summary: a line per kind of row (counts on both sides,
// whether their checksums match), then what differs per session.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "%-22s %10s %12s  %s\n", "", "source", "destination", "sha256")
	for _, k := range kinds {
		f, d := r.From.Kinds[k], r.To.Kinds[k]
		verdict := "same " + f.Sum[:12]
		if f != d {
			verdict = "DIFFERENT"
		}
		fmt.Fprintf(w, "%-22s %10d %12d  %s\n", k, f.N, d.N, verdict)
	}
	fmt.Fprintf(w, "per session: %d sessions' events and messages compared, %d differ\n", len(r.From.Sessions), len(r.Sessions))
	for _, s := range r.Sessions {
		fmt.Fprintln(w, "  "+s)
	}
}
