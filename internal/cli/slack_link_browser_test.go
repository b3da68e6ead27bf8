package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/browsertest"
	"github.com/harvest-dev/harvest/sim/slacksim"
	"github.com/harvest-dev/harvest/store"
)

// TestSlackLinkInChromium: the link the Slack app gives an unknown
// account, opened in a real Chromium by someone not signed in, asks
// them to sign in, comes back to the link, names the Slack account and
// the Harvest user; Link links it (the done note), and the person's own
// page lists it, where Unlink takes it away again.
func TestSlackLinkInChromium(t *testing.T) {
	se := newSlackEnv(t, slacksim.Options{})
	bobTok := se.userWithToken(t, "usr-bobby")
	se.serve(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	se.post(t, se.bob, se.mention()+" fix calc", "")
	waitUntil(t, ctx, "a link for bob", func() bool { return len(se.linkCodes(se.bob)) == 1 })
	code := se.linkCodes(se.bob)[0]

	p := browsertest.New(t)
	p.Run("opening the link", chromedp.Navigate(se.s.url+"/#/link/slack/"+code))
	p.Run("signing in with a token", chromedp.WaitVisible(`form.signin #token`),
		chromedp.SendKeys(`form.signin #token`, bobTok), chromedp.Click(`form.signin button[type=submit]`))
	p.Wait("the question", browsertest.HasText(".link-question", "Link Slack user @bob")+` && `+`document.querySelector(".link-question strong.link-user")?.textContent === "usr-bobby"`)
	p.Shot("slack-link-question")
	p.Run("Link", chromedp.Click(`button.link-confirm`))
	p.Wait("done", browsertest.HasText(".link-done", "is linked to you")+` && document.querySelector("button.link-confirm").hidden`)
	p.Shot("slack-link-done")

	bobC, err := client.New(se.s.url, bobTok, nil)
	if err != nil {
		t.Fatal(err)
	}
	me, err := bobC.Me(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var team string
	for _, i := range me.User.Identities {
		if i.Kind == store.IdentitySlack && i.Subject == se.bob.ID {
			team = i.Issuer
		}
	}
	if team == "" {
		t.Fatalf("usr-bobby's identities after Link: %+v; want bob's Slack account", me.User.Identities)
	}

	row := `.identities-table tr[data-kind="slack"][data-subject="` + se.bob.ID + `"]`
	// The admin page lists it among usr-bobby's accounts.
	adminTok, err := os.ReadFile(filepath.Join(se.e.home, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	ap := p.Person()
	ap.Run("the admin opens the admin page", chromedp.Navigate(se.s.url+"/#/admin"))
	ap.Run("signing in with the admin token", chromedp.WaitVisible(`form.signin #token`),
		chromedp.SendKeys(`form.signin #token`, strings.TrimSpace(string(adminTok))), chromedp.Click(`form.signin button[type=submit]`))
	ap.Run("usr-bobby's accounts", chromedp.Click(`tr[data-user="usr-bobby"] button.show-identities`))
	ap.Wait("the Slack account on the admin page", browsertest.HasText(`.identities[data-user="usr-bobby"] `+row, "@bob"))
	ap.Shot("slack-link-admin")
	p.Run("the person's page", chromedp.Click(`.link-done a.to-me`))
	p.Wait("the Slack account listed", browsertest.HasText(row, "@bob"))
	p.Shot("slack-link-me")
	p.Run("Unlink", chromedp.Click(row+` button.unlink`))
	p.Wait("the account gone", `document.querySelector('`+row+`') === null && document.querySelector(".identities-table") !== null`)
	if u, err := bobC.Me(ctx); err != nil || len(u.User.Identities) != 0 {
		t.Errorf("usr-bobby's identities after Unlink: %+v, %v; want none", u, err)
	}
	// A used link says so.
	p.Run("the link again", chromedp.Navigate(se.s.url+"/#/link/slack/"+code))
	p.Wait("the link is gone", browsertest.HasText(".link-error", "used already or expired"))
	if strings.Contains(browsertest.Eval[string](p, `document.body.innerText`), bobTok) {
		t.Error("the page shows the token")
	}
}
