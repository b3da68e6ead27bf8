package store

import (
	"context"
	"time"
)

// The Budgets methods of observed (observe.go).

func (o *observed) SetQuota(ctx context.Context, b *Quota) error {
	start := time.Now()
	err := o.Store.SetQuota(ctx, b)
	o.o.StoreOp("SetQuota", time.Since(start), err)
	return err
}

func (o *observed) GetQuota(ctx context.Context, scope, subject string) (*Quota, error) {
	start := time.Now()
	v, err := o.Store.GetQuota(ctx, scope, subject)
	o.o.StoreOp("GetQuota", time.Since(start), err)
	return v, err
}

func (o *observed) DeleteQuota(ctx context.Context, scope, subject string) error {
	start := time.Now()
	err := o.Store.DeleteQuota(ctx, scope, subject)
	o.o.StoreOp("DeleteQuota", time.Since(start), err)
	return err
}

func (o *observed) QuotasOf(ctx context.Context, user string) ([]*Quota, error) {
	start := time.Now()
	v, err := o.Store.QuotasOf(ctx, user)
	o.o.StoreOp("QuotasOf", time.Since(start), err)
	return v, err
}

func (o *observed) AddSpend(ctx context.Context, user, day string, usd float64) error {
	start := time.Now()
	err := o.Store.AddSpend(ctx, user, day, usd)
	o.o.StoreOp("AddSpend", time.Since(start), err)
	return err
}

func (o *observed) UseOf(ctx context.Context, scope, subject, day string) (Use, error) {
	start := time.Now()
	v, err := o.Store.UseOf(ctx, scope, subject, day)
	o.o.StoreOp("UseOf", time.Since(start), err)
	return v, err
}
