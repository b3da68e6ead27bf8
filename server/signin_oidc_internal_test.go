package server

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/harvest-dev/harvest/store"
)

// The ID token's checks, one at a time: tokens signed here with a key
// the verifier is given (as the provider's published key would be),
// each wrong in one way. The whole flow against a real provider is
// TestSignInOIDC.

func signToken(t *testing.T, key *rsa.PrivateKey, claims map[string]any) string {
	t.Helper()
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(claims)
	o, err := sig.Sign(b)
	if err != nil {
		t.Fatal(err)
	}
	s, err := o.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestVerifyIDToken(t *testing.T) {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	const issuer = "https://idp.example.com"
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	o := &OIDCSignIn{Issuer: issuer, ClientID: "harvest", ClientSecret: "s", AllowedDomains: []string{"example.com"}}
	v := oidc.NewVerifier(issuer, &oidc.StaticKeySet{PublicKeys: []crypto.PublicKey{&key.PublicKey}}, o.verifierConfig(func() time.Time { return now }))
	good := func() map[string]any {
		return map[string]any{"iss": issuer, "sub": "sub-1", "aud": "harvest", "iat": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Hour).Unix(),
			"nonce": "n-1", "email": "Ada@Example.com", "email_verified": true, "name": "Ada"}
	}
	with := func(k string, val any) map[string]any { c := good(); c[k] = val; return c }
	ctx := context.Background()

	_, c, err := o.verifyIDToken(ctx, v, signToken(t, key, good()), "n-1", "")
	if err != nil || c.Subject != "sub-1" || c.Email != "ada@example.com" || !c.EmailVerified || c.Name != "Ada" {
		t.Fatalf("a good token: %+v, %v", c, err)
	}
	for _, tc := range []struct {
		name  string
		raw   string
		nonce string
		want  string
	}{
		{"expired", signToken(t, key, with("exp", now.Add(-time.Second).Unix())), "n-1", "expired"},
		{"wrong audience", signToken(t, key, with("aud", "someone-else")), "n-1", "audience"},
		{"wrong issuer", signToken(t, key, with("iss", "https://evil.example.com")), "n-1", "different provider"},
		{"another key", signToken(t, other, good()), "n-1", "signature"},
		{"nonce of another sign-in (replayed)", signToken(t, key, good()), "n-2", "nonce"},
		{"no nonce", signToken(t, key, with("nonce", "")), "n-1", "nonce"},
		{"no token", "", "n-1", "no ID token"},
	} {
		if _, _, err := o.verifyIDToken(ctx, v, tc.raw, tc.nonce, ""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error about %s", tc.name, err, tc.want)
		}
	}
}

// TestOIDCDecide: domains (verified addresses only) and groups to roles.
func TestOIDCDecide(t *testing.T) {
	o := &OIDCSignIn{AllowedDomains: []string{"example.com"}, RoleClaim: "groups",
		AdminGroups: []string{"ops"}, MemberGroups: []string{"dev"}, ViewerGroups: []string{"staff"}}
	for _, tc := range []struct {
		name    string
		c       oidcClaims
		require bool
		role    store.Role
		err     string
	}{
		{"viewer", oidcClaims{Email: "a@example.com", EmailVerified: true, Groups: []string{"staff"}}, false, store.RoleViewer, ""},
		{"strongest wins", oidcClaims{Email: "a@example.com", EmailVerified: true, Groups: []string{"staff", "ops", "dev"}}, false, store.RoleAdmin, ""},
		{"member over viewer", oidcClaims{Email: "a@example.com", EmailVerified: true, Groups: []string{"staff", "dev"}}, false, store.RoleMember, ""},
		{"no group: the default", oidcClaims{Email: "a@example.com", EmailVerified: true, Groups: []string{"x"}}, false, "", ""},
		{"no group, required", oidcClaims{Email: "a@example.com", EmailVerified: true, Groups: []string{"x"}}, true, "", "none of the groups"},
		{"other domain", oidcClaims{Email: "a@example.org", EmailVerified: true}, false, "", "not an address of example.com"},
		{"subdomain is another domain", oidcClaims{Email: "a@eu.example.com", EmailVerified: true}, false, "", "not an address"},
		{"unverified", oidcClaims{Email: "a@example.com"}, false, "", "has not verified"},
		{"no email", oidcClaims{}, false, "", "no email"},
	} {
		o.RequireGroup = tc.require
		role, err := o.decide(&tc.c)
		if role != tc.role || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %q, %v; want %q, %q", tc.name, role, err, tc.role, tc.err)
		}
	}
}

// TestOIDCValidate: each mistake in the configuration is named, with
// what to do.
func TestOIDCValidate(t *testing.T) {
	ok := OIDCSignIn{Issuer: "https://idp.example.com", ClientID: "c", ClientSecret: "s"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	loop := ok
	loop.Issuer = "http://127.0.0.1:5556/"
	if err := loop.Validate(); err != nil {
		t.Fatalf("a loopback http issuer: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*OIDCSignIn)
		want string
	}{
		{"no issuer", func(o *OIDCSignIn) { o.Issuer = "" }, "--oidc-issuer: empty"},
		{"http issuer", func(o *OIDCSignIn) { o.Issuer = "http://idp.example.com" }, "only on a loopback"},
		{"no client id", func(o *OIDCSignIn) { o.ClientID = "" }, "--oidc-client-id"},
		{"no secret", func(o *OIDCSignIn) { o.ClientSecret = "" }, "client secret is empty"},
		{"groups without claim", func(o *OIDCSignIn) { o.AdminGroups = []string{"ops"} }, "need --oidc-role-claim"},
		{"claim without groups", func(o *OIDCSignIn) { o.RoleClaim = "groups" }, "name the groups"},
		{"a group twice", func(o *OIDCSignIn) {
			o.RoleClaim, o.AdminGroups, o.ViewerGroups = "groups", []string{"ops"}, []string{"ops"}
		}, `group "ops" is both`},
		{"bad domain", func(o *OIDCSignIn) { o.AllowedDomains = []string{"@example.com"} }, "not a lower-case domain"},
		{"bad role", func(o *OIDCSignIn) { o.Role = "root" }, "--oidc-user-role"},
	} {
		o := ok
		tc.edit(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestReturnPath: a sign-in lands on a page of the UI, never another
// site nor the API, however the path is dressed.
func TestReturnPath(t *testing.T) {
	for in, want := range map[string]string{
		"":                              "/",
		"/":                             "/",
		"/#/s/s-abc":                    "/#/s/s-abc",
		"/s/x?y=1":                      "/s/x?y=1",
		"//evil.example":                "/",
		"/\\evil.example":               "/",
		"/\t/evil.example":              "/",
		"/\n/evil.example":              "/",
		"https://evil.example/":         "/",
		"evil.example":                  "/",
		"/v1/tokens":                    "/",
		"/" + strings.Repeat("a", 1000): "/",
	} {
		if got := returnPath(in); got != want {
			t.Errorf("returnPath(%q) = %q, want %q", in, got, want)
		}
	}
}
