package store

import (
	"context"
	"time"
)

// # Signing in with another service
//
// A browser signs in with a token (WebViaToken), or with an account
// elsewhere: GitHub (the App's user authorization) or an OIDC provider
// (package server, signin*.go). Such a sign-in is the user's, with no
// token: its WebSession names the User.
//
// Between the redirect to the provider and its callback, the sign-in
// under way is a SignInFlow: what the callback must check (the PKCE
// verifier it sends, the nonce the ID token must carry) and where the
// browser lands. It is kept here, not in the browser's cookie, so a
// callback is accepted once (TakeSignInFlow deletes it) on whichever
// node it reaches; the cookie only binds the state to the browser.
//
// What GitHub hands back — the user-to-server token and its refresh
// token — is an OAuthGrant, sealed by the caller (package secrets' key,
// as secrets are) before it is stored: the store never holds it in the
// clear.

// How a browser signed in (WebSession.Via).
const (
	WebViaToken  = "token"
	WebViaGitHub = "github"
	WebViaOIDC   = "oidc"
)

// SignInFlow is a sign-in under way with a provider.
type SignInFlow struct {
	// Hash is the SHA-256 of the flow's state (the random value in the
	// provider's redirect and the browser's flow cookie).
	Hash []byte
	// Provider is WebViaGitHub or WebViaOIDC.
	Provider string
	// Verifier is the PKCE code verifier the token request sends.
	Verifier string
	// Nonce is what the ID token's nonce claim must be ("" for GitHub).
	Nonce string
	// Return is the page of the UI to land on ("" for the list).
	Return    string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// OAuthGrant is a user's authorization of this server at a provider:
// the access token and refresh token it issued, sealed by the caller.
type OAuthGrant struct {
	User string
	// Provider is WebViaGitHub.
	Provider string
	// Access and Refresh are sealed (nil Refresh: the provider gave none).
	Access  []byte
	Refresh []byte
	// ExpiresAt and RefreshExpiresAt are when they stop working (zero:
	// they do not expire).
	ExpiresAt        time.Time
	RefreshExpiresAt time.Time
	UpdatedAt        time.Time
}

// SignIns keeps sign-ins under way and what providers granted.
type SignIns interface {
	// CreateSignInFlow stores f (Hash, Provider and ExpiresAt set; a hash
	// that exists is ErrConflict) and drops the flows that have expired.
	CreateSignInFlow(ctx context.Context, f *SignInFlow) error
	// TakeSignInFlow deletes the flow whose state has SHA-256 hash and
	// returns it; ErrNotFound when there is none or it had expired at
	// now. Of two callers with the same hash, one gets it.
	TakeSignInFlow(ctx context.Context, hash []byte, now time.Time) (*SignInFlow, error)
	// PutOAuthGrant stores g, replacing the user's grant of the same
	// provider (a zero UpdatedAt is now).
	PutOAuthGrant(ctx context.Context, g *OAuthGrant) error
	// OAuthGrant reads a user's grant of a provider, or ErrNotFound.
	OAuthGrant(ctx context.Context, user, provider string) (*OAuthGrant, error)
}
