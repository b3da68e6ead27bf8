package store

import "context"

// The People and Audit methods of bounded (bounded.go).

func (b *bounded) AddIdentity(ctx context.Context, i *Identity) error {
	ctx, done := Call(ctx, "AddIdentity")
	return done(b.Store.AddIdentity(ctx, i))
}

func (b *bounded) AppendAudit(ctx context.Context, e *AuditEntry) error {
	ctx, done := Call(ctx, "AppendAudit")
	return done(b.Store.AppendAudit(ctx, e))
}

func (b *bounded) CreateUser(ctx context.Context, u *User) error {
	ctx, done := Call(ctx, "CreateUser")
	return done(b.Store.CreateUser(ctx, u))
}

func (b *bounded) GetUser(ctx context.Context, id string) (*User, error) {
	ctx, done := Call(ctx, "GetUser")
	v, err := b.Store.GetUser(ctx, id)
	return v, done(err)
}

func (b *bounded) Identities(ctx context.Context, user string) ([]*Identity, error) {
	ctx, done := Call(ctx, "Identities")
	v, err := b.Store.Identities(ctx, user)
	return v, done(err)
}

func (b *bounded) ListAudit(ctx context.Context, f AuditFilter) ([]*AuditEntry, error) {
	ctx, done := Call(ctx, "ListAudit")
	v, err := b.Store.ListAudit(ctx, f)
	return v, done(err)
}

func (b *bounded) ListUsers(ctx context.Context) ([]*User, error) {
	ctx, done := Call(ctx, "ListUsers")
	v, err := b.Store.ListUsers(ctx)
	return v, done(err)
}

func (b *bounded) UpdateUser(ctx context.Context, id string, fn func(*User) error) (*User, error) {
	ctx, done := Call(ctx, "UpdateUser")
	v, err := b.Store.UpdateUser(ctx, id, fn)
	return v, done(err)
}

func (b *bounded) UserByIdentity(ctx context.Context, kind, issuer, subject string) (*User, error) {
	ctx, done := Call(ctx, "UserByIdentity")
	v, err := b.Store.UserByIdentity(ctx, kind, issuer, subject)
	return v, done(err)
}

func (b *bounded) UserForIdentity(ctx context.Context, i *Identity, u *User) (*User, bool, error) {
	ctx, done := Call(ctx, "UserForIdentity")
	v, created, err := b.Store.UserForIdentity(ctx, i, u)
	return v, created, done(err)
}

func (b *bounded) UserTokens(ctx context.Context, user string) ([]*Token, error) {
	ctx, done := Call(ctx, "UserTokens")
	v, err := b.Store.UserTokens(ctx, user)
	return v, done(err)
}
