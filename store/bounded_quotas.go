package store

import "context"

// The Budgets methods of bounded (bounded.go).

func (b *bounded) SetQuota(ctx context.Context, bu *Quota) error {
	ctx, done := Call(ctx, "SetQuota")
	return done(b.Store.SetQuota(ctx, bu))
}

func (b *bounded) GetQuota(ctx context.Context, scope, subject string) (*Quota, error) {
	ctx, done := Call(ctx, "GetQuota")
	v, err := b.Store.GetQuota(ctx, scope, subject)
	return v, done(err)
}

func (b *bounded) DeleteQuota(ctx context.Context, scope, subject string) error {
	ctx, done := Call(ctx, "DeleteQuota")
	return done(b.Store.DeleteQuota(ctx, scope, subject))
}

func (b *bounded) QuotasOf(ctx context.Context, user string) ([]*Quota, error) {
	ctx, done := Call(ctx, "QuotasOf")
	v, err := b.Store.QuotasOf(ctx, user)
	return v, done(err)
}

func (b *bounded) AddSpend(ctx context.Context, user, day string, usd float64) error {
	ctx, done := Call(ctx, "AddSpend")
	return done(b.Store.AddSpend(ctx, user, day, usd))
}

func (b *bounded) UseOf(ctx context.Context, scope, subject, day string) (Use, error) {
	ctx, done := Call(ctx, "UseOf")
	v, err := b.Store.UseOf(ctx, scope, subject, day)
	return v, done(err)
}
