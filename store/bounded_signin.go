package store

import (
	"context"
	"time"
)

// The SignIns methods of bounded (bounded.go), and UserByWebSession.

func (b *bounded) CreateSignInFlow(ctx context.Context, f *SignInFlow) error {
	ctx, done := Call(ctx, "CreateSignInFlow")
	return done(b.Store.CreateSignInFlow(ctx, f))
}

func (b *bounded) TakeSignInFlow(ctx context.Context, hash []byte, now time.Time) (*SignInFlow, error) {
	ctx, done := Call(ctx, "TakeSignInFlow")
	v, err := b.Store.TakeSignInFlow(ctx, hash, now)
	return v, done(err)
}

func (b *bounded) PutOAuthGrant(ctx context.Context, g *OAuthGrant) error {
	ctx, done := Call(ctx, "PutOAuthGrant")
	return done(b.Store.PutOAuthGrant(ctx, g))
}

func (b *bounded) OAuthGrant(ctx context.Context, user, provider string) (*OAuthGrant, error) {
	ctx, done := Call(ctx, "OAuthGrant")
	v, err := b.Store.OAuthGrant(ctx, user, provider)
	return v, done(err)
}

func (b *bounded) UserByWebSession(ctx context.Context, hash []byte, now time.Time) (*WebSession, *User, error) {
	ctx, done := Call(ctx, "UserByWebSession")
	w, u, err := b.Store.UserByWebSession(ctx, hash, now)
	return w, u, done(err)
}
