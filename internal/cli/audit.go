package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

// auditPoll is how often harvest audit -f asks for new entries.
const auditPoll = 2 * time.Second

func newAuditCmd() *cobra.Command {
	var (
		conn           connFlags
		user, action   string
		since          time.Duration
		limit          int
		follow, asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "audit [--user USER] [--action ACTION] [--since 24h] [-f]",
		Short: "Read the audit log: who did what, from where, with what result (admin)",
		Long: `The audit log records every change made through Harvest: sessions created,
sent to, cancelled, stopped and deleted, shells opened, tokens, users and
secrets changed, environments prepared, memory edited, sign-ins, and what
GitHub's webhooks started or were refused. Each entry names the user, the
channel (api, ui, cli, github, node), the client's address, the action, its
target and its result (ok, or the error it was answered with).

It prints the newest entries first; -f prints them oldest first and then
each new one as it comes (every 2 s). Like harvest token, it reads the local
server's data directory, or with --server that server's API (an admin token).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 1000 {
				return exitCode(2, fmt.Errorf("--limit %d: give 1 to 1000", limit))
			}
			a, ctx, done, err := conn.openAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			f := store.AuditFilter{User: user, Action: action, Limit: limit}
			if since > 0 {
				f.Since = time.Now().Add(-since)
			}
			read := func(f store.AuditFilter) ([]*wire.AuditEntry, error) { return readAudit(ctx, a, f) }
			es, err := read(f)
			if err != nil {
				return apiErr(err)
			}
			out := cmd.OutOrStdout()
			if !follow {
				printAudit(out, es, asJSON)
				return nil
			}
			slices.Reverse(es)
			printAudit(out, es, asJSON)
			var last int64
			if len(es) > 0 {
				last = es[len(es)-1].ID
			}
			t := time.NewTicker(auditPoll)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-t.C:
				}
				// The newest 1000 of the filter: more new entries than that
				// every 2 s would be a busy server indeed.
				g := f
				g.Limit = 1000
				page, err := read(g)
				if err != nil {
					return apiErr(err)
				}
				var fresh []*wire.AuditEntry
				for _, e := range page {
					if e.ID > last {
						fresh = append(fresh, e)
					}
				}
				slices.Reverse(fresh)
				printAudit(out, fresh, asJSON)
				if len(fresh) > 0 {
					last = fresh[len(fresh)-1].ID
				}
			}
		},
	}
	cmd.Flags().StringVar(&conn.server, "server", "", "read the log of this server through its API (default: the local data directory)")
	cmd.Flags().StringVar(&conn.data, "data", "", "data directory of the local server (default $HARVEST_HOME, else ~/.harvest)")
	cmd.Flags().StringVar(&user, "user", "", "only this user's entries")
	cmd.Flags().StringVar(&action, "action", "", "only this action's entries (like session.create)")
	cmd.Flags().DurationVar(&since, "since", 0, "only entries this recent (like 24h)")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many entries (1-1000)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "then print new entries as they come, until interrupted")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object a line")
	return cmd
}

// readAudit reads a page of the log, newest first, through the API or
// the local store.
func readAudit(ctx context.Context, a *tokenAdmin, f store.AuditFilter) ([]*wire.AuditEntry, error) {
	if a.c != nil {
		l, err := a.c.Audit(ctx, client.AuditOptions{User: f.User, Action: f.Action, Since: f.Since, Limit: f.Limit})
		if err != nil {
			return nil, err
		}
		return l.Entries, nil
	}
	es, err := a.store.ListAudit(ctx, f)
	if err != nil {
		return nil, err
	}
	var out []*wire.AuditEntry
	for _, e := range es {
		out = append(out, &wire.AuditEntry{ID: e.ID, Time: e.Time, User: e.User, Token: e.Token, Channel: e.Channel,
			Remote: e.Remote, Action: e.Action, Target: e.Target, Result: e.Result, Detail: e.Detail})
	}
	return out, nil
}

func printAudit(w io.Writer, es []*wire.AuditEntry, asJSON bool) {
	for _, e := range es {
		if asJSON {
			b, _ := json.Marshal(e)
			fmt.Fprintf(w, "%s\n", b)
			continue
		}
		user := e.User
		if user == "" {
			user = "-"
		}
		line := fmt.Sprintf("%s  %-8s %-16s %-6s %-20s %-24s %s", e.Time.Local().Format(time.DateTime), e.Channel, user, e.Result, e.Action, e.Target, e.Remote)
		if len(e.Detail) > 0 {
			line += "  " + string(e.Detail)
		}
		fmt.Fprintln(w, line)
	}
}
