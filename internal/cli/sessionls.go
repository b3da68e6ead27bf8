package cli

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/wire"
)

// session ls, show and info: what the server says of sessions, as tables.

func newSessionLsCmd(conn *connFlags) *cobra.Command {
	var states []string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List sessions, newest first",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := conn.client()
			if err != nil {
				return exitCode(2, err)
			}
			var o client.ListOptions
			for _, s := range states {
				for p := range strings.SplitSeq(s, ",") {
					o.States = append(o.States, wire.State(strings.TrimSpace(p)))
				}
			}
			o.Limit = limit
			ctx, cancel := signalContext(cmd.Context())
			defer cancel()
			list, err := c.ListSessions(ctx, o)
			if err != nil {
				return apiErr(err)
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), list)
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tTURNS\tCOST\tLAST USED\tTITLE")
			now := time.Now()
			for _, s := range list {
				fmt.Fprintf(tw, "%s\t%s\t%d\t$%.4f\t%s\t%s\n", s.ID, s.State, s.Turns, s.CostUSD, ago(now, lastUsed(s)), describeSession(s))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringArrayVar(&states, "state", nil, "only sessions in these states (comma-separated or repeated)")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many (0: all, however many pages the server answers them in)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func lastUsed(s *wire.Session) time.Time {
	if s.ActiveAt.After(s.UpdatedAt) {
		return s.ActiveAt
	}
	return s.UpdatedAt
}

func describeSession(s *wire.Session) string {
	if s.Title != "" {
		return s.Title
	}
	var names []string
	for _, r := range s.Repos {
		names = append(names, r.Name)
	}
	return strings.Join(names, ", ")
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

func idArgs(what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != 1 {
			return fmt.Errorf("give one session id, like: harvest session %s s-abcdefghijklmnop (harvest session ls lists them)", what)
		}
		return nil
	}
}

func newSessionShowCmd(conn *connFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show a session: state, queued messages, usage and cost",
		Args:  idArgs("show"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, cancel, err := conn.open(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			v, err := c.GetSession(ctx, args[0])
			if err != nil {
				return apiErr(err)
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), v)
				return nil
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "%s  %s\n", v.ID, v.State)
			if v.Title != "" {
				fmt.Fprintf(w, "title:   %s\n", v.Title)
			}
			fmt.Fprintf(w, "repos:   %s\n", describeSession(v.Session))
			fmt.Fprintf(w, "agent:   %s (%s) on %s\n", v.Agent, orDash(v.Model), v.Backend)
			fmt.Fprintf(w, "limits:  %s\n", describeEnforcement(v.LimitsEnforced))
			if t := v.Terminal; t != nil {
				fmt.Fprintf(w, "command: %q", t.Command)
				if t.DonePattern != "" {
					fmt.Fprintf(w, ", done when %q", t.DonePattern)
				}
				if t.IdleTimeout > 0 {
					fmt.Fprintf(w, ", or after %s quiet", t.IdleTimeout)
				}
				fmt.Fprintln(w)
			}
			if eg := v.Egress; eg != nil {
				if len(*eg) == 0 {
					fmt.Fprintln(w, "egress:  none")
				} else {
					fmt.Fprintf(w, "egress:  %s\n", strings.Join(*eg, ", "))
				}
			}
			if c := v.Collab; c.Workflow != "" {
				fmt.Fprintf(w, "workflow: %s, %s", c.Workflow, c.Mode)
				if c.Branch != "" {
					fmt.Fprintf(w, " on branch %s", c.Branch)
				}
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "turns:   %d · %s in, %s out tokens · $%.4f\n", v.Turns, commas(v.Usage.InputTokens), commas(v.Usage.OutputTokens), v.CostUSD)
			if v.Error != "" {
				fmt.Fprintf(w, "error:   %s\n", v.Error)
			}
			fmt.Fprintf(w, "queue:   %d %s\n", len(v.Queue), plural(len(v.Queue), "message", "messages"))
			for _, m := range v.Queue {
				fmt.Fprintf(w, "  %d. %s  %s\n", m.Seq, m.ID, firstLineOf(m.Text, 100))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// describeEnforcement says which of a session's limits hold (the API's
// limits_enforced).
func describeEnforcement(e *wire.Enforcement) string {
	if e == nil {
		return "not known yet (no sandbox has started)"
	}
	var on, off []string
	for _, l := range []struct {
		name string
		ok   bool
	}{{"memory", e.Memory}, {"pids", e.Pids}, {"disk", e.Disk}} {
		if l.ok {
			on = append(on, l.name)
		} else {
			off = append(off, l.name)
		}
	}
	switch {
	case len(off) == 0:
		return "enforced: " + strings.Join(on, ", ")
	case len(on) == 0:
		return "NOT enforced: " + strings.Join(off, ", ")
	}
	return "enforced: " + strings.Join(on, ", ") + "; NOT enforced: " + strings.Join(off, ", ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newSessionInfoCmd(conn *connFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "info ID",
		Short: "Everything about a session: workspaces, limits, sandbox, lock, times",
		Args:  idArgs("info"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, cancel, err := conn.open(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			v, err := c.GetSession(ctx, args[0])
			if err != nil {
				return apiErr(err)
			}
			lock, err := c.Lock(ctx, args[0])
			if err != nil {
				return apiErr(err)
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), struct {
					*wire.View
					Lock *server.LockInfo `json:"lock"`
				}{v, lock})
				return nil
			}
			w := cmd.OutOrStdout()
			tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
			fmt.Fprintf(tw, "id:\t%s\n", v.ID)
			fmt.Fprintf(tw, "owner:\t%s\n", v.Owner)
			fmt.Fprintf(tw, "state:\t%s\n", v.State)
			if v.Error != "" {
				fmt.Fprintf(tw, "error:\t%s\n", v.Error)
			}
			fmt.Fprintf(tw, "agent:\t%s\n", v.Agent)
			fmt.Fprintf(tw, "model:\t%s\n", orDash(v.Model))
			fmt.Fprintf(tw, "backend:\t%s (sandbox %s)\n", v.Backend, map[bool]string{true: "present", false: "none"}[len(v.Sandbox) > 0])
			fmt.Fprintf(tw, "mode:\t%s\n", v.Mode)
			for _, r := range v.Repos {
				ref := ""
				if r.Ref != "" {
					ref = " @" + r.Ref
				}
				fmt.Fprintf(tw, "repo %s:\t%s%s → %s\n", r.Name, r.Source, ref, orDash(r.Path))
			}
			l := v.Limits
			fmt.Fprintf(tw, "limits:\tidle %s, lifetime %s, watchdog %s, memory %s, disk %s (%s files), max steps %s, budget %s\n",
				durOr(l.IdleTimeout), durOr(l.MaxLifetime), durOr(l.TurnWatchdog), sizeOr(l.MemoryBytes), sizeOr(l.DiskBytes), intOr(int(l.DiskInodes)), intOr(l.MaxSteps), usdOr(l.BudgetUSD))
			fmt.Fprintf(tw, "enforced:\t%s\n", describeEnforcement(v.LimitsEnforced))
			fmt.Fprintf(tw, "turns:\t%d\n", v.Turns)
			fmt.Fprintf(tw, "usage:\t%s in (+%s cached), %s out tokens · $%.4f\n", commas(v.Usage.InputTokens), commas(v.Usage.CacheReadTokens+v.Usage.CacheWriteTokens), commas(v.Usage.OutputTokens), v.CostUSD)
			fmt.Fprintf(tw, "queue:\t%d %s\n", len(v.Queue), plural(len(v.Queue), "message", "messages"))
			if lock.Held {
				fmt.Fprintf(tw, "lock:\theld by %s until %s\n", lock.Holder, lock.Expires.Local().Format(time.DateTime))
			} else {
				fmt.Fprintf(tw, "lock:\tfree\n")
			}
			now := time.Now()
			fmt.Fprintf(tw, "created:\t%s (%s)\n", v.CreatedAt.Local().Format(time.DateTime), ago(now, v.CreatedAt))
			fmt.Fprintf(tw, "updated:\t%s (%s)\n", v.UpdatedAt.Local().Format(time.DateTime), ago(now, v.UpdatedAt))
			fmt.Fprintf(tw, "active:\t%s (%s)\n", v.ActiveAt.Local().Format(time.DateTime), ago(now, v.ActiveAt))
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (the session with its lock)")
	return cmd
}

func durOr(d time.Duration) string {
	if d == 0 {
		return "default"
	}
	return d.String()
}

func sizeOr(n int64) string {
	if n == 0 {
		return "default"
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

func intOr(n int) string {
	if n == 0 {
		return "default"
	}
	return strconv.Itoa(n)
}

func usdOr(f float64) string {
	if f == 0 {
		return "none"
	}
	return fmt.Sprintf("$%.2f", f)
}
