package store

import (
	"context"
	"time"
)

// The SignIns methods of observed (observe.go), and UserByWebSession.

func (o *observed) CreateSignInFlow(ctx context.Context, f *SignInFlow) error {
	start := time.Now()
	err := o.Store.CreateSignInFlow(ctx, f)
	o.o.StoreOp("CreateSignInFlow", time.Since(start), err)
	return err
}

func (o *observed) TakeSignInFlow(ctx context.Context, hash []byte, now time.Time) (*SignInFlow, error) {
	start := time.Now()
	v, err := o.Store.TakeSignInFlow(ctx, hash, now)
	o.o.StoreOp("TakeSignInFlow", time.Since(start), err)
	return v, err
}

func (o *observed) PutOAuthGrant(ctx context.Context, g *OAuthGrant) error {
	start := time.Now()
	err := o.Store.PutOAuthGrant(ctx, g)
	o.o.StoreOp("PutOAuthGrant", time.Since(start), err)
	return err
}

func (o *observed) OAuthGrant(ctx context.Context, user, provider string) (*OAuthGrant, error) {
	start := time.Now()
	v, err := o.Store.OAuthGrant(ctx, user, provider)
	o.o.StoreOp("OAuthGrant", time.Since(start), err)
	return v, err
}

func (o *observed) UserByWebSession(ctx context.Context, hash []byte, now time.Time) (*WebSession, *User, error) {
	start := time.Now()
	w, u, err := o.Store.UserByWebSession(ctx, hash, now)
	o.o.StoreOp("UserByWebSession", time.Since(start), err)
	return w, u, err
}
