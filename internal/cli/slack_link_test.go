package cli

import (
	"context"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/sim/slacksim"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/sqlite"
)

// linkPattern finds the link the Slack app gives an unknown account.
var linkPattern = regexp.MustCompile(`http://harvest\.example/#/link/slack/([A-Za-z0-9_-]{43})`)

// userWithToken stores a user with no identity, and a token of theirs,
// in the env's store (before the server starts); it returns the token.
func (se *slackEnv) userWithToken(t *testing.T, id string) string {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(se.e.home, "harvest.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if err := st.CreateUser(ctx, &store.User{ID: id, Name: id, Role: store.RoleMember}); err != nil {
		t.Fatal(err)
	}
	secret, tok := server.NewToken(id+"-laptop", false, time.Now())
	tok.User = id
	if err := st.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	return secret
}

// linkCodes are the codes of the links the app gave user, oldest first.
func (se *slackEnv) linkCodes(user slacksim.User) []string {
	var out []string
	for _, e := range se.ss.Ephemerals() {
		if m := linkPattern.FindStringSubmatch(e.Text); e.User == user.ID && m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

// TestSlackLinkByHand: a Slack account whose email is no user's gets an
// ephemeral with a one-time link; the Harvest user who redeems it (with
// their token) has the account: their next mention starts a session that
// is theirs. The code works once; a code of an account that is someone
// else's is a 409. (A code's expiry, by the server's clock, is
// server.TestSlackLinks'.)
func TestSlackLinkByHand(t *testing.T) {
	se := newSlackEnv(t, slacksim.Options{})
	bobTok := se.userWithToken(t, "usr-bobby")
	eveTok := se.userWithToken(t, "usr-eve")
	se.serve(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bobC, err := client.New(se.s.url, bobTok, nil)
	if err != nil {
		t.Fatal(err)
	}
	eveC, err := client.New(se.s.url, eveTok, nil)
	if err != nil {
		t.Fatal(err)
	}

	// Two asks, two links; nothing starts.
	first := se.post(t, se.bob, se.mention()+" fix calc", "")
	waitUntil(t, ctx, "a link for bob", func() bool { return len(se.linkCodes(se.bob)) == 1 })
	se.post(t, se.bob, se.mention()+" fix calc now", "")
	waitUntil(t, ctx, "a second link for bob", func() bool { return len(se.linkCodes(se.bob)) == 2 })
	codes := se.linkCodes(se.bob)
	se.ephemeralTo(t, ctx, se.bob, "/#/link/slack/"+codes[0]+" within 15 minutes, sign in and confirm")
	if codes[0] == codes[1] {
		t.Errorf("two asks got the same code %s", codes[0])
	}
	if r := se.reactions(first.TS); len(r) != 0 || len(se.slackSessions(t, ctx)) != 0 {
		t.Errorf("an unknown account's mention: reactions %v, sessions %d; want none", r, len(se.slackSessions(t, ctx)))
	}

	l, err := bobC.SlackLink(ctx, codes[0])
	if err != nil || l.User != se.bob.ID || l.Name == "" || l.Team == "" {
		t.Fatalf("the link: %+v, %v; want bob's Slack account", l, err)
	}
	u, err := bobC.RedeemSlackLink(ctx, codes[0])
	if err != nil || u.ID != "usr-bobby" {
		t.Fatalf("redeeming it: %+v, %v", u, err)
	}
	linked := false
	for _, i := range u.Identities {
		linked = linked || (i.Kind == store.IdentitySlack && i.Subject == se.bob.ID && i.Issuer == l.Team)
	}
	if !linked {
		t.Errorf("usr-bobby's identities after the link: %+v", u.Identities)
	}
	if _, err := bobC.RedeemSlackLink(ctx, codes[0]); client.StatusOf(err) != http.StatusNotFound {
		t.Errorf("the code a second time: %v, want 404", err)
	}
	if _, err := eveC.RedeemSlackLink(ctx, codes[1]); client.StatusOf(err) != http.StatusConflict {
		t.Errorf("eve redeeming a link of bob's account, usr-bobby's now: %v, want 409", err)
	}

	// Bob's next mention is usr-bobby's.
	m := se.post(t, se.bob, se.mention()+" fix calc please", "")
	final := se.waitFinal(t, ctx, m.TS, 1)
	if !strings.Contains(final.Text, "Fixed calc") {
		t.Errorf("the final message: %q", final.Text)
	}
	ss := se.slackSessions(t, ctx)
	if len(ss) != 1 || ss[0].User != "usr-bobby" {
		t.Fatalf("the Slack sessions: %d, the first's user %q; want one, usr-bobby's", len(ss), userOf(ss))
	}
	if n := len(se.linkCodes(se.bob)); n != 2 {
		t.Errorf("links given to bob: %d, want 2 (none once linked)", n)
	}
}

func userOf(ss []*store.Session) string {
	if len(ss) == 0 {
		return ""
	}
	return ss[0].User
}
