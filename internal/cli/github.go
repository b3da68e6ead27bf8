package cli

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-dev/harvest/wire"
)

func newGitHubCmd() *cobra.Command {
	var conn connFlags
	cmd := &cobra.Command{
		Use:   "github",
		Short: "See and replay the GitHub webhook deliveries a Harvest server received",
		Long: `A Harvest server with GitHub (harvest serve --github-app-id ...) stores every
webhook delivery before acknowledging it and processes it afterwards. One that
fails for good (the app is not installed on the repository, GitHub refused a
request, or it failed its last attempt) says why, and the person who asked is
told where a comment can be posted. Once the cause is fixed, replay it.

These commands need an admin token (HARVEST_TOKEN, or a local server's
admin-token).`,
	}
	conn.register(cmd)
	cmd.AddCommand(newGitHubDeliveriesCmd(&conn), newGitHubReplayCmd(&conn))
	return cmd
}

func newGitHubDeliveriesCmd(conn *connFlags) *cobra.Command {
	var failed, asJSON bool
	var state string
	var limit int
	cmd := &cobra.Command{
		Use:   "deliveries [--failed]",
		Short: "List the webhook deliveries, newest first, with what each did or why it failed",
		Example: `  harvest github deliveries --failed
  harvest github replay 72d3162e-cc78-11e3-81ab-4c9367dc0958`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if failed {
				if state != "" && state != wire.DeliveryFailed {
					return exitCode(2, errors.New("--failed and --state "+state+": give one"))
				}
				state = wire.DeliveryFailed
			}
			switch state {
			case "", wire.DeliveryPending, wire.DeliveryDone, wire.DeliveryFailed:
			default:
				return exitCode(2, fmt.Errorf("--state %s: use pending, done or failed", state))
			}
			if limit < 0 || limit > 1000 {
				return exitCode(2, fmt.Errorf("--limit %d: 1 to 1000 (0: 100)", limit))
			}
			c, ctx, cancel, err := conn.open(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			ds, err := c.GitHubDeliveries(ctx, state, limit)
			if err != nil {
				return apiErr(err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				printJSON(out, wire.GitHubDeliveryList{Deliveries: ds})
				return nil
			}
			if len(ds) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "harvest: no deliveries")
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tRECEIVED\tEVENT\tWHERE\tSTATE\tATTEMPTS\tRESULT")
			for _, d := range ds {
				ev := d.Event
				if d.Action != "" {
					ev += "." + d.Action
				}
				where := d.Repo
				if d.Number != 0 {
					where += fmt.Sprintf("#%d", d.Number)
				}
				st := d.State
				if d.State == wire.DeliveryPending && !d.NotBefore.IsZero() {
					st += " (due " + d.NotBefore.Local().Format(time.TimeOnly) + ")"
				}
				if d.Replays > 0 {
					st += fmt.Sprintf(" (replayed %d)", d.Replays)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", d.ID, d.ReceivedAt.Local().Format(time.DateTime), ev, orDash(where), st, d.Attempts, oneLine(d.Result, 160))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&failed, "failed", false, "only the deliveries that failed for good (those replay takes)")
	cmd.Flags().StringVar(&state, "state", "", "only those in this state: pending, done or failed")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many (default 100)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print them as JSON")
	return cmd
}

func newGitHubReplayCmd(conn *connFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "replay ID",
		Short: "Process a delivery that failed for good again, once (see harvest github deliveries --failed)",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || !wire.ValidDeliveryID(args[0]) {
				return errors.New("give one delivery id, as harvest github deliveries --failed lists them")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, cancel, err := conn.open(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			d, err := c.ReplayGitHubDelivery(ctx, args[0])
			if err != nil {
				return apiErr(err)
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), d)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "delivery %s (%s) is pending again: it is processed once more (harvest github deliveries shows how it ends)\n", d.ID, d.Event)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the delivery as JSON")
	return cmd
}

// oneLine is s on one line, at most n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n-1] + "…"
	}
	return s
}
