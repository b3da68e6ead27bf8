package server_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/harvest-dev/harvest/internal/browsertest"
	"github.com/harvest-dev/harvest/internal/testoidc"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/sim/ghsim"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/web"
)

// TestSignInInChromium: in a real Chromium, one person signs in through
// the OIDC provider's real login form (zitadel's example OpenID
// Provider) and another through the GitHub stand-in's sign-in and
// "Authorize" page; each lands on their list, signed in as the user of
// their identity, with no token.
func TestSignInInChromium(t *testing.T) {
	gh, err := ghsim.Start(ghsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gh.Close() })
	app, err := gh.CreateApp(ghsim.AppSpec{Slug: "harvest-signin", Name: "Harvest"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gh.AddUser(ghsim.UserSpec{Login: "ada", Name: "Ada Lovelace"}); err != nil {
		t.Fatal(err)
	}
	idp := testoidc.Listen(t)
	e := newAPIEnv(t)
	api, err := server.New(server.Config{Manager: e.Manager, Store: e.Store, UI: web.Handler(), Secrets: e.Store, SecretKey: e.SecretKey,
		SignIn: server.SignIn{
			GitHub: &server.GitHubSignIn{WebURL: gh.URL(), APIURL: gh.URL() + "/api/v3", ClientID: app.ClientID, ClientSecret: app.ClientSecret, Role: store.RoleMember},
			OIDC:   &server.OIDCSignIn{Issuer: idp.Issuer, ClientID: "harvest", ClientSecret: "idp-secret", Name: "Example SSO", AllowedDomains: []string{"example.com"}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	hs := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); hs.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		api.Drain()
		if err := hs.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("shutting the server down: %v", err)
		}
		<-done
	})
	if err := gh.SetCallbackURLs(app.ID, []string{base + "/v1/auth/github/callback"}); err != nil {
		t.Fatal(err)
	}
	idp.Serve(t, "harvest", "idp-secret", base+"/v1/auth/oidc/callback", oidcPeople...)

	// Grace, with the provider's login form.
	p := browsertest.New(t)
	p.Run("opening the page", chromedp.Navigate(base+"/"))
	p.Wait("the OIDC button", browsertest.HasText("#signin-oidc", "Sign in with Example SSO"))
	p.Wait("the GitHub button", browsertest.HasText("#signin-github", "Sign in with GitHub"))
	p.Run("the token form is still there", chromedp.WaitVisible(`form.signin #token`))
	p.Shot("signin-buttons")
	p.Run("choosing the OIDC provider", chromedp.Click(`#signin-oidc`))
	p.Run("the provider's login form", chromedp.WaitVisible(`#username`))
	p.Shot("oidc-login-form")
	p.Run("signing in at the provider", chromedp.SendKeys(`#username`, "grace"), chromedp.SendKeys(`#password`, "pw-grace"),
		chromedp.Click(`button[type=submit]`))
	p.Run("back at Harvest", chromedp.WaitVisible(`nav .who`))
	p.Wait("Grace's list", browsertest.HasText("nav .who", "Grace Hopper")+` && `+browsertest.HasText("main h1", "Sessions"))
	p.Shot("oidc-signed-in")
	if via := browsertest.Eval[string](p, `fetch("/v1/me").then(r => r.json()).then(m => m.signed_in_via + " " + m.user.identities[0].kind + " " + m.user.identities[0].subject + " " + m.user.identities[0].email)`); via != "oidc oidc sub-grace grace@example.com" {
		t.Fatalf("GET /v1/me in Grace's browser: %q", via)
	}

	// Ada, with GitHub: the stand-in's sign-in, then its Authorize page.
	q := browsertest.New(t)
	q.Run("opening the page", chromedp.Navigate(base+"/"))
	q.Wait("the GitHub button", browsertest.HasText("#signin-github", "Sign in with GitHub"))
	q.Run("choosing GitHub", chromedp.Click(`#signin-github`))
	q.Run("GitHub's sign-in", chromedp.WaitVisible(`#login_field`))
	q.Run("signing in at GitHub", chromedp.SendKeys(`#login_field`, "ada"), chromedp.Click(`#sign-in`))
	q.Run("the authorization page", chromedp.WaitVisible(`#js-oauth-authorize-btn`))
	q.Shot("github-authorize")
	q.Run("authorizing", chromedp.Click(`#js-oauth-authorize-btn`))
	q.Run("back at Harvest", chromedp.WaitVisible(`nav .who`))
	q.Wait("Ada's list", browsertest.HasText("nav .who", "Ada Lovelace")+` && `+browsertest.HasText("main h1", "Sessions"))
	q.Shot("github-signed-in")
	if via := browsertest.Eval[string](q, `fetch("/v1/me").then(r => r.json()).then(m => m.signed_in_via + " " + m.user.identities[0].kind + " " + m.user.identities[0].login)`); via != "github github ada" {
		t.Fatalf("GET /v1/me in Ada's browser: %q", via)
	}

	// Signing out from the page: back to the sign-in page, the cookie dead.
	q.Run("signing out", chromedp.Click(`nav button`))
	q.Run("the sign-in page again", chromedp.WaitVisible(`#signin-github`))
	if st := browsertest.Eval[int](q, `fetch("/v1/me").then(r => r.status)`); st != http.StatusUnauthorized {
		t.Fatalf("GET /v1/me after signing out: %d", st)
	}
}
