package storetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/store"
)

// testSlackLinks: a link is read while it lasts and not after; redeeming
// it gives its Slack account to the user once (a second redeem, or one
// after it expired, is ErrNotFound), records the audit entry with it,
// and of two redeemers at once one wins; an account that is another
// user's is ErrConflict and keeps the link; RemoveIdentity takes an
// identity away once.
func testSlackLinks(t *testing.T, open func(t *testing.T) store.Store) {
	st := open(t)
	ctx := context.Background()
	for _, id := range []string{"usr-ann", "usr-bob"} {
		if err := st.CreateUser(ctx, &store.User{ID: id, Name: id, Role: store.RoleMember, CreatedAt: base}); err != nil {
			t.Fatal(err)
		}
	}
	hash := func(code string) []byte { h := sha256.Sum256([]byte(code)); return h[:] }
	link := func(code, user string, expires time.Time) {
		t.Helper()
		if err := st.CreateSlackLink(ctx, &store.SlackLink{Hash: hash(code), Team: "T1", User: user, Name: user + "-name", CreatedAt: base, ExpiresAt: expires}); err != nil {
			t.Fatal(err)
		}
	}
	link("c1", "U1", base.Add(15*time.Minute))
	if err := st.CreateSlackLink(ctx, &store.SlackLink{Hash: hash("c1"), Team: "T1", User: "U9", CreatedAt: base, ExpiresAt: base.Add(time.Hour)}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("CreateSlackLink of a hash that exists: %v, want ErrConflict", err)
	}
	if err := st.CreateSlackLink(ctx, &store.SlackLink{Hash: hash("c0"), Team: "T1", ExpiresAt: base.Add(time.Hour)}); err == nil {
		t.Error("CreateSlackLink without a Slack user stored it")
	}
	l, err := st.SlackLink(ctx, hash("c1"), base.Add(time.Minute))
	if err != nil || l.Team != "T1" || l.User != "U1" || l.Name != "U1-name" || !l.ExpiresAt.Equal(base.Add(15*time.Minute)) || !l.CreatedAt.Equal(base) {
		t.Fatalf("SlackLink: %+v, %v", l, err)
	}
	if _, err := st.SlackLink(ctx, hash("c1"), base.Add(15*time.Minute)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SlackLink at its expiry: %v, want ErrNotFound", err)
	}
	if _, err := st.SlackLink(ctx, hash("nope"), base); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SlackLink of an unknown code: %v, want ErrNotFound", err)
	}
	if _, err := st.RedeemSlackLink(ctx, hash("c1"), "usr-ann", base.Add(16*time.Minute)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RedeemSlackLink after its expiry: %v, want ErrNotFound", err)
	}

	// Redeemed once, with its audit entry.
	e := &store.AuditEntry{User: "usr-ann", Channel: store.ChannelUI, Action: "identity.link", Target: "usr-ann"}
	l, err = st.RedeemSlackLink(store.WithAudit(ctx, e), hash("c1"), "usr-ann", base.Add(time.Minute))
	if err != nil || l.User != "U1" {
		t.Fatalf("RedeemSlackLink: %+v, %v", l, err)
	}
	if u, err := st.UserByIdentity(ctx, store.IdentitySlack, "T1", "U1"); err != nil || u.ID != "usr-ann" {
		t.Errorf("the user of the linked account: %+v, %v; want usr-ann", u, err)
	}
	ids, err := st.Identities(ctx, "usr-ann")
	if err != nil || len(ids) != 1 || ids[0].Login != "U1-name" || ids[0].Issuer != "T1" {
		t.Errorf("usr-ann's identities: %+v, %v; want the slack one, named U1-name", ids, err)
	}
	if e.ID == 0 {
		t.Error("the audit entry was not recorded with the link")
	}
	if _, err := st.RedeemSlackLink(ctx, hash("c1"), "usr-ann", base.Add(time.Minute)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RedeemSlackLink a second time: %v, want ErrNotFound", err)
	}
	if _, err := st.SlackLink(ctx, hash("c1"), base.Add(time.Minute)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SlackLink of a redeemed code: %v, want ErrNotFound", err)
	}

	// Another user's account: ErrConflict, the link kept, no entry.
	link("c2", "U1", base.Add(15*time.Minute))
	e2 := &store.AuditEntry{User: "usr-bob", Channel: store.ChannelUI, Action: "identity.link", Target: "usr-bob"}
	if _, err := st.RedeemSlackLink(store.WithAudit(ctx, e2), hash("c2"), "usr-bob", base.Add(time.Minute)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("RedeemSlackLink of usr-ann's account by usr-bob: %v, want ErrConflict", err)
	}
	if e2.ID != 0 {
		t.Error("a refused link recorded its audit entry")
	}
	if _, err := st.SlackLink(ctx, hash("c2"), base.Add(time.Minute)); err != nil {
		t.Errorf("the link after a refused redeem: %v, want it kept", err)
	}
	// The account's own user again: used up, no error.
	if _, err := st.RedeemSlackLink(ctx, hash("c2"), "usr-ann", base.Add(time.Minute)); err != nil {
		t.Errorf("RedeemSlackLink of an account that is the user's already: %v", err)
	}
	link("c3", "U3", base.Add(15*time.Minute))
	if _, err := st.RedeemSlackLink(ctx, hash("c3"), "usr-nobody", base.Add(time.Minute)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RedeemSlackLink for a user that does not exist: %v, want ErrNotFound", err)
	}

	// Two redeemers at once: one wins.
	var (
		wg   sync.WaitGroup
		errs [2]error
	)
	for i, u := range []string{"usr-ann", "usr-bob"} {
		wg.Go(func() { _, errs[i] = st.RedeemSlackLink(ctx, hash("c3"), u, base.Add(time.Minute)) })
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Errorf("two redeems of one code at once: %v and %v; want one to win", errs[0], errs[1])
	}

	// Creating a link drops the expired ones.
	link("c4", "U4", base.Add(time.Minute))
	link("c5", "U5", base.Add(2*time.Hour))
	if err := st.CreateSlackLink(ctx, &store.SlackLink{Hash: hash("c6"), Team: "T1", User: "U6", CreatedAt: base.Add(time.Hour), ExpiresAt: base.Add(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SlackLink(ctx, hash("c5"), base); err != nil {
		t.Errorf("an unexpired link after a create: %v", err)
	}
	if _, err := st.SlackLink(ctx, hash("c4"), base); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a link expired at a create's time, read at an earlier one: %v, want ErrNotFound (dropped)", err)
	}

	// RemoveIdentity.
	e3 := &store.AuditEntry{User: "usr-ann", Channel: store.ChannelAPI, Action: "identity.unlink", Target: "usr-ann"}
	if err := st.RemoveIdentity(store.WithAudit(ctx, e3), "usr-ann", store.IdentitySlack, "T1", "U1"); err != nil {
		t.Fatal(err)
	}
	if e3.ID == 0 {
		t.Error("RemoveIdentity did not record its audit entry")
	}
	if _, err := st.UserByIdentity(ctx, store.IdentitySlack, "T1", "U1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the user of a removed identity: %v, want ErrNotFound", err)
	}
	if err := st.RemoveIdentity(ctx, "usr-ann", store.IdentitySlack, "T1", "U1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RemoveIdentity a second time: %v, want ErrNotFound", err)
	}
}
