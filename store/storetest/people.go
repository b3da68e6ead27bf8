package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// testPeople: users are stored, listed and updated (a bad role or a
// changed id refused); a token made without a user becomes a user of its
// own (an admin's an admin), one made for a user carries the user's role
// and disabled, and a node's token has none; identities find their user
// once, and UserForIdentity creates a user only the first time.
func testPeople(t *testing.T, open func(t *testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	h := func(s string) []byte { x := sha256.Sum256([]byte(s)); return x[:] }

	alice := &store.User{ID: "usr-alice", Name: "Alice", Role: store.RoleMember, CreatedAt: base}
	if err := st.CreateUser(ctx, alice); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateUser(ctx, &store.User{ID: "usr-alice", Name: "Again", Role: store.RoleMember}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateUser with an id that exists: %v, want ErrConflict", err)
	}
	for _, bad := range []*store.User{{ID: "usr-x", Name: "X", Role: "root"}, {ID: "alice", Name: "X", Role: store.RoleMember}, {ID: "usr-y", Role: store.RoleMember}} {
		if err := st.CreateUser(ctx, bad); err == nil {
			t.Errorf("CreateUser(%+v) stored a user that is not valid", bad)
		}
	}
	if u, err := st.GetUser(ctx, "usr-alice"); err != nil || u.Name != "Alice" || u.Role != store.RoleMember || u.Disabled || !u.CreatedAt.Equal(base) {
		t.Errorf("GetUser = %+v, %v", u, err)
	}
	if _, err := st.GetUser(ctx, "usr-nobody"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetUser(unknown): %v, want ErrNotFound", err)
	}

	// Tokens: one of a user's, one of its own, an admin's of its own, a node's.
	mine := &store.Token{ID: "tok-a1", Name: "laptop", Hash: h("a1"), User: "usr-alice", CreatedAt: base.Add(time.Second)}
	ci := &store.Token{ID: "tok-c1", Name: "ci", Hash: h("c1"), CreatedAt: base.Add(2 * time.Second)}
	root := &store.Token{ID: "tok-r1", Name: "admin", Hash: h("r1"), Admin: true, CreatedAt: base.Add(3 * time.Second)}
	node := &store.Token{ID: "tok-n1", Name: store.NodeTokenPrefix + "n1", Hash: h("n1"), Admin: true, CreatedAt: base.Add(4 * time.Second)}
	for _, tok := range []*store.Token{mine, ci, root, node} {
		if err := st.CreateToken(ctx, tok); err != nil {
			t.Fatalf("CreateToken(%s): %v", tok.ID, err)
		}
	}
	if err := st.CreateToken(ctx, &store.Token{ID: "tok-x", Name: "x", Hash: h("x"), User: "usr-nobody"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CreateToken for a user that does not exist: %v, want ErrNotFound", err)
	}
	if mine.User != "usr-alice" || mine.Role != store.RoleMember || ci.User != store.UserIDForToken("tok-c1") || ci.User != "usr-c1" || root.User != "usr-r1" || node.User != "" {
		t.Errorf("tokens' users: %q (%s) %q %q %q", mine.User, mine.Role, ci.User, root.User, node.User)
	}
	for _, want := range []struct {
		id   string
		name string
		role store.Role
	}{{"usr-c1", "ci", store.RoleMember}, {"usr-r1", "admin", store.RoleAdmin}} {
		u, err := st.GetUser(ctx, want.id)
		if err != nil || u.Name != want.name || u.Role != want.role {
			t.Errorf("the user a token became: %+v, %v; want %s %s", u, err, want.name, want.role)
		}
	}
	users, err := st.ListUsers(ctx)
	if err != nil || len(users) != 3 || users[0].ID != "usr-alice" || users[1].ID != "usr-c1" || users[2].ID != "usr-r1" {
		t.Errorf("ListUsers = %v, %v; want alice, c1, r1 (oldest first; a node's token is no one)", users, err)
	}
	if tok, err := st.TokenByHash(ctx, h("n1")); err != nil || tok.User != "" || tok.Role != "" || tok.Disabled {
		t.Errorf("a node's token: %+v, %v; want no user", tok, err)
	}
	if ts, err := st.UserTokens(ctx, "usr-alice"); err != nil || len(ts) != 1 || ts[0].ID != "tok-a1" {
		t.Errorf("UserTokens(alice) = %v, %v", ts, err)
	}

	// Disabling and a new role show on the token at once.
	u, err := st.UpdateUser(ctx, "usr-alice", func(u *store.User) error { u.Disabled, u.Role = true, store.RoleViewer; return nil })
	if err != nil || !u.Disabled || u.Role != store.RoleViewer {
		t.Fatalf("UpdateUser = %+v, %v", u, err)
	}
	if tok, err := st.TokenByHash(ctx, h("a1")); err != nil || !tok.Disabled || tok.Role != store.RoleViewer || tok.User != "usr-alice" {
		t.Errorf("the token of a disabled viewer: %+v, %v", tok, err)
	}
	if _, err := st.UpdateUser(ctx, "usr-alice", func(u *store.User) error { u.Role = "boss"; return nil }); err == nil {
		t.Error("UpdateUser stored a role that is not one")
	}
	if _, err := st.UpdateUser(ctx, "usr-alice", func(u *store.User) error { u.ID = "usr-bob"; return nil }); err == nil {
		t.Error("UpdateUser changed an id")
	}
	boom := errors.New("boom")
	if _, err := st.UpdateUser(ctx, "usr-alice", func(u *store.User) error { u.Name = "X"; return boom }); !errors.Is(err, boom) {
		t.Errorf("UpdateUser whose fn fails: %v", err)
	}
	if _, err := st.UpdateUser(ctx, "usr-nobody", func(*store.User) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateUser(unknown): %v, want ErrNotFound", err)
	}
	if u, _ := st.GetUser(ctx, "usr-alice"); u.Name != "Alice" || u.Role != store.RoleViewer {
		t.Errorf("after refused updates: %+v", u)
	}
	// The user outlives the token.
	if err := st.DeleteToken(ctx, "tok-a1"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetUser(ctx, "usr-alice"); err != nil {
		t.Errorf("a user whose token was deleted: %v", err)
	}

	// Identities.
	gh := &store.Identity{User: "usr-alice", Kind: store.IdentityGitHub, Subject: "42", Login: "alice"}
	if err := st.AddIdentity(ctx, gh); err != nil {
		t.Fatal(err)
	}
	if err := st.AddIdentity(ctx, &store.Identity{User: "usr-c1", Kind: store.IdentityGitHub, Subject: "42"}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("an identity that is someone's: %v, want ErrConflict", err)
	}
	if err := st.AddIdentity(ctx, &store.Identity{User: "usr-nobody", Kind: store.IdentityOIDC, Issuer: "https://id", Subject: "x"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an identity of no user: %v, want ErrNotFound", err)
	}
	if err := st.AddIdentity(ctx, &store.Identity{User: "usr-alice", Kind: "myspace", Subject: "x"}); err == nil {
		t.Error("an identity of an unknown kind was stored")
	}
	oidc := &store.Identity{User: "usr-alice", Kind: store.IdentityOIDC, Issuer: "https://id.example", Subject: "42", Email: "alice@example.com"}
	if err := st.AddIdentity(ctx, oidc); err != nil {
		t.Fatalf("the same subject at another kind: %v", err)
	}
	if u, err := st.UserByIdentity(ctx, store.IdentityGitHub, "", "42"); err != nil || u.ID != "usr-alice" {
		t.Errorf("UserByIdentity = %+v, %v", u, err)
	}
	if _, err := st.UserByIdentity(ctx, store.IdentityOIDC, "https://other", "42"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UserByIdentity at another issuer: %v, want ErrNotFound", err)
	}
	ids, err := st.Identities(ctx, "usr-alice")
	if err != nil || len(ids) != 2 || ids[0].Kind != store.IdentityGitHub || ids[0].Login != "alice" || ids[1].Email != "alice@example.com" {
		t.Errorf("Identities = %v, %v", ids, err)
	}

	// Sessions and environments keep their user; a list filters by it.
	for i, who := range []string{"usr-alice", "usr-c1", "usr-alice"} {
		s := &store.Session{ID: fmt.Sprintf("s-%d", i), Owner: "tok-x", User: who, State: store.StateIdle, CreatedAt: base.Add(time.Duration(i) * time.Second)}
		if err := st.CreateSession(ctx, s, nil); err != nil {
			t.Fatal(err)
		}
	}
	if s, err := st.GetSession(ctx, "s-1"); err != nil || s.User != "usr-c1" {
		t.Errorf("a session's user read back: %+v, %v", s, err)
	}
	if s, err := st.UpdateSession(ctx, "s-1", func(s *store.Session) error { s.Title = "t"; return nil }); err != nil || s.User != "usr-c1" {
		t.Errorf("a session's user after an update: %+v, %v", s, err)
	}
	if ss, err := st.ListSessions(ctx, store.SessionFilter{User: "usr-alice"}); err != nil || len(ss) != 2 || ss[0].ID != "s-2" || ss[1].ID != "s-0" {
		t.Errorf("ListSessions(user alice) = %v, %v; want s-2, s-0", ss, err)
	}
	env := &store.Environment{ID: "env-1", Repo: "r", State: store.EnvBuilding, User: "usr-alice"}
	if err := st.CreateEnvironment(ctx, env); err != nil {
		t.Fatal(err)
	}
	if e, err := st.GetEnvironment(ctx, "env-1"); err != nil || e.User != "usr-alice" {
		t.Errorf("an environment's user read back: %+v, %v", e, err)
	}

	// UserForIdentity: the existing user (login brought up to date), or a
	// new one once, however many ask at once.
	u, created, err := st.UserForIdentity(ctx, &store.Identity{Kind: store.IdentityGitHub, Subject: "42", Login: "alice2"},
		&store.User{ID: "usr-new", Name: "x", Role: store.RoleMember})
	if err != nil || created || u.ID != "usr-alice" {
		t.Errorf("UserForIdentity(known) = %+v, %v, %v", u, created, err)
	}
	if ids, _ := st.Identities(ctx, "usr-alice"); ids[0].Login != "alice2" {
		t.Errorf("the identity's login after UserForIdentity: %q, want alice2", ids[0].Login)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		got     = map[string]int{}
		creates int
	)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u, created, err := st.UserForIdentity(ctx, &store.Identity{Kind: store.IdentityGitHub, Subject: "7", Login: "octo"},
				&store.User{ID: fmt.Sprintf("usr-octo%d", i), Name: "octo", Role: store.RoleMember})
			if err != nil {
				t.Errorf("UserForIdentity(new, at once): %v", err)
				return
			}
			mu.Lock()
			got[u.ID]++
			if created {
				creates++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(got) != 1 || creates != 1 {
		t.Errorf("8 UserForIdentity at once of one new identity: users %v, %d created; want one user, created once", got, creates)
	}
}

// testAudit: entries are appended with increasing ids and listed newest
// first, filtered by user, action and time, paged by id; a change made
// with an entry in its context (WithAudit) records it in its transaction,
// and one that fails records nothing.
func testAudit(t *testing.T, open func(t *testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	if err := st.AppendAudit(ctx, &store.AuditEntry{Action: "x"}); err == nil {
		t.Error("an entry without channel and result was stored")
	}
	if err := st.AppendAudit(ctx, &store.AuditEntry{Action: "x", Channel: store.ChannelAPI, Result: "ok", Detail: json.RawMessage(`[1]`)}); err == nil {
		t.Error("an entry whose detail is not an object was stored")
	}
	var ids []int64
	for i, e := range []store.AuditEntry{
		{User: "usr-a", Channel: store.ChannelAPI, Remote: "127.0.0.1", Action: "session.create", Target: "s-1", Result: store.AuditOK, Time: base},
		{User: "usr-b", Channel: store.ChannelCLI, Action: "session.create", Target: "s-2", Result: "invalid", Time: base.Add(time.Second), Detail: json.RawMessage(`{"why":"no repos"}`)},
		{User: "usr-a", Channel: store.ChannelUI, Action: "session.cancel", Target: "s-1", Result: store.AuditOK, Time: base.Add(2 * time.Second)},
		{Channel: store.ChannelGitHub, Action: "github.refuse", Result: "forbidden", Time: base.Add(3 * time.Second)},
	} {
		if err := st.AppendAudit(ctx, &e); err != nil {
			t.Fatalf("AppendAudit %d: %v", i, err)
		}
		if len(ids) > 0 && e.ID <= ids[len(ids)-1] {
			t.Errorf("entry %d has id %d, not above %d", i, e.ID, ids[len(ids)-1])
		}
		ids = append(ids, e.ID)
	}
	all, err := st.ListAudit(ctx, store.AuditFilter{})
	if err != nil || len(all) != 4 || all[0].ID != ids[3] || all[3].ID != ids[0] {
		t.Fatalf("ListAudit = %v, %v; want 4, newest first", all, err)
	}
	b := all[2]
	if b.User != "usr-b" || b.Channel != store.ChannelCLI || b.Result != "invalid" || !b.Time.Equal(base.Add(time.Second)) || b.Target != "s-2" {
		t.Errorf("entry read back: %+v", b)
	}
	var detail map[string]string
	if err := json.Unmarshal(b.Detail, &detail); err != nil || detail["why"] != "no repos" {
		t.Errorf("detail read back: %s (%v)", b.Detail, err)
	}
	if all[3].Detail != nil || all[3].Remote != "127.0.0.1" {
		t.Errorf("an entry without detail: %+v", all[3])
	}
	count := func(f store.AuditFilter) int {
		t.Helper()
		es, err := st.ListAudit(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	for _, c := range []struct {
		f    store.AuditFilter
		want int
	}{
		{store.AuditFilter{User: "usr-a"}, 2},
		{store.AuditFilter{Action: "session.create"}, 2},
		{store.AuditFilter{User: "usr-a", Action: "session.create"}, 1},
		{store.AuditFilter{Since: base.Add(time.Second)}, 3},
		{store.AuditFilter{Until: base.Add(time.Second)}, 1},
		{store.AuditFilter{Since: base.Add(time.Second), Until: base.Add(3 * time.Second)}, 2},
		{store.AuditFilter{Before: ids[2]}, 2},
		{store.AuditFilter{Limit: 3}, 3},
	} {
		if n := count(c.f); n != c.want {
			t.Errorf("ListAudit(%+v): %d entries, want %d", c.f, n, c.want)
		}
	}

	// In the change's transaction.
	e := &store.AuditEntry{User: "usr-r", Channel: store.ChannelAPI, Action: "user.create", Target: "usr-z"}
	if err := st.CreateUser(store.WithAudit(ctx, e), &store.User{ID: "usr-z", Name: "Z", Role: store.RoleMember}); err != nil {
		t.Fatal(err)
	}
	if e.ID == 0 || e.Result != store.AuditOK {
		t.Errorf("the entry of a change: %+v; want its id and result ok", e)
	}
	failed := &store.AuditEntry{User: "usr-r", Channel: store.ChannelAPI, Action: "user.create", Target: "usr-z"}
	if err := st.CreateUser(store.WithAudit(ctx, failed), &store.User{ID: "usr-z", Name: "Z", Role: store.RoleMember}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("CreateUser again: %v", err)
	}
	tok := &store.AuditEntry{User: "usr-r", Channel: store.ChannelAPI, Action: "token.create", Target: "tok-z"}
	if err := st.CreateToken(store.WithAudit(ctx, tok), &store.Token{ID: "tok-z", Name: "z", Hash: []byte("z"), User: "usr-z"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateUser(store.WithAudit(ctx, &store.AuditEntry{Channel: store.ChannelCLI, Action: "user.update", Target: "usr-z"}), "usr-z",
		func(u *store.User) error { u.Disabled = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteToken(store.WithAudit(ctx, &store.AuditEntry{Channel: store.ChannelAPI, Action: "token.delete", Target: "tok-z"}), "tok-z"); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteToken(store.WithAudit(ctx, &store.AuditEntry{Channel: store.ChannelAPI, Action: "token.delete", Target: "tok-z"}), "tok-z"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteToken again: %v", err)
	}
	x := &store.Secret{Scope: "repo:o/r", Name: "X", Ciphertext: []byte("c"), KeyID: "k", SetBy: "tok-r", SetByUser: "usr-r"}
	if err := st.PutSecret(store.WithAudit(ctx, &store.AuditEntry{Channel: store.ChannelAPI, Action: "secret.put", Target: "repo:o/r/X"}), x); err != nil {
		t.Fatal(err)
	}
	if x.SetByUser != "usr-r" {
		t.Errorf("the secret's set_by_user: %q", x.SetByUser)
	}
	if err := st.DeleteSecret(store.WithAudit(ctx, &store.AuditEntry{Channel: store.ChannelAPI, Action: "secret.delete", Target: "repo:o/r/X"}), "repo:o/r", "X"); err != nil {
		t.Fatal(err)
	}
	es, err := st.ListAudit(ctx, store.AuditFilter{Since: base.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range es {
		actions = append(actions, e.Action)
	}
	if fmt.Sprint(actions) != "[secret.delete secret.put token.delete user.update token.create user.create]" {
		t.Errorf("entries of the changes, newest first: %v; want one per change that was made", actions)
	}
}
