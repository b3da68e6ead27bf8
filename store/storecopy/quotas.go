package storecopy

import (
	"context"
	"fmt"

	"github.com/harvest-dev/harvest/store"
)

// Budgets (store/quotas.go) are copied after the users and teams they
// are for (SetQuota keeps their UpdatedAt), and the users' spend of each
// day after them (AddSpend, into an empty store: the same amount).

func copyQuotas(ctx context.Context, src store.Copier, to store.Store) (int, error) {
	qs, err := src.DumpQuotas(ctx)
	if err != nil {
		return 0, err
	}
	for _, q := range qs {
		c := *q
		if err := to.SetQuota(ctx, &c); err != nil {
			return 0, fmt.Errorf("the budget of %s %s: %w", q.Scope, q.Subject, err)
		}
	}
	return len(qs), nil
}

func copySpend(ctx context.Context, src store.Copier, to store.Store) (int, error) {
	sp, err := src.DumpSpend(ctx)
	if err != nil {
		return 0, err
	}
	for _, s := range sp {
		if err := to.AddSpend(ctx, s.User, s.Day, s.USD); err != nil {
			return 0, fmt.Errorf("the spend of %s on %s: %w", s.User, s.Day, err)
		}
	}
	return len(sp), nil
}

// takeQuotas tallies the budgets and the spend.
func takeQuotas(ctx context.Context, cp store.Copier, quotas, spend *tally) error {
	qs, err := cp.DumpQuotas(ctx)
	if err != nil {
		return fmt.Errorf("budgets: %w", err)
	}
	for _, q := range qs {
		c := *q
		c.UpdatedAt = us(c.UpdatedAt)
		if err := quotas.add(c); err != nil {
			return err
		}
	}
	sp, err := cp.DumpSpend(ctx)
	if err != nil {
		return fmt.Errorf("spend: %w", err)
	}
	for _, s := range sp {
		if err := spend.add(s); err != nil {
			return err
		}
	}
	return nil
}
