package store

import (
	"context"
	"time"
)

// The People and Audit methods of observed (observe.go).

func (o *observed) AddIdentity(ctx context.Context, i *Identity) error {
	start := time.Now()
	err := o.Store.AddIdentity(ctx, i)
	o.o.StoreOp("AddIdentity", time.Since(start), err)
	return err
}

func (o *observed) AppendAudit(ctx context.Context, e *AuditEntry) error {
	start := time.Now()
	err := o.Store.AppendAudit(ctx, e)
	o.o.StoreOp("AppendAudit", time.Since(start), err)
	return err
}

func (o *observed) CreateUser(ctx context.Context, u *User) error {
	start := time.Now()
	err := o.Store.CreateUser(ctx, u)
	o.o.StoreOp("CreateUser", time.Since(start), err)
	return err
}

func (o *observed) GetUser(ctx context.Context, id string) (*User, error) {
	start := time.Now()
	u, err := o.Store.GetUser(ctx, id)
	o.o.StoreOp("GetUser", time.Since(start), err)
	return u, err
}

func (o *observed) Identities(ctx context.Context, user string) ([]*Identity, error) {
	start := time.Now()
	ids, err := o.Store.Identities(ctx, user)
	o.o.StoreOp("Identities", time.Since(start), err)
	return ids, err
}

func (o *observed) ListAudit(ctx context.Context, f AuditFilter) ([]*AuditEntry, error) {
	start := time.Now()
	es, err := o.Store.ListAudit(ctx, f)
	o.o.StoreOp("ListAudit", time.Since(start), err)
	return es, err
}

func (o *observed) ListUsers(ctx context.Context) ([]*User, error) {
	start := time.Now()
	us, err := o.Store.ListUsers(ctx)
	o.o.StoreOp("ListUsers", time.Since(start), err)
	return us, err
}

func (o *observed) UpdateUser(ctx context.Context, id string, fn func(*User) error) (*User, error) {
	start := time.Now()
	u, err := o.Store.UpdateUser(ctx, id, fn)
	o.o.StoreOp("UpdateUser", time.Since(start), err)
	return u, err
}

func (o *observed) UserByIdentity(ctx context.Context, kind, issuer, subject string) (*User, error) {
	start := time.Now()
	u, err := o.Store.UserByIdentity(ctx, kind, issuer, subject)
	o.o.StoreOp("UserByIdentity", time.Since(start), err)
	return u, err
}

func (o *observed) UserForIdentity(ctx context.Context, i *Identity, u *User) (*User, bool, error) {
	start := time.Now()
	got, created, err := o.Store.UserForIdentity(ctx, i, u)
	o.o.StoreOp("UserForIdentity", time.Since(start), err)
	return got, created, err
}

func (o *observed) UserTokens(ctx context.Context, user string) ([]*Token, error) {
	start := time.Now()
	ts, err := o.Store.UserTokens(ctx, user)
	o.o.StoreOp("UserTokens", time.Since(start), err)
	return ts, err
}
