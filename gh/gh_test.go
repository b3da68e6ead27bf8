package gh

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/sim/ghsim"
)

// standIn is the GitHub stand-in with an app installed on acme (two
// repositories) and on other (one), and a clock both sides share.
type standIn struct {
	gs   *ghsim.Server
	app  ghsim.App
	now  atomic.Pointer[time.Time]
	inst map[string]int64 // account → installation
}

func newStandIn(t *testing.T) *standIn {
	t.Helper()
	s := &standIn{inst: map[string]int64{}}
	start := time.Now()
	s.now.Store(&start)
	gs, err := ghsim.Start(ghsim.Options{Now: s.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gs.Close() })
	s.gs = gs
	if s.app, err = gs.CreateApp(ghsim.AppSpec{Slug: "harvest", Name: "Harvest"}); err != nil {
		t.Fatal(err)
	}
	for _, acct := range []string{"acme", "other"} {
		if s.inst[acct], err = gs.CreateInstallation(ghsim.InstallationSpec{AppID: s.app.ID, Account: acct}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []string{"acme/app", "acme/lib", "other/x"} {
		owner, name, _ := strings.Cut(r, "/")
		if _, err := gs.CreateRepo(context.Background(), ghsim.RepoSpec{Owner: owner, Name: name, Dir: t.TempDir(), Private: true}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (s *standIn) clock() time.Time        { return *s.now.Load() }
func (s *standIn) advance(d time.Duration) { n := s.clock().Add(d); s.now.Store(&n) }

func (s *standIn) github(t *testing.T) *GitHub {
	t.Helper()
	g, err := New(Config{APIURL: s.gs.URL() + "/api/v3/", WebURL: s.gs.URL() + "/", AppID: s.app.ID,
		PrivateKey: []byte(s.app.PrivateKeyPEM), Now: s.clock})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// mints counts the installation tokens the stand-in minted.
func (s *standIn) mints() int {
	n := 0
	for _, r := range s.gs.Requests() {
		if r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/access_tokens") && r.Status == http.StatusCreated {
			n++
		}
	}
	return n
}

// TestInstallationTokens: a token is minted for exactly the scope's
// repositories and permissions, works for them and not for others, is
// cached (one mint however many callers at once), and is replaced near
// its expiry; repositories of two installations cannot share a token.
func TestInstallationTokens(t *testing.T) {
	s := newStandIn(t)
	g := s.github(t)
	ctx := context.Background()
	scope := SessionScope("acme/app")

	var wg sync.WaitGroup
	toks := make([]Token, 8)
	errs := make([]error, 8)
	for i := range toks {
		wg.Add(1)
		go func() { defer wg.Done(); toks[i], errs[i] = g.Token(ctx, scope) }()
	}
	wg.Wait()
	for i := range toks {
		if errs[i] != nil || toks[i].Value != toks[0].Value || !strings.HasPrefix(toks[0].Value, "ghs_") {
			t.Fatalf("caller %d: %v, %v", i, toks[i], errs[i])
		}
	}
	if n := s.mints(); n != 1 {
		t.Fatalf("%d tokens minted for 8 concurrent callers, want 1", n)
	}
	if strings.Contains(toks[0].String(), toks[0].Value) {
		t.Fatal("Token.String shows the token")
	}

	// The token reaches acme/app, and not acme/lib (same installation, not
	// in the scope).
	c, err := g.Client(scope)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Repositories.Get(ctx, "acme", "app"); err != nil {
		t.Fatalf("the scoped repository: %v", err)
	}
	if _, resp, err := c.Repositories.Get(ctx, "acme", "lib"); err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a repository outside the scope: %v", err)
	}
	// Its permissions are the scope's: it may comment on issues, not
	// administer.
	var mintBody string
	for _, r := range s.gs.Requests() {
		if strings.HasSuffix(r.Path, "/access_tokens") {
			mintBody = string(r.Body)
		}
	}
	for _, want := range []string{`"repositories":["app"]`, `"contents":"write"`, `"pull_requests":"write"`} {
		if !strings.Contains(mintBody, want) {
			t.Errorf("the token request %s lacks %s", mintBody, want)
		}
	}

	// Cached until five minutes before expiry, then replaced.
	s.advance(50 * time.Minute)
	if t2, _ := g.Token(ctx, scope); t2.Value != toks[0].Value || s.mints() != 1 {
		t.Fatalf("at 50 minutes the token was replaced (%d mints)", s.mints())
	}
	s.advance(6 * time.Minute)
	t3, err := g.Token(ctx, scope)
	if err != nil || t3.Value == toks[0].Value || s.mints() != 2 {
		t.Fatalf("at 56 minutes: %v, %d mints; want a new token", err, s.mints())
	}
	if _, _, err := c.Repositories.Get(ctx, "acme", "app"); err != nil {
		t.Fatalf("the client after the refresh: %v", err)
	}

	// Another scope is another token; two installations cannot share one.
	if t4, err := g.Token(ctx, SessionScope("acme/app", "acme/lib")); err != nil || t4.Value == t3.Value {
		t.Fatalf("a wider scope: %v", err)
	}
	if _, err := g.Token(ctx, SessionScope("acme/app", "other/x")); err == nil || !strings.Contains(err.Error(), "different installations") {
		t.Fatalf("two installations: %v", err)
	}
	if _, err := g.Token(ctx, SessionScope("nobody/none")); err == nil || !strings.Contains(err.Error(), "not installed") {
		t.Fatalf("a repository the app is not on: %v", err)
	}
}

// TestAppIdentity: the bot is the app's slug[bot]; a wrong key is refused
// with a message that says what to check.
func TestAppIdentity(t *testing.T) {
	s := newStandIn(t)
	g := s.github(t)
	bot, err := g.Bot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if bot.Login != "harvest[bot]" || bot.Handle() != "@harvest" || bot.Name != "Harvest" {
		t.Fatalf("bot = %+v", bot)
	}
	wrong, err := New(Config{APIURL: s.gs.URL() + "/api/v3/", AppID: s.app.ID, PrivateKey: testKey(t), Now: s.clock})
	if err != nil {
		t.Fatal(err)
	}
	_, err = wrong.Token(context.Background(), SessionScope("acme/app"))
	if err == nil || !strings.Contains(err.Error(), "check the app id and private key") {
		t.Fatalf("a wrong key: %v", err)
	}
}

// TestGranted: what an installation was granted is read with the
// installation (no request of its own), and read again once the
// installation is forgotten (new_permissions_accepted).
func TestGranted(t *testing.T) {
	s := &standIn{inst: map[string]int64{}}
	start := time.Now()
	s.now.Store(&start)
	gs, err := ghsim.Start(ghsim.Options{Now: s.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gs.Close() })
	s.gs = gs
	asked := map[string]string{"metadata": "read", "contents": "write", "checks": "write"}
	if s.app, err = gs.CreateApp(ghsim.AppSpec{Slug: "harvest", Permissions: asked}); err != nil {
		t.Fatal(err)
	}
	inst, err := gs.CreateInstallation(ghsim.InstallationSpec{AppID: s.app.ID, Account: "acme",
		Permissions: map[string]string{"metadata": "read", "contents": "write", "checks": "read"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gs.CreateRepo(context.Background(), ghsim.RepoSpec{Owner: "acme", Name: "app", Dir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	g := s.github(t)
	ctx := context.Background()
	granted := func(perm, level string) bool {
		t.Helper()
		ok, err := g.Granted(ctx, "acme/app", perm, level)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !granted("checks", "read") || granted("checks", "write") || !granted("contents", "write") || !granted("contents", "read") || granted("issues", "read") {
		t.Errorf("granted checks:read, contents:write: checks read %v write %v, contents read %v write %v, issues read %v",
			granted("checks", "read"), granted("checks", "write"), granted("contents", "read"), granted("contents", "write"), granted("issues", "read"))
	}
	finds := func() int {
		n := 0
		for _, r := range gs.Requests() {
			if strings.HasSuffix(r.Path, "/repos/acme/app/installation") {
				n++
			}
		}
		return n
	}
	if n := finds(); n != 1 {
		t.Errorf("the installation was asked for %d times; want once", n)
	}
	if err := gs.AcceptPermissions(ghsim.InstallationPermissionsSpec{InstallationID: inst, Permissions: asked}); err != nil {
		t.Fatal(err)
	}
	if granted("checks", "write") {
		t.Error("checks:write before the installation was forgotten: want the cached answer")
	}
	g.ForgetInstallation(inst)
	if !granted("checks", "write") {
		t.Error("checks:write accepted, the installation forgotten: still not granted")
	}
	if n := finds(); n != 2 {
		t.Errorf("the installation was asked for %d times; want twice", n)
	}
	tok, err := New(Config{APIURL: gs.URL() + "/api/v3/", Token: "ghp_x"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := tok.Granted(ctx, "acme/app", "checks", "read"); ok || err != nil {
		t.Errorf("a token's Granted: %v, %v; want false (an app's installations only)", ok, err)
	}
}
