package gh

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/harvest-dev/harvest/sim/ghsim"
)

// installationLookups counts the app's requests for a repository's
// installation.
func (s *standIn) installationLookups(repo string) int {
	n := 0
	for _, r := range s.gs.Requests() {
		if r.Method == http.MethodGet && r.Path == "/api/v3/repos/"+repo+"/installation" {
			n++
		}
	}
	return n
}

// TestReach: an app reaches the repositories it is installed on (the
// installation asked once, then cached) and not the others, nor ones that
// do not exist: GitHub's no wraps ErrNoAccess and says what to do; a
// token reaches what its account may see; a GitHub that does not answer
// is not a no.
func TestReach(t *testing.T) {
	s := newStandIn(t)
	g := s.github(t)
	ctx := context.Background()
	for range 2 {
		if err := g.Reach(ctx, "acme/app"); err != nil {
			t.Fatalf("a repository the app is installed on: %v", err)
		}
	}
	if n := s.installationLookups("acme/app"); n != 1 {
		t.Errorf("the installation of acme/app was asked %d times, want once", n)
	}
	if _, err := s.gs.CreateRepo(ctx, ghsim.RepoSpec{Owner: "stranger", Name: "x", Dir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	for _, repo := range []string{"stranger/x", "acme/nothere"} {
		err := g.Reach(ctx, repo)
		if !errors.Is(err, ErrNoAccess) || !strings.Contains(err.Error(), "not installed on it") {
			t.Errorf("%s: %v; want ErrNoAccess saying the app is not installed", repo, err)
		}
	}
	if err := g.Reach(ctx, "acme"); err == nil || errors.Is(err, ErrNoAccess) || !strings.Contains(err.Error(), "give owner/name") {
		t.Errorf("a malformed name: %v", err)
	}

	// A person's token: the private repository once the person may read it.
	ada, err := s.gs.AddUser(ghsim.UserSpec{Login: "ada"})
	if err != nil {
		t.Fatal(err)
	}
	tg, err := New(Config{APIURL: s.gs.URL() + "/api/v3/", WebURL: s.gs.URL() + "/", Token: ada.Token, Now: s.clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Reach(ctx, "acme/app"); !errors.Is(err, ErrNoAccess) || !strings.Contains(err.Error(), "token cannot see it") {
		t.Errorf("a private repository the token's account cannot see: %v", err)
	}
	if err := s.gs.SetPermission(ghsim.PermissionSpec{Repo: "acme/app", Login: "ada", Permission: "read"}); err != nil {
		t.Fatal(err)
	}
	if err := tg.Reach(ctx, "acme/app"); err != nil {
		t.Errorf("a repository the token's account may read: %v", err)
	}

	// Nobody answering: an error, not a no.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() + "/api/v3/"
	ln.Close()
	for _, cfg := range []Config{
		{APIURL: dead, AppID: s.app.ID, PrivateKey: []byte(s.app.PrivateKeyPEM)},
		{APIURL: dead, Token: ada.Token},
	} {
		d, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Reach(ctx, "acme/app"); err == nil || errors.Is(err, ErrNoAccess) {
			t.Errorf("a GitHub that does not answer (app %v): %v; want an error that is not ErrNoAccess", d.IsApp(), err)
		}
	}
}
