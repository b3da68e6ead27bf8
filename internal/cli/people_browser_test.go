package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/internal/browsertest"
	"github.com/harvest-dev/harvest/internal/testbin"
	"github.com/harvest-dev/harvest/internal/testoidc"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/sim/ghsim"
)

// TestPeopleInChromium is issue 27's acceptance in a real Chromium,
// against the real `harvest serve` with the GitHub stand-in and a real
// OpenID Provider (zitadel's example), each person in a browser window of
// their own:
//
//   - Grace signs in through the provider's login form and lands on her
//     (empty) list;
//   - Ada comments on an issue; GitHub's webhook starts a session that is
//     hers, and once she signs in with GitHub she finds it in her list,
//     under Mine too, with no token anywhere;
//   - Eve, on GitHub without access to the repository, sees nothing of
//     it: not in her list, not at its URL, and its event stream, diff and
//     shell are refused (and the audit log is not hers to read);
//   - Mallory, with read access on GitHub, reads it but gets no enabled
//     controls, and the API refuses her send;
//   - the admin makes Ada a viewer on the admin page: from her next page
//     on she has no enabled controls either, and her send and cancel
//     through the API are refused, saying she is a viewer.
//
// The audit log then has one entry per action, each with its user and
// channel.
func TestPeopleInChromium(t *testing.T) {
	g := newGHEnv(t)
	if _, err := g.gs.AddUser(ghsim.UserSpec{Login: "eve", Name: "Eve Adams"}); err != nil {
		t.Fatal(err)
	}
	if err := g.gs.SetPermission(ghsim.PermissionSpec{Repo: "acme/calc", Login: "eve", Permission: ghsim.PermNone}); err != nil {
		t.Fatal(err)
	}
	// The server's address is its public URL, where the browsers reach
	// it and the providers send them back.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	base := "http://" + addr
	dir := t.TempDir()
	ghSecret, idpSecret := filepath.Join(dir, "github-client-secret"), filepath.Join(dir, "oidc-client-secret")
	os.WriteFile(ghSecret, []byte(g.app.ClientSecret+"\n"), 0o600)
	os.WriteFile(idpSecret, []byte("idp-secret\n"), 0o600)
	if err := g.gs.SetCallbackURLs(g.app.ID, []string{base + "/v1/auth/github/callback"}); err != nil {
		t.Fatal(err)
	}
	idp := testoidc.Listen(t)
	idp.Serve(t, "harvest", "idp-secret", base+"/v1/auth/oidc/callback",
		testoidc.User{ID: "sub-grace", Username: "grace", Password: "pw-grace", FirstName: "Grace", LastName: "Hopper", Email: "grace@example.com", EmailVerified: true})
	e, s := g.serve(t, "--listen", addr, "--public-url", base,
		"--github-client-id", g.app.ClientID, "--github-client-secret-file", ghSecret,
		"--oidc-issuer", idp.Issuer, "--oidc-client-id", "harvest", "--oidc-client-secret-file", idpSecret,
		"--oidc-name", "Example SSO", "--oidc-allowed-domains", "example.com")
	admin := e.client(s)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	adminMe, err := admin.Me(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// The admin, with the token harvest serve wrote.
	tok, err := os.ReadFile(filepath.Join(e.home, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	ap := browsertest.New(t)
	ap.Run("opening the page", chromedp.Navigate(base+"/"))
	ap.Run("signing in with the admin token", chromedp.WaitVisible(`form.signin #token`),
		chromedp.SendKeys(`form.signin #token`, strings.TrimSpace(string(tok))), chromedp.Click(`form.signin button[type=submit]`))
	ap.Wait("the admin's list and the Admin link", `document.querySelector("table.sessions") !== null && document.querySelector("nav a.admin-link") !== null`)

	// Grace, through the provider's login form.
	gp := ap.Person()
	gp.Run("opening the page", chromedp.Navigate(base+"/"))
	gp.Wait("the OIDC button", browsertest.HasText("#signin-oidc", "Sign in with Example SSO"))
	gp.Run("choosing the OIDC provider", chromedp.Click(`#signin-oidc`))
	gp.Run("the provider's login form", chromedp.WaitVisible(`#username`))
	gp.Run("signing in at the provider", chromedp.SendKeys(`#username`, "grace"), chromedp.SendKeys(`#password`, "pw-grace"),
		chromedp.Click(`button[type=submit]`))
	gp.Run("back at Harvest", chromedp.WaitVisible(`nav .who`))
	gp.Wait("Grace's list", browsertest.HasText("nav .who", "Grace Hopper")+` && `+browsertest.HasText("table.sessions .empty", "No sessions"))
	gp.Wait("no Admin link for Grace", `document.querySelector("nav a.admin-link") === null`)
	gp.Run("Grace opens the admin page anyway", chromedp.Navigate(base+"/#/admin"))
	gp.Wait("admins only", browsertest.HasText(".admins-only", "Admins only"))
	if st := browsertest.Eval[int](gp, `fetch("/v1/users").then(r => r.status)`); st != 403 {
		t.Errorf("Grace's GET /v1/users: %d, want 403", st)
	}
	gp.Shot("people-grace-admins-only")

	// Ada comments on GitHub: the session is hers.
	started := adaAsks(t, ctx, g, admin)
	id := started.ID
	row := fmt.Sprintf(`document.querySelector('table.sessions tr[data-id=%q]')`, id)

	pp := ap.Person()
	githubSignIn(pp, base, "ada")
	pp.Wait("Ada's session in her list", row+` !== null && `+browsertest.HasText(`table.sessions tr[data-id="`+id+`"] td.whose`, "you"))
	pp.Run("Mine", chromedp.Click(`.scopes button.scope-mine`))
	pp.Wait("Ada's session under Mine", `document.querySelector(".scope-mine").getAttribute("aria-pressed") === "true" && `+row+` !== null`)
	pp.Run("reloading", chromedp.Reload())
	pp.Wait("Mine remembered", `document.querySelector(".scope-mine")?.getAttribute("aria-pressed") === "true" && `+row+` !== null`)
	pp.Shot("people-ada-mine")
	adaUser := browsertest.Eval[string](pp, `fetch("/v1/me").then(r => r.json()).then(m => m.user.id + " " + m.signed_in_via + " " + (m.token ? "token" : "no token"))`)
	if want := started.User + " github no token"; adaUser != want {
		t.Fatalf("Ada's /v1/me: %q, want %q", adaUser, want)
	}
	adaUser = started.User
	pp.Run("Ada opens her session", chromedp.Navigate(base+"/#/s/"+id))
	pp.Wait("her controls, enabled", `["button.send", "button.cancel", "button.delete"].every(s => document.querySelector(".composer " + s)?.disabled === false) && document.querySelector(".composer .read-only")?.hidden === true`)

	// Eve: no access to acme/calc on GitHub.
	ep := ap.Person()
	githubSignIn(ep, base, "eve")
	for _, scope := range []string{"visible", "mine"} {
		ep.Run("Eve's list, "+scope, chromedp.Click(`.scopes button.scope-`+scope))
		ep.Wait("Eve's list, "+scope, `document.querySelector(".scope-`+scope+`").getAttribute("aria-pressed") === "true" && document.querySelector("table.sessions .empty") !== null`)
		if n := browsertest.Eval[int](ep, fmt.Sprintf(`fetch("/v1/sessions?scope=%s").then(r => r.json()).then(l => l.sessions.length)`, scope)); n != 0 {
			t.Errorf("Eve lists %d sessions (%s), want none", n, scope)
		}
	}
	for _, path := range []string{"", "/events", "/diff", "/log"} {
		if st := browsertest.Eval[int](ep, `fetch("/v1/sessions/`+id+path+`").then(r => r.status)`); st != 404 {
			t.Errorf("Eve's GET /v1/sessions/%s%s: %d, want 404", id, path, st)
		}
	}
	if got := browsertest.Eval[string](ep, `new Promise(res => { const ws = new WebSocket("ws://" + location.host + "/v1/sessions/`+id+`/shell");
		ws.onopen = () => { res("open"); ws.close(); }; ws.onclose = (e) => res("closed " + e.code); })`); got != "closed 1006" {
		t.Errorf("Eve's shell: %s, want refused (closed 1006)", got)
	}
	if st := browsertest.Eval[int](ep, `fetch("/v1/audit").then(r => r.status)`); st != 403 {
		t.Errorf("Eve reads the audit log: %d, want 403", st)
	}
	eveUser := browsertest.Eval[string](ep, `fetch("/v1/me").then(r => r.json()).then(m => m.user.id)`)
	// Each refused read is in the audit log once, as session.read (before
	// the page below reads the session and its stream again).
	reads, err := admin.Audit(ctx, client.AuditOptions{User: eveUser, Action: "session.read", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"", "/events", "/diff", "/log"} {
		n := 0
		for _, a := range reads.Entries {
			if a.Target == id && a.Result == "not_found" && a.Channel == "ui" && strings.Contains(string(a.Detail), `"GET /v1/sessions/`+id+path+`"`) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("Eve's refused GET /v1/sessions/%s%s: %d audit entries, want 1", id, path, n)
		}
	}
	ep.Run("Eve opens the session's URL", chromedp.Navigate(base+"/#/s/"+id))
	ep.Wait("not found", browsertest.HasText("main .gone", "not found")+` && document.querySelector(".composer") === null`)
	ep.Shot("people-eve-not-found")

	// Mallory: read access on GitHub.
	mp := ap.Person()
	githubSignIn(mp, base, "mallory")
	mp.Wait("the session in Mallory's list", row+` !== null`)
	mp.Run("Mallory opens it", chromedp.Navigate(base+"/#/s/"+id))
	mp.Wait("no enabled controls for a reader", readOnlyPage)
	mp.Shot("people-mallory-read-only")
	if got := send(mp, id, "messages", `{"text":"hi"}`); !strings.HasPrefix(got, "403 ") || !strings.Contains(got, "@mallory has read access to acme/calc") {
		t.Errorf("Mallory sends through the API: %s; want a 403 saying GitHub gives her read", got)
	}
	mallory := browsertest.Eval[string](mp, `fetch("/v1/me").then(r => r.json()).then(m => m.user.id)`)

	// The admin makes Ada a viewer on the admin page.
	ap.Run("the admin page", chromedp.Click(`nav a.admin-link`))
	user := fmt.Sprintf(`tr[data-user=%q]`, adaUser)
	ap.Wait("Ada's row", `document.querySelector('`+user+` select.role') !== null`)
	// (SetValue fires the select's input and change events, as a choice.)
	ap.Run("making Ada a viewer", chromedp.SetValue(user+` select.role`, "viewer"))
	ap.Wait("Ada a viewer", browsertest.HasText(".users-status", "Ada Lovelace is now a viewer")+` && document.querySelector('`+user+` select.role').value === "viewer"`)
	ap.Run("Ada's tokens", chromedp.Click(user+` button.show-tokens`))
	ap.Wait("Ada has no token", browsertest.HasText(".tokens-table .empty", "No tokens"))
	ap.Shot("people-admin-page")
	if u, err := admin.GetUser(ctx, adaUser); err != nil || u.Role != "viewer" {
		t.Fatalf("Ada after the admin page: %+v, %v; want a viewer", u, err)
	}
	grace := browsertest.Eval[string](gp, `fetch("/v1/me").then(r => r.json()).then(m => m.user.id)`)
	adminPageActions(t, ap, base, adminMe.User.ID, adaUser, grace)
	pp.Run("Ada's next page", chromedp.Reload())
	pp.Wait("no enabled controls for a viewer", readOnlyPage)
	pp.Shot("people-ada-viewer")
	pp.Run("Ada, a viewer, opens New session", chromedp.Navigate(base+"/#/new"))
	pp.Wait("no Start for a viewer", `document.querySelector("form.new button[type=submit]")?.disabled === true && `+browsertest.HasText("form.new .error", "You are a viewer"))
	for _, what := range []string{"messages", "cancel"} {
		body := "{}"
		if what == "messages" {
			body = `{"text":"hi"}`
		}
		if got := send(pp, id, what, body); !strings.HasPrefix(got, "403 ") || !strings.Contains(got, "is a viewer") {
			t.Errorf("Ada, a viewer, POST %s: %s; want a 403 saying she is a viewer", what, got)
		}
	}

	// The admin may delete it: the page asks once more, then does.
	ap.Run("the admin opens the session", chromedp.Navigate(base+"/#/s/"+id))
	ap.Wait("the admin's controls, enabled", `document.querySelector(".composer button.delete")?.disabled === false`)
	ap.Run("Delete", chromedp.Click(`.composer button.delete`))
	ap.Wait("asked again", browsertest.HasText(".composer button.delete", "Click again to delete"))
	ap.Run("Delete, again", chromedp.Click(`.composer button.delete`))
	ap.Wait("back on the list, without it", `document.querySelector("table.sessions tbody tr") !== null && `+row+` === null`)
	if _, err := admin.GetSession(ctx, id); client.StatusOf(err) != 404 {
		t.Errorf("the session after the page deleted it: %v, want a 404", err)
	}

	// The audit log: one entry per action, each with its user and channel.
	l, err := admin.Audit(ctx, client.AuditOptions{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	type key struct{ action, user, channel, result string }
	count := map[key]int{}
	for _, a := range l.Entries {
		count[key{a.Action, a.User, a.Channel, a.Result}]++
	}
	for _, c := range []struct {
		k    key
		what string
	}{
		{key{"auth.sign_in", adminMe.User.ID, "ui", "ok"}, "the admin's sign-in"},
		{key{"auth.sign_in", adaUser, "ui", "ok"}, "Ada's sign-in"},
		{key{"auth.sign_in", eveUser, "ui", "ok"}, "Eve's sign-in"},
		{key{"auth.sign_in", mallory, "ui", "ok"}, "Mallory's sign-in"},
		{key{"session.create", adaUser, "github", "ok"}, "the session Ada's comment started"},
		{key{"user.update", adminMe.User.ID, "ui", "ok"}, "the admin making Ada a viewer"},
		{key{"session.shell", eveUser, "ui", "not_found"}, "Eve's refused shell"},
		{key{"session.send", mallory, "ui", "forbidden"}, "Mallory's refused send"},
		{key{"session.send", adaUser, "ui", "forbidden"}, "Ada's refused send"},
		{key{"session.cancel", adaUser, "ui", "forbidden"}, "Ada's refused cancel"},
		{key{"user.update", adminMe.User.ID, "ui", "conflict"}, "the admin's refused demotion of themselves"},
		{key{"token.create", adminMe.User.ID, "ui", "ok"}, "the token the admin made for Ada"},
		{key{"token.delete", adminMe.User.ID, "ui", "ok"}, "its revocation"},
		{key{"team.create", adminMe.User.ID, "ui", "ok"}, "the team"},
		{key{"team.add_member", adminMe.User.ID, "ui", "ok"}, "Grace put in it"},
		{key{"session.delete", adminMe.User.ID, "ui", "ok"}, "the admin deleting the session"},
	} {
		if n := count[c.k]; n != 1 {
			t.Errorf("%s: %d audit entries %+v, want 1", c.what, n, c.k)
		}
	}
	if n := count[key{"auth.sign_in", grace, "ui", "ok"}]; n != 1 {
		t.Errorf("Grace's sign-in: %d audit entries, want 1", n)
	}
}

// readOnlyPage: a session's page with no enabled control to act on it,
// saying why.
const readOnlyPage = `["textarea", "button.send", "button.interrupt", "button.cancel", "button.delete"].every(s => document.querySelector(".composer " + s)?.disabled === true) &&
	document.querySelector(".composer .read-only")?.hidden === false && document.querySelector(".shell button.connect")?.disabled === true`

// send posts body to /v1/sessions/ID/WHAT from p's page, with its
// sign-in's CSRF token, as the page would: "STATUS message".
func send(p *browsertest.Page, id, what, body string) string {
	p.T.Helper()
	return browsertest.Eval[string](p, fmt.Sprintf(`(async () => {
		const me = await (await fetch("/v1/auth/session")).json();
		const r = await fetch("/v1/sessions/%s/%s", {method: "POST", headers: {"Content-Type": "application/json", "X-Harvest-CSRF": me.csrf_token}, body: %q});
		const b = await r.json().catch(() => ({}));
		return r.status + " " + (b.error ? b.error.message : "");
	})()`, id, what, body))
}

// githubSignIn signs login in with GitHub from p: the stand-in's sign-in
// page, then its Authorize page, back to their list.
func githubSignIn(p *browsertest.Page, base, login string) {
	p.T.Helper()
	p.Run("opening the page", chromedp.Navigate(base+"/"))
	p.Wait("the GitHub button", browsertest.HasText("#signin-github", "Sign in with GitHub"))
	p.Run("choosing GitHub", chromedp.Click(`#signin-github`))
	p.Run("GitHub's sign-in", chromedp.WaitVisible(`#login_field`))
	p.Run("signing in at GitHub as "+login, chromedp.SendKeys(`#login_field`, login), chromedp.Click(`#sign-in`))
	p.Run("the authorization page", chromedp.WaitVisible(`#js-oauth-authorize-btn`))
	p.Run("authorizing", chromedp.Click(`#js-oauth-authorize-btn`))
	p.Run("back at Harvest", chromedp.WaitVisible(`nav .who`))
	p.Wait(login+"'s list", `document.querySelector("nav .who") !== null && document.querySelector("table.sessions tbody tr") !== null`)
}

// adminPageActions: on the admin page (ap, the admin's), a refusal from
// the API is shown where the action was tried (an admin does not demote
// themselves); a token made for Ada is shown once and works, and once
// revoked does not; a team is made and Grace put in it.
func adminPageActions(t *testing.T, ap *browsertest.Page, base, adminUser, ada, grace string) {
	t.Helper()
	ctx := testbin.Context(t)
	self := fmt.Sprintf(`tr[data-user=%q]`, adminUser)
	ap.Run("the admin demoting themselves", chromedp.SetValue(self+` select.role`, "member"))
	ap.Wait("the API's refusal, shown", browsertest.HasText(".users-error", "does not demote or disable themselves")+
		` && document.querySelector('`+self+` select.role').value === "admin"`)

	ap.Run("a token for Ada", chromedp.SendKeys(`form.new-token input[name=token-name]`, "laptop"), chromedp.Click(`form.new-token button[type=submit]`))
	ap.Wait("its secret, shown once, and the token listed", `(document.querySelector(".tokens .token-secret")?.textContent ?? "").startsWith("`+server.TokenPrefix+`") &&
		document.querySelectorAll(".tokens-table tr[data-token]").length === 1`)
	ap.Shot("people-admin-token")
	secret := browsertest.Eval[string](ap, `document.querySelector(".tokens .token-secret").textContent`)
	tc, err := client.New(base, secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	if me, err := tc.Me(ctx); err != nil || me.User == nil || me.User.ID != ada {
		t.Fatalf("the token made on the admin page: %+v, %v; want Ada's", me, err)
	}
	ap.Run("revoking it", chromedp.Click(`.tokens-table tr[data-token] button.revoke`))
	ap.Wait("no token again", browsertest.HasText(".tokens-table .empty", "No tokens"))
	if _, err := tc.Me(ctx); client.StatusOf(err) != 401 {
		t.Errorf("the revoked token: %v, want a 401", err)
	}

	ap.Run("a team", chromedp.SendKeys(`form.new-team input[name=team-name]`, "qa"), chromedp.Click(`form.new-team button[type=submit]`))
	ap.Wait("the team", `document.querySelector('tr[data-team="qa"] select') !== null`)
	ap.Run("Grace joins it", chromedp.SetValue(`tr[data-team="qa"] select`, grace))
	ap.Wait("Grace in qa", browsertest.HasText(`tr[data-team="qa"] .member`, "Grace Hopper"))
}
