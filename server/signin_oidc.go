package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/harvest-dev/harvest/store"
)

// # Sign in with an OIDC provider
//
// Any OpenID Connect provider (Okta, Entra ID, Google, Keycloak, Dex,
// ZITADEL, ...): discovery at <Issuer>/.well-known/openid-configuration
// (on the first sign-in, then kept; a provider that is down at the
// server's start does not stop it), the authorization code flow with
// PKCE S256 and a nonce, and the ID token verified by
// github.com/coreos/go-oidc: its signature by the provider's published
// keys, its issuer, its audience (our client id), its expiry, and its
// nonce (the flow's: an ID token from another sign-in is refused), and
// its at_hash against the access token when it has one.
//
// The identity is (Issuer, sub). Its email and whether the provider
// verified it come from the ID token, or from the UserInfo endpoint when
// the ID token leaves them out (many providers do); UserInfo's sub must
// be the ID token's.
//
// Who may sign in, and as what (OIDCSignIn.Validate checks it at start):
//
//   - AllowedDomains: when set, the email's domain must be one of them
//     (exactly; a subdomain is another domain), and the email must be
//     verified by the provider — an unverified address proves nothing.
//   - RoleClaim names a claim (like "groups") listing the person's
//     groups; AdminGroups, MemberGroups and ViewerGroups map groups to
//     roles, the strongest match winning. With RoleClaim set, the role
//     follows the provider at every sign-in (the provider is where
//     people are managed); a person in no listed group gets Role, or is
//     refused when RequireGroup is set. Without RoleClaim, a new user
//     gets Role and later changes are made in Harvest.

// OIDCSignIn configures "Sign in with <Name>".
type OIDCSignIn struct {
	// Issuer is the provider's issuer URL, exactly as its discovery
	// document says it (https; http only on a loopback address).
	Issuer string
	// ClientID and ClientSecret are Harvest's client at the provider.
	ClientID, ClientSecret string
	// Name is the button's label ("Sign in with Name"); default "OIDC".
	Name string
	// Scopes are asked for besides openid; default email and profile.
	Scopes []string
	// AllowedDomains, when set, are the email domains that may sign in.
	AllowedDomains []string
	// RoleClaim, AdminGroups, MemberGroups, ViewerGroups, RequireGroup:
	// the groups claim and its roles (see above).
	RoleClaim                               string
	AdminGroups, MemberGroups, ViewerGroups []string
	RequireGroup                            bool
	// Role is a new user's role when no group decides it (default
	// member).
	Role store.Role
}

// oidcCache is the provider discovered (Server.oidc), kept once found.
type oidcCache struct {
	mu       sync.Mutex
	provider *oidc.Provider
}

func (o *OIDCSignIn) name() string { return cmp.Or(o.Name, "OIDC") }

// Validate says what is wrong with the configuration, each problem with
// what to do.
func (o *OIDCSignIn) Validate() error {
	var p []string
	u, err := url.Parse(o.Issuer)
	switch {
	case o.Issuer == "":
		p = append(p, "--oidc-issuer: empty: give the provider's issuer URL, like https://accounts.example.com")
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		p = append(p, fmt.Sprintf("--oidc-issuer %q: not an absolute https URL", o.Issuer))
	case u.Scheme == "http" && !loopbackHost(u.Hostname()):
		p = append(p, fmt.Sprintf("--oidc-issuer %q: http is allowed only on a loopback address (a test provider); use the provider's https URL", o.Issuer))
	}
	if o.ClientID == "" {
		p = append(p, "--oidc-client-id: empty: give the client id the provider issued to Harvest")
	}
	if o.ClientSecret == "" {
		p = append(p, "the OIDC client secret is empty: give it with --oidc-client-secret-file or HARVEST_OIDC_CLIENT_SECRET")
	}
	if o.Role != "" && !o.Role.Valid() {
		p = append(p, fmt.Sprintf("--oidc-user-role %q: want admin, member or viewer", o.Role))
	}
	for _, d := range o.AllowedDomains {
		if d == "" || strings.ContainsAny(d, "@/ ") || !strings.Contains(d, ".") || d != strings.ToLower(d) {
			p = append(p, fmt.Sprintf("--oidc-allowed-domains: %q is not a lower-case domain like example.com", d))
		}
	}
	groups := len(o.AdminGroups) + len(o.MemberGroups) + len(o.ViewerGroups)
	switch {
	case o.RoleClaim == "" && groups > 0:
		p = append(p, "--oidc-admin-groups, --oidc-member-groups, --oidc-viewer-groups need --oidc-role-claim: the claim that lists a person's groups (like groups)")
	case o.RoleClaim != "" && groups == 0:
		p = append(p, fmt.Sprintf("--oidc-role-claim %s: name the groups of each role with --oidc-admin-groups, --oidc-member-groups or --oidc-viewer-groups", o.RoleClaim))
	case o.RequireGroup && o.RoleClaim == "":
		p = append(p, "--oidc-require-group needs --oidc-role-claim and the groups of each role")
	}
	seen := map[string]string{}
	for role, gs := range map[string][]string{"admin": o.AdminGroups, "member": o.MemberGroups, "viewer": o.ViewerGroups} {
		for _, g := range gs {
			if g == "" {
				p = append(p, fmt.Sprintf("--oidc-%s-groups: an empty group name", role))
			} else if r, ok := seen[g]; ok && r != role {
				p = append(p, fmt.Sprintf("group %q is both %s and %s: give each group one role", g, r, role))
			}
			seen[g] = role
		}
	}
	if len(p) > 0 {
		slices.Sort(p)
		return errors.New(strings.Join(p, "; "))
	}
	return nil
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// discover is the provider, found on first use and kept.
func (s *Server) discover(ctx context.Context, o *OIDCSignIn) (*oidc.Provider, error) {
	s.oidc.mu.Lock()
	defer s.oidc.mu.Unlock()
	if s.oidc.provider != nil {
		return s.oidc.provider, nil
	}
	ctx, cancel := context.WithTimeout(ctx, providerTimeout)
	defer cancel()
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, s.cfg.SignIn.client()), o.Issuer)
	if err != nil {
		return nil, fmt.Errorf("discovering the OIDC provider %s: %w", o.Issuer, err)
	}
	s.oidc.provider = p
	return p, nil
}

func (o *OIDCSignIn) oauth(p *oidc.Provider, redirect string) *oauth2.Config {
	scopes := append([]string{oidc.ScopeOpenID}, o.Scopes...)
	if len(o.Scopes) == 0 {
		scopes = append(scopes, "email", "profile")
	}
	return &oauth2.Config{ClientID: o.ClientID, ClientSecret: o.ClientSecret, RedirectURL: redirect, Endpoint: p.Endpoint(), Scopes: scopes}
}

func (s *Server) oidcStart(w http.ResponseWriter, r *http.Request, _ caller) *apiError {
	o := s.cfg.SignIn.OIDC
	if o == nil {
		return errorf(http.StatusNotFound, CodeNotFound, "signing in with an OIDC provider is not set up on this server (harvest serve --oidc-issuer, --oidc-client-id): sign in with a token")
	}
	p, err := s.discover(r.Context(), o)
	if err != nil {
		return errorf(http.StatusServiceUnavailable, CodeUnavailable, err.Error()+": try again later, or sign in with a token")
	}
	verifier, nonce := oauth2.GenerateVerifier(), randomString(24)
	state, e := s.startFlow(w, r, store.WebViaOIDC, verifier, nonce)
	if e != nil {
		return e
	}
	http.Redirect(w, r, o.oauth(p, s.callbackURL(r, "/v1/auth/oidc/callback")).AuthCodeURL(state, oauth2.S256ChallengeOption(verifier), oidc.Nonce(nonce)), http.StatusFound)
	return nil
}

// verifierConfig is what go-oidc checks an ID token against besides the
// provider's keys and issuer: our client id in its audience, its expiry
// on our clock.
func (o *OIDCSignIn) verifierConfig(now func() time.Time) *oidc.Config {
	return &oidc.Config{ClientID: o.ClientID, Now: now}
}

// oidcClaims are the claims used, from the ID token or UserInfo.
type oidcClaims struct {
	Subject       string
	Email         string
	EmailVerified bool
	Name          string
	Groups        []string
}

// verifyIDToken verifies raw (go-oidc: signature, issuer, audience,
// expiry) and its nonce against the flow's, and reads its claims.
func (o *OIDCSignIn) verifyIDToken(ctx context.Context, v *oidc.IDTokenVerifier, raw, nonce, accessToken string) (*oidc.IDToken, *oidcClaims, error) {
	if raw == "" {
		return nil, nil, errors.New("the provider's answer has no ID token (is the openid scope allowed for this client?)")
	}
	idt, err := v.Verify(ctx, raw)
	if err != nil {
		return nil, nil, fmt.Errorf("the ID token did not verify: %w", err)
	}
	if nonce == "" || idt.Nonce != nonce {
		return nil, nil, errors.New("the ID token's nonce is not this sign-in's: it was issued for another sign-in (a replayed token)")
	}
	if idt.AccessTokenHash != "" && accessToken != "" {
		if err := idt.VerifyAccessToken(accessToken); err != nil {
			return nil, nil, fmt.Errorf("the ID token's at_hash does not match the access token: %w", err)
		}
	}
	c, err := o.readClaims(idt.Claims)
	if err != nil {
		return nil, nil, err
	}
	c.Subject = idt.Subject
	return idt, c, nil
}

// readClaims reads the claims used from an ID token or UserInfo.
func (o *OIDCSignIn) readClaims(claims func(any) error) (*oidcClaims, error) {
	var std struct {
		Email         string `json:"email"`
		EmailVerified any    `json:"email_verified"`
		Name          string `json:"name"`
		Preferred     string `json:"preferred_username"`
	}
	if err := claims(&std); err != nil {
		return nil, fmt.Errorf("reading the claims: %w", err)
	}
	c := &oidcClaims{Email: strings.ToLower(strings.TrimSpace(std.Email)), Name: cmp.Or(std.Name, std.Preferred, std.Email)}
	switch v := std.EmailVerified.(type) {
	case bool:
		c.EmailVerified = v
	case string: // some providers send "true"
		c.EmailVerified = v == "true"
	}
	if o.RoleClaim != "" {
		var all map[string]any
		if err := claims(&all); err != nil {
			return nil, fmt.Errorf("reading the claims: %w", err)
		}
		switch v := all[o.RoleClaim].(type) {
		case string:
			c.Groups = []string{v}
		case []any:
			for _, g := range v {
				if s, ok := g.(string); ok {
					c.Groups = append(c.Groups, s)
				}
			}
		}
	}
	return c, nil
}

// decide says whether c may sign in, and the role its groups give
// ("" when no group decides it).
func (o *OIDCSignIn) decide(c *oidcClaims) (store.Role, error) {
	if len(o.AllowedDomains) > 0 {
		_, domain, ok := strings.Cut(c.Email, "@")
		switch {
		case !ok:
			return "", errors.New("the provider gave no email address, and this server admits only addresses of " + strings.Join(o.AllowedDomains, ", "))
		case !slices.Contains(o.AllowedDomains, domain):
			return "", fmt.Errorf("%s is not an address of %s: this server admits only those", c.Email, strings.Join(o.AllowedDomains, ", "))
		case !c.EmailVerified:
			return "", fmt.Errorf("the provider has not verified %s, and an unverified address proves nothing here: verify it with the provider", c.Email)
		}
	}
	if o.RoleClaim == "" {
		return "", nil
	}
	role := store.Role("")
	for _, g := range c.Groups {
		switch {
		case slices.Contains(o.AdminGroups, g):
			role = store.RoleAdmin
		case slices.Contains(o.MemberGroups, g) && role != store.RoleAdmin:
			role = store.RoleMember
		case slices.Contains(o.ViewerGroups, g) && role == "":
			role = store.RoleViewer
		}
	}
	if role == "" && o.RequireGroup {
		return "", fmt.Errorf("you are in none of the groups this server admits (claim %s: %s): ask an admin of the provider", o.RoleClaim, strings.Join(c.Groups, ", "))
	}
	return role, nil
}

func (s *Server) oidcCallback(w http.ResponseWriter, r *http.Request, _ caller) *apiError {
	o := s.cfg.SignIn.OIDC
	if o == nil {
		return errorf(http.StatusNotFound, CodeNotFound, "signing in with an OIDC provider is not set up on this server: sign in with a token")
	}
	f := s.callbackFlow(w, r, store.WebViaOIDC)
	if f == nil {
		return nil
	}
	p, err := s.discover(r.Context(), o)
	if err != nil {
		s.refused(w, r, store.WebViaOIDC, refuse("unavailable", "%v: try again", err))
		return nil
	}
	ctx, cancel := context.WithTimeout(oidc.ClientContext(context.WithValue(r.Context(), oauth2.HTTPClient, s.cfg.SignIn.client()), s.cfg.SignIn.client()), 2*providerTimeout)
	defer cancel()
	cfg := o.oauth(p, s.callbackURL(r, "/v1/auth/oidc/callback"))
	tok, err := cfg.Exchange(ctx, r.URL.Query().Get("code"), oauth2.VerifierOption(f.Verifier))
	if err != nil {
		s.refused(w, r, store.WebViaOIDC, refuse("unauthorized", "%s refused the sign-in's code: %s; sign in again", o.name(), oauthErrorText(err)))
		return nil
	}
	raw, _ := tok.Extra("id_token").(string)
	v := p.Verifier(o.verifierConfig(s.cfg.SignIn.Now))
	idt, c, err := o.verifyIDToken(ctx, v, raw, f.Nonce, tok.AccessToken)
	if err != nil {
		s.refused(w, r, store.WebViaOIDC, refuse("unauthorized", "%s: %v; sign in again", o.name(), err))
		return nil
	}
	if c.Email == "" || (o.RoleClaim != "" && c.Groups == nil) {
		// Not in the ID token: ask UserInfo, about the same subject.
		if ui, err := p.UserInfo(ctx, oauth2.StaticTokenSource(tok)); err == nil && ui.Subject == idt.Subject {
			if uc, err := o.readClaims(ui.Claims); err == nil {
				if c.Email == "" {
					c.Email, c.EmailVerified = uc.Email, uc.EmailVerified
				}
				if c.Groups == nil {
					c.Groups = uc.Groups
				}
				c.Name = cmp.Or(c.Name, uc.Name)
			}
		}
	}
	detail := map[string]any{"via": store.WebViaOIDC, "issuer": o.Issuer, "subject": c.Subject, "email": c.Email}
	role, err := o.decide(c)
	if err != nil {
		var uid string
		if u, uerr := s.cfg.Store.UserByIdentity(r.Context(), store.IdentityOIDC, o.Issuer, c.Subject); uerr == nil {
			uid = u.ID
		}
		s.refused(w, r, store.WebViaOIDC, &refusal{result: "forbidden", user: uid, detail: detail, message: err.Error()})
		return nil
	}
	email := c.Email
	if !c.EmailVerified {
		email = "" // an identity keeps only a verified email
	}
	u, created, err := s.userForIdentity(r.Context(), &store.Identity{Kind: store.IdentityOIDC, Issuer: o.Issuer, Subject: c.Subject, Login: c.Name, Email: email},
		cmp.Or(c.Name, c.Email, "OIDC user "+c.Subject), cmp.Or(role, o.Role, store.RoleMember))
	if err != nil {
		s.refused(w, r, store.WebViaOIDC, &refusal{result: "unavailable", detail: detail, message: "finding your Harvest user: " + err.Error()})
		return nil
	}
	detail["created"] = created
	if role != "" && u.Role != role && !created {
		// The provider's groups decide: the role follows them.
		a := &store.AuditEntry{Action: "user.update", Channel: store.ChannelUI, Remote: remoteIP(r), User: u.ID, Target: u.ID,
			Detail: mustJSON(map[string]any{"role": role, "from": u.Role, "why": "the provider's " + o.RoleClaim + " claim"})}
		if nu, err := s.cfg.Store.UpdateUser(store.WithAudit(r.Context(), a), u.ID, func(x *store.User) error { x.Role = role; return nil }); err == nil {
			u = nu
		}
	}
	s.finishSignIn(w, r, f, u, detail)
	return nil
}
