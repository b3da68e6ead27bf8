package server_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/stacktest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// TestUsers: the tokens the server had are users of their own (GET
// /v1/me); an admin makes users, gives them tokens, renames them and
// changes their role, and only an admin does; an admin token of a user
// made a member acts as a member; an admin cannot demote themselves; a
// session records the user of the token that made it.
func TestUsers(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	aliceUser := store.UserIDForToken(e.AliceID)

	me, err := e.AliceC.Me(ctx)
	if err != nil || me.Token.ID != e.AliceID || me.User == nil || me.User.ID != aliceUser || me.User.Role != wire.RoleMember || me.Admin {
		t.Fatalf("alice's /v1/me: %+v, %v", me, err)
	}
	if me, err := e.AdminC.Me(ctx); err != nil || !me.Admin || me.User.Role != wire.RoleAdmin {
		t.Errorf("the admin's /v1/me: %+v, %v", me, err)
	}
	for _, call := range []func() error{
		func() error { _, err := e.AliceC.ListUsers(ctx); return err },
		func() error {
			_, err := e.AliceC.CreateUser(ctx, wire.UserRequest{Name: "Mallory", Role: wire.RoleAdmin})
			return err
		},
		func() error {
			_, err := e.AliceC.UpdateUser(ctx, aliceUser, wire.UserPatch{Role: ptr(wire.RoleAdmin)})
			return err
		},
	} {
		if err := call(); client.StatusOf(err) != http.StatusForbidden {
			t.Errorf("a user token managing users: %v, want 403", err)
		}
	}

	carol, err := e.AdminC.CreateUser(ctx, wire.UserRequest{Name: "Carol"})
	if err != nil || carol.Role != wire.RoleMember || !strings.HasPrefix(carol.ID, "usr-") {
		t.Fatalf("CreateUser: %+v, %v", carol, err)
	}
	if _, err := e.AdminC.CreateUser(ctx, wire.UserRequest{Name: " ", Role: "root"}); client.StatusOf(err) != http.StatusBadRequest {
		t.Errorf("a user with no name and a role that is not one: %v, want 400", err)
	}
	if _, err := e.AdminC.NewToken(ctx, wire.TokenRequest{Name: "carol-admin", Admin: true, User: carol.ID}); client.StatusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "only an admin's token") {
		t.Errorf("an admin token for a member: %v, want 400", err)
	}
	if _, err := e.AdminC.NewToken(ctx, wire.TokenRequest{Name: "x", User: "usr-nobody"}); client.StatusOf(err) != http.StatusBadRequest {
		t.Errorf("a token for no user: %v, want 400", err)
	}
	ct, err := e.AdminC.NewToken(ctx, wire.TokenRequest{Name: "carol-laptop", User: carol.ID})
	if err != nil || ct.User != carol.ID {
		t.Fatalf("a token for carol: %+v, %v", ct, err)
	}
	carolC := e.Client(ct.Secret)
	if me, err := carolC.Me(ctx); err != nil || me.User.ID != carol.ID || me.User.Name != "Carol" {
		t.Errorf("carol's /v1/me: %+v, %v", me, err)
	}
	if ts, err := e.AdminC.UserTokens(ctx, carol.ID); err != nil || len(ts) != 1 || ts[0].ID != ct.ID {
		t.Errorf("carol's tokens: %v, %v", ts, err)
	}
	if _, err := e.AdminC.UserTokens(ctx, "usr-nobody"); client.StatusOf(err) != http.StatusNotFound {
		t.Errorf("the tokens of no user: %v, want 404", err)
	}
	// A token with no user is a new user of its own, as before.
	auto, err := e.AdminC.NewToken(ctx, wire.TokenRequest{Name: "ci"})
	if err != nil || auto.User != store.UserIDForToken(auto.ID) {
		t.Errorf("a token with no user: %+v, %v", auto, err)
	}

	v := e.create(carolC, "")
	if v.User != carol.ID || v.Owner != ct.ID {
		t.Errorf("carol's session: owner %s user %s, want %s %s", v.Owner, v.User, ct.ID, carol.ID)
	}
	if list, err := e.AdminC.ListSessions(ctx, client.ListOptions{}); err != nil || len(list) != 1 || list[0].User != carol.ID {
		t.Errorf("the sessions an admin lists: %v, %v", list, err)
	}

	u, err := e.AdminC.UpdateUser(ctx, carol.ID, wire.UserPatch{Name: ptr("Carol M."), Role: ptr(wire.RoleAdmin)})
	if err != nil || u.Name != "Carol M." || u.Role != wire.RoleAdmin {
		t.Fatalf("UpdateUser: %+v, %v", u, err)
	}
	got, err := e.AdminC.GetUser(ctx, carol.ID)
	if err != nil || got.Name != "Carol M." || got.Role != wire.RoleAdmin {
		t.Errorf("GetUser: %+v, %v", got, err)
	}
	if users, err := e.AdminC.ListUsers(ctx); err != nil || len(users) != 5 {
		t.Errorf("ListUsers: %d users, %v; want admin, alice, bob, carol, ci", len(users), err)
	}

	// The admin's own user may not be demoted by themselves; made a
	// member by another admin, their admin token acts as a member's.
	adminMe, _ := e.AdminC.Me(ctx)
	if _, err := e.AdminC.UpdateUser(ctx, adminMe.User.ID, wire.UserPatch{Role: ptr(wire.RoleMember)}); client.StatusOf(err) != http.StatusConflict {
		t.Errorf("an admin demoting themselves: %v, want 409", err)
	}
	ca, err := e.AdminC.NewToken(ctx, wire.TokenRequest{Name: "carol-admin", Admin: true, User: carol.ID})
	if err != nil {
		t.Fatal(err)
	}
	carolAdmin := e.Client(ca.Secret)
	if _, err := carolAdmin.UpdateUser(ctx, adminMe.User.ID, wire.UserPatch{Role: ptr(wire.RoleMember)}); err != nil {
		t.Fatalf("another admin demoting the admin: %v", err)
	}
	if _, err := e.AdminC.ListTokens(ctx); client.StatusOf(err) != http.StatusForbidden || !strings.Contains(err.Error(), "needs an admin token of an admin") {
		t.Errorf("an admin token of a member: %v, want 403", err)
	}
	if me, err := e.AdminC.Me(ctx); err != nil || me.Admin {
		t.Errorf("/v1/me of an admin token of a member: %+v, %v; want admin false", me, err)
	}
	if _, err := carolAdmin.UpdateUser(ctx, adminMe.User.ID, wire.UserPatch{Role: ptr(wire.RoleAdmin)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.AdminC.ListTokens(ctx); err != nil {
		t.Errorf("the admin token of an admin again: %v", err)
	}
}

// TestDisabledUserRefusedAtOnce: the request right after a user is
// disabled is refused, by token and by sign-in cookie; enabled again, both
// work.
func TestDisabledUserRefusedAtOnce(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	aliceUser := store.UserIDForToken(e.AliceID)
	v := e.create(e.AliceC, "")
	b := signIn(e, e.Alice, nil)
	if status, body, _ := b.send(http.MethodGet, "/v1/sessions/"+v.ID, nil, "", nil); status != http.StatusOK {
		t.Fatalf("alice's cookie before: %d %s", status, body)
	}

	if _, err := e.AdminC.UpdateUser(ctx, aliceUser, wire.UserPatch{Disabled: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	_, err := e.AliceC.GetSession(ctx, v.ID)
	if client.StatusOf(err) != http.StatusUnauthorized || !strings.Contains(err.Error(), "is disabled") {
		t.Errorf("a disabled user's token: %v, want 401 saying the user is disabled", err)
	}
	if status, body, _ := b.send(http.MethodGet, "/v1/sessions/"+v.ID, nil, "", nil); status != http.StatusUnauthorized {
		t.Errorf("a disabled user's cookie: %d %s, want 401", status, body)
	}
	if _, err := e.AdminC.NewToken(ctx, wire.TokenRequest{Name: "more", User: aliceUser}); client.StatusOf(err) != http.StatusBadRequest {
		t.Errorf("a token for a disabled user: %v, want 400", err)
	}
	// Bob is not touched; the session is still there for the admin.
	if _, err := e.BobC.ListSessions(ctx, client.ListOptions{}); err != nil {
		t.Errorf("bob: %v", err)
	}
	if _, err := e.AdminC.GetSession(ctx, v.ID); err != nil {
		t.Errorf("the admin reading alice's session: %v", err)
	}

	if _, err := e.AdminC.UpdateUser(ctx, aliceUser, wire.UserPatch{Disabled: ptr(false)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.AliceC.GetSession(ctx, v.ID); err != nil {
		t.Errorf("alice enabled again: %v", err)
	}
	if status, body, _ := b.send(http.MethodGet, "/v1/sessions/"+v.ID, nil, "", nil); status != http.StatusOK {
		t.Errorf("alice's cookie enabled again: %d %s", status, body)
	}
}

// TestAuditLog: a session's create, send, cancel and delete are recorded
// once each with the user and channel that did them and their result;
// token and user changes too; a user token cannot read the log; pages
// follow the cursor.
func TestAuditLog(t *testing.T) {
	e := newAPIEnv(t)
	ctx := testbin.Context(t)
	aliceUser := store.UserIDForToken(e.AliceID)
	bobUser := store.UserIDForToken(e.BobID)
	start := time.Now().UTC()

	v := e.create(e.AliceC, "msg 1")
	st := e.AliceC.Events(ctx, v.ID, client.StreamOptions{})
	defer st.Close()
	stacktest.ReadUntil(t, st, "the first turn", stacktest.TurnEnded("t1"))
	cli := e.Client(e.Alice)
	cli.SetUserAgent(client.CLIUserAgent + "test")
	if _, err := cli.Send(ctx, v.ID, "msg 2", ""); err != nil {
		t.Fatal(err)
	}
	stacktest.ReadUntil(t, st, "the second turn", stacktest.TurnEnded("t2"))
	if err := e.AliceC.Cancel(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	// Bob's request claims to be forwarded for another address, vouched
	// for by a token that is no node's: his own address is recorded.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.URL+"/v1/sessions/"+v.ID+"/cancel", nil)
	req.Header.Set("Authorization", "Bearer "+e.Bob)
	req.Header.Set(server.ForwardedForHeader, "203.0.113.9")
	req.Header.Set(server.NodeAuthHeader, "Bearer "+e.Alice)
	if resp, err := e.Transport.RoundTrip(req); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("bob cancelling alice's session: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if err := e.AliceC.DeleteSession(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	tok, err := e.AdminC.NewToken(ctx, wire.TokenRequest{Name: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.AdminC.UpdateUser(ctx, tok.User, wire.UserPatch{Role: ptr(wire.RoleViewer)}); err != nil {
		t.Fatal(err)
	}

	if _, err := e.AliceC.Audit(ctx, client.AuditOptions{}); client.StatusOf(err) != http.StatusForbidden {
		t.Errorf("a user token reading the audit log: %v, want 403", err)
	}
	page, err := e.AdminC.Audit(ctx, client.AuditOptions{Since: start})
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ user, channel, action, target, result string }
	adminMe, _ := e.AdminC.Me(ctx)
	want := []row{ // newest first
		{adminMe.User.ID, "api", "user.update", tok.User, "ok"},
		{adminMe.User.ID, "api", "token.create", tok.ID, "ok"},
		{aliceUser, "api", "session.delete", v.ID, "ok"},
		{bobUser, "api", "session.cancel", v.ID, "not_found"},
		{aliceUser, "api", "session.cancel", v.ID, "ok"},
		{aliceUser, "cli", "session.send", v.ID, "ok"},
		{aliceUser, "api", "session.create", v.ID, "ok"},
	}
	var got []row
	for _, en := range page.Entries {
		got = append(got, row{en.User, en.Channel, en.Action, en.Target, en.Result})
		if en.Remote != "127.0.0.1" || en.Token == "" || en.Time.Before(start.Add(-time.Second)) {
			t.Errorf("entry %+v: want remote 127.0.0.1, its token and its time", en)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("the audit log:\n%v\nwant\n%v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	// Filters and pages.
	mine, err := e.AdminC.Audit(ctx, client.AuditOptions{User: aliceUser, Action: "session.cancel"})
	if err != nil || len(mine.Entries) != 1 || mine.Entries[0].Result != "ok" {
		t.Errorf("alice's cancels: %+v, %v", mine, err)
	}
	var paged []string
	o := client.AuditOptions{Since: start, Limit: 3}
	for {
		p, err := e.AdminC.Audit(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range p.Entries {
			paged = append(paged, en.Action)
		}
		if p.NextCursor == "" {
			break
		}
		o.Cursor = p.NextCursor
	}
	if len(paged) != len(want) {
		t.Errorf("the log in pages of 3: %v, want %d entries", paged, len(want))
	}
	if _, err := e.AdminC.Audit(ctx, client.AuditOptions{Cursor: "bogus"}); client.StatusOf(err) != http.StatusBadRequest {
		t.Errorf("a bad cursor: %v, want 400", err)
	}
}

func ptr[T any](v T) *T { return &v }
