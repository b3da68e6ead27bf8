package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// harvest user budget and harvest team budget: show, set, clear a
// user's or a team's budget (store/quotas.go), through the API or on the
// data directory, audited as the CLI's.

func newBudgetCmd(conn *connFlags, scope string) *cobra.Command {
	what, example := "user", "usr-0123456789ab"
	if scope == store.QuotaTeam {
		what, example = "team", "backend"
	}
	cmd := &cobra.Command{
		Use:   "budget",
		Short: "Show, set or clear a " + what + "'s budget: model spend a day and live sessions",
		Long: fmt.Sprintf(`A budget caps what a %[1]s may use: model spend a day (UTC), in US dollars,
and sessions live at once (not suspended, stopped or failed). A user is held
to their own budget and to each of their teams'. Once a day's spend reaches
its cap, the next model request of their sessions is refused and the turn
ends failed (kind budget) with a message saying so; no new turn starts until
00:00 UTC or the cap is raised. A new session over the live-session cap is
refused (the API's 429). Every change is in the audit log.

  harvest %[1]s budget show %[2]s
  harvest %[1]s budget set %[2]s --daily-usd 25 --max-sessions 3
  harvest %[1]s budget clear %[2]s`, what, example),
	}
	cmd.AddCommand(newBudgetShowCmd(conn, scope), newBudgetSetCmd(conn, scope), newBudgetClearCmd(conn, scope))
	return cmd
}

// budgetArgs checks a budget command's one argument.
func budgetArgs(scope string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if scope == store.QuotaTeam {
			return oneTeam(nil, args)
		}
		if len(args) != 1 || !strings.HasPrefix(args[0], "usr-") {
			return errors.New("give the user's id, like: usr-0123456789ab (harvest user ls lists them)")
		}
		return nil
	}
}

func newBudgetShowCmd(conn *connFlags, scope string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show the budget and what it holds today",
		Args:  budgetArgs(scope),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, ctx, done, err := conn.openAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			var b *wire.Budget
			if a.c != nil {
				if b, err = a.c.GetBudget(ctx, scope, args[0]); err != nil {
					return apiErr(err)
				}
			} else if b, err = localBudget(ctx, a.store, scope, args[0]); err != nil {
				return exitCode(exitRequestFailed, err)
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), b)
				return nil
			}
			printBudget(cmd.OutOrStdout(), b)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the budget as JSON")
	return cmd
}

// localBudget reads a budget and its use from the data directory's store.
func localBudget(ctx context.Context, st store.Store, scope, subject string) (*wire.Budget, error) {
	if scope == store.QuotaUser {
		if _, err := st.GetUser(ctx, subject); err != nil {
			return nil, err
		}
	}
	day := store.Day(time.Now())
	use, err := st.UseOf(ctx, scope, subject, day)
	if err != nil {
		return nil, err
	}
	b := &wire.Budget{Scope: scope, Subject: subject, Today: wire.BudgetUse{Day: day, SpentUSD: use.SpentUSD, LiveSessions: use.LiveSessions}}
	q, err := st.GetQuota(ctx, scope, subject)
	if errors.Is(err, store.ErrNotFound) {
		return b, nil
	}
	if err != nil {
		return nil, err
	}
	t := q.UpdatedAt
	b.Set, b.DailyUSD, b.MaxSessions, b.UpdatedAt = true, q.DailyUSD, q.MaxSessions, &t
	return b, nil
}

func printBudget(w io.Writer, b *wire.Budget) {
	caps := func(v string, set bool) string {
		if !set {
			return "no cap"
		}
		return v
	}
	fmt.Fprintf(w, "%s %s\n", b.Scope, b.Subject)
	fmt.Fprintf(w, "  daily spend:   %s of %s today (%s UTC)\n", usd(b.Today.SpentUSD), caps(usd(b.DailyUSD), b.DailyUSD > 0), b.Today.Day)
	fmt.Fprintf(w, "  live sessions: %d of %s\n", b.Today.LiveSessions, caps(fmt.Sprint(b.MaxSessions), b.MaxSessions > 0))
	if !b.Set {
		fmt.Fprintf(w, "  no budget set (harvest %s budget set %s --daily-usd N --max-sessions N)\n", b.Scope, b.Subject)
	}
}

func newBudgetSetCmd(conn *connFlags, scope string) *cobra.Command {
	var req wire.BudgetRequest
	cmd := &cobra.Command{
		Use:   "set ID --daily-usd N --max-sessions N",
		Short: "Set the budget, whole: a cap not given is none",
		Args:  budgetArgs(scope),
		RunE: func(cmd *cobra.Command, args []string) error {
			if req.DailyUSD < 0 || req.MaxSessions < 0 || (req.DailyUSD == 0 && req.MaxSessions == 0) {
				return exitCode(2, errors.New("give --daily-usd (US dollars a day, like 25), --max-sessions (like 3) or both, above 0; to remove the budget: harvest "+scope+" budget clear "+args[0]))
			}
			a, ctx, done, err := conn.openAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			var b *wire.Budget
			if a.c != nil {
				if b, err = a.c.SetBudget(ctx, scope, args[0], req); err != nil {
					return apiErr(err)
				}
			} else {
				q := &store.Quota{Scope: scope, Subject: args[0], DailyUSD: req.DailyUSD, MaxSessions: req.MaxSessions, UpdatedAt: time.Now().UTC()}
				if err := a.store.SetQuota(localAudit(ctx, "budget.set", scope+":"+args[0]), q); err != nil {
					return exitCode(exitRequestFailed, fmt.Errorf("storing the budget: %w", err))
				}
				if b, err = localBudget(ctx, a.store, scope, args[0]); err != nil {
					return exitCode(exitRequestFailed, err)
				}
			}
			printBudget(cmd.OutOrStdout(), b)
			return nil
		},
	}
	cmd.Flags().Float64Var(&req.DailyUSD, "daily-usd", 0, "cap on the model spend of a day (UTC), in US dollars")
	cmd.Flags().IntVar(&req.MaxSessions, "max-sessions", 0, "cap on the sessions live at once")
	return cmd
}

func newBudgetClearCmd(conn *connFlags, scope string) *cobra.Command {
	return &cobra.Command{
		Use:   "clear ID",
		Short: "Remove the budget: no caps",
		Args:  budgetArgs(scope),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, ctx, done, err := conn.openAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			if a.c != nil {
				if err := a.c.DeleteBudget(ctx, scope, args[0]); err != nil {
					return apiErr(err)
				}
			} else if err := a.store.DeleteQuota(localAudit(ctx, "budget.delete", scope+":"+args[0]), scope, args[0]); err != nil {
				return exitCode(exitRequestFailed, err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "harvest: the budget of %s %s is cleared: no caps\n", scope, args[0])
			return nil
		},
	}
}

// usd formats dollars: cents from a dollar up, else four decimals.
func usd(v float64) string {
	if v >= 1 || v == 0 {
		return fmt.Sprintf("$%.2f", v)
	}
	return fmt.Sprintf("$%.4f", v)
}
