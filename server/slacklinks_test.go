package server_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/stacktest/apitest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// testClock is a clock a test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestSlackLinks: a link's code says which Slack account it links; the
// first person to redeem it gets the account (audited as identity.link),
// once; an account that is someone else's is a 409 that keeps the code;
// a code expires by the server's clock; a person unlinks their own Slack
// account but not someone else's, nor their sign-in identities, and an
// admin unlinks anyone's; a disabled user links nothing.
func TestSlackLinks(t *testing.T) {
	clock := &testClock{t: time.Now().UTC()}
	e := newAPIEnv(t, apitest.WithNow(clock.now))
	ctx := testbin.Context(t)
	alice, bob := store.UserIDForToken(e.AliceID), store.UserIDForToken(e.BobID)
	link := func(slackUser string) string {
		t.Helper()
		var raw [32]byte
		rand.Read(raw[:])
		code := base64.RawURLEncoding.EncodeToString(raw[:])
		now := clock.now()
		if err := e.Store.CreateSlackLink(ctx, &store.SlackLink{Hash: server.HashToken(code), Team: "T1", User: slackUser, Name: slackUser + "-name", CreatedAt: now, ExpiresAt: now.Add(15 * time.Minute)}); err != nil {
			t.Fatal(err)
		}
		return code
	}
	slackOf := func(u *wire.User) []string {
		var out []string
		for _, i := range u.Identities {
			if i.Kind == store.IdentitySlack {
				out = append(out, i.Issuer+"/"+i.Subject+"/"+i.Login)
			}
		}
		return out
	}

	c1 := link("U1")
	l, err := e.BobC.SlackLink(ctx, c1)
	if err != nil || l.Team != "T1" || l.User != "U1" || l.Name != "U1-name" {
		t.Fatalf("SlackLink: %+v, %v", l, err)
	}
	u, err := e.AliceC.RedeemSlackLink(ctx, c1)
	if err != nil || u.ID != alice || len(slackOf(u)) != 1 || slackOf(u)[0] != "T1/U1/U1-name" {
		t.Fatalf("RedeemSlackLink: %+v, %v; want alice with T1/U1", u, err)
	}
	if got, err := e.Store.UserByIdentity(ctx, store.IdentitySlack, "T1", "U1"); err != nil || got.ID != alice {
		t.Errorf("the user of the Slack account: %+v, %v", got, err)
	}
	for _, c := range []*client.Client{e.AliceC, e.BobC} {
		if _, err := c.RedeemSlackLink(ctx, c1); client.StatusOf(err) != http.StatusNotFound {
			t.Errorf("a used code again: %v, want 404", err)
		}
	}
	if _, err := e.AliceC.SlackLink(ctx, c1); client.StatusOf(err) != http.StatusNotFound {
		t.Errorf("reading a used code: %v, want 404", err)
	}
	if _, err := e.AliceC.SlackLink(ctx, "not-a-code"); client.StatusOf(err) != http.StatusNotFound {
		t.Errorf("a code of the wrong shape: %v, want 404", err)
	}
	// Three entries: the link, then the two refused tries (newest first).
	audit, err := e.Store.ListAudit(ctx, store.AuditFilter{Action: "identity.link"})
	if err != nil || len(audit) != 3 || audit[0].Result != "not_found" || audit[1].Result != "not_found" {
		t.Fatalf("identity.link entries: %d, %v; want the link and two refusals", len(audit), err)
	}
	audit = audit[2:]
	if audit[0].User != alice || audit[0].Channel != store.ChannelAPI || audit[0].Result != store.AuditOK || audit[0].Target != alice {
		t.Fatalf("identity.link entries: %+v, %v; want alice's, ok", audit, err)
	}
	var detail struct {
		SlackUser string `json:"slack_user"`
		Team      string `json:"team"`
	}
	if json.Unmarshal(audit[0].Detail, &detail); detail.SlackUser != "U1" || detail.Team != "T1" {
		t.Errorf("the entry's detail: %s; want the Slack user", audit[0].Detail)
	}

	// Alice's account, by Bob: 409, the code kept (Alice may use it).
	c2 := link("U1")
	if _, err := e.BobC.RedeemSlackLink(ctx, c2); client.StatusOf(err) != http.StatusConflict {
		t.Errorf("linking alice's Slack account to bob: %v, want 409", err)
	}
	if _, err := e.AliceC.RedeemSlackLink(ctx, c2); err != nil {
		t.Errorf("alice redeeming a link of her own account: %v", err)
	}

	// Expiry, by the server's clock.
	c3 := link("U3")
	clock.add(15*time.Minute + time.Second)
	if _, err := e.BobC.SlackLink(ctx, c3); client.StatusOf(err) != http.StatusNotFound {
		t.Errorf("reading an expired code: %v, want 404", err)
	}
	if _, err := e.BobC.RedeemSlackLink(ctx, c3); client.StatusOf(err) != http.StatusNotFound {
		t.Errorf("redeeming an expired code: %v, want 404", err)
	}

	// Unlinking.
	if err := e.BobC.UnlinkIdentity(ctx, alice, store.IdentitySlack, "T1", "U1"); client.StatusOf(err) != http.StatusForbidden {
		t.Errorf("bob unlinking alice's account: %v, want 403", err)
	}
	if err := e.AliceC.UnlinkIdentity(ctx, alice, store.IdentityOIDC, "https://idp", "x"); client.StatusOf(err) != http.StatusForbidden {
		t.Errorf("alice removing a sign-in identity: %v, want 403", err)
	}
	if err := e.AliceC.UnlinkIdentity(ctx, alice, store.IdentitySlack, "T1", "U1"); err != nil {
		t.Fatalf("alice unlinking her Slack account: %v", err)
	}
	if err := e.AliceC.UnlinkIdentity(ctx, alice, store.IdentitySlack, "T1", "U1"); client.StatusOf(err) != http.StatusNotFound {
		t.Errorf("unlinking it again: %v, want 404", err)
	}
	if u, err := e.BobC.RedeemSlackLink(ctx, link("U1")); err != nil || len(slackOf(u)) != 1 {
		t.Fatalf("bob linking the account alice let go: %+v, %v", u, err)
	}
	if err := e.AdminC.UnlinkIdentity(ctx, bob, store.IdentitySlack, "T1", "U1"); err != nil {
		t.Errorf("an admin unlinking bob's account: %v", err)
	}
	un, err := e.Store.ListAudit(ctx, store.AuditFilter{Action: "identity.unlink"})
	results := map[string]int{}
	for _, a := range un {
		results[a.Result]++
	}
	if err != nil || results[store.AuditOK] != 2 || results["forbidden"] != 2 || results["not_found"] != 1 {
		t.Errorf("identity.unlink entries by result: %v, %v; want 2 ok, 2 forbidden, 1 not_found", results, err)
	}

	// A disabled user links nothing.
	if _, err := e.AdminC.UpdateUser(ctx, bob, wire.UserPatch{Disabled: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	c4 := link("U4")
	if _, err := e.BobC.RedeemSlackLink(ctx, c4); client.StatusOf(err) != http.StatusUnauthorized && client.StatusOf(err) != http.StatusForbidden {
		t.Errorf("a disabled user redeeming: %v, want refused", err)
	}
	if _, err := e.AliceC.SlackLink(ctx, c4); err != nil {
		t.Errorf("the code after a disabled user's try: %v, want it kept", err)
	}
}
