package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestSignInFlags: harvest serve's sign-in flags make the server's
// configuration, and each mistake is refused with what to do.
func TestSignInFlags(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "secret")
	open := filepath.Join(dir, "open")
	os.WriteFile(good, []byte("s3cret\n"), 0o600)
	os.WriteFile(open, []byte("s3cret\n"), 0o644)
	parse := func(args ...string) (*signInFlags, *githubFlags) {
		fl := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		var s signInFlags
		var g githubFlags
		g.add(fl)
		s.add(fl)
		if err := fl.Parse(args); err != nil {
			t.Fatal(err)
		}
		return &s, &g
	}
	s, g := parse("--github-client-id", "Iv1.abc", "--github-client-secret-file", good, "--github-url", "https://ghe.example/",
		"--oidc-issuer", "https://idp.example.com", "--oidc-client-id", "harvest", "--oidc-client-secret-file", good, "--oidc-name", "Okta",
		"--oidc-allowed-domains", "Example.com,corp.example", "--oidc-role-claim", "groups", "--oidc-admin-groups", "ops", "--oidc-viewer-groups", "staff")
	si, err := s.config(g)
	if err != nil {
		t.Fatal(err)
	}
	if si.GitHub == nil || si.GitHub.ClientSecret != "s3cret" || si.GitHub.WebURL != "https://ghe.example/" || si.GitHub.Role != "member" ||
		si.OIDC == nil || si.OIDC.ClientSecret != "s3cret" || si.OIDC.Name != "Okta" || strings.Join(si.OIDC.AllowedDomains, ",") != "example.com,corp.example" ||
		si.OIDC.RoleClaim != "groups" || si.OIDC.AdminGroups[0] != "ops" {
		t.Fatalf("config: %+v %+v %+v", si, si.GitHub, si.OIDC)
	}
	t.Setenv(oidcClientSecretEnv, "from-env")
	s, g = parse("--oidc-issuer", "https://idp.example.com", "--oidc-client-id", "harvest")
	if si, err := s.config(g); err != nil || si.OIDC.ClientSecret != "from-env" || si.GitHub != nil {
		t.Fatalf("the secret from the environment: %+v, %v", si.OIDC, err)
	}
	t.Setenv(oidcClientSecretEnv, "")
	s, g = parse()
	if c, err := s.config(g); err != nil || c.GitHub != nil || c.OIDC != nil {
		t.Fatalf("no sign-in flags: %+v, %v; want no providers", c, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--github-client-id", "Iv1.abc"}, "needs the App's client secret"},
		{[]string{"--github-client-secret-file", good}, "needs --github-client-id"},
		{[]string{"--github-client-id", "Iv1.abc", "--github-client-secret-file", open}, "readable by others"},
		{[]string{"--github-client-id", "Iv1.abc", "--github-client-secret-file", good, "--github-user-role", "admin"}, "--github-user-role"},
		{[]string{"--oidc-client-id", "x", "--oidc-client-secret-file", good}, "--oidc-issuer: empty"},
		{[]string{"--oidc-issuer", "http://idp.example.com", "--oidc-client-id", "x", "--oidc-client-secret-file", good}, "loopback"},
		{[]string{"--oidc-issuer", "https://idp.example.com", "--oidc-client-id", "x"}, "client secret is empty"},
		{[]string{"--oidc-issuer", "https://idp.example.com", "--oidc-client-id", "x", "--oidc-client-secret-file", good, "--oidc-admin-groups", "ops"}, "need --oidc-role-claim"},
		{[]string{"--oidc-issuer", "https://idp.example.com", "--oidc-client-id", "x", "--oidc-client-secret-file", good, "--oidc-user-role", "admin"}, "--oidc-user-role admin"},
	} {
		s, g := parse(tc.args...)
		if _, err := s.config(g); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
