package cli

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-dev/harvest/sandbox/backends"
	"github.com/harvest-dev/harvest/sandbox/disk"
	"github.com/harvest-dev/harvest/sandbox/owner"
)

func newSandboxPruneCmd() *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "prune [--dry-run]",
		Short: "Destroy the boxes no running Harvest owns (a stopped server's, kept ones, dead warm ones)",
		Long: `Destroy every box on this machine that no running Harvest owns, and none
that one does.

Every box records its owner when it is made: the server that made it (the
servers of one data directory are one owner, named in DATA/server-id, so a
restarted server owns the boxes it reattaches), the one-shot command that
made it (harvest sandbox run, with --keep; harvest run), or, for a box kept
warm ahead of demand, the very process that prepared it. An owner runs
while its process holds its lock, a flock on a file in the owners directory
beside the backends' run dirs, which the kernel drops when the process dies
(kill -9 included): pids are not trusted, as a restarted container reuses
them.

So prune destroys: the boxes of a server that is not running (left for its
next start to reattach: SIGTERM leaves them, unless harvest serve
--stop-boxes-on-exit), boxes kept by harvest sandbox run --keep, and the
warm boxes of a Harvest that was killed, and the session disks it kept
ready (DATA/disks/pool/pool-*: a running server removes its own at exit, and
a killed one's at its next start). It leaves the boxes of every
running server and command, and a server that starts while prune destroys
its boxes waits for it. A stopped server's sessions are kept: its next
start gives them new boxes on their kept workspaces.

Local boxes (their processes, cgroups and run dirs) and docker containers
labelled as Harvest's are pruned, where each backend works. A box that
records no owner (made by an older Harvest) is listed and left: remove it
with harvest sandbox rm ID.`,
		Example: `  harvest sandbox prune --dry-run   # what would go
  harvest sandbox prune`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Minute)
			defer cancel()
			o := backends.Options{AllowUnsafeHost: true}
			ps, closeAll := ownerListers(ctx, o)
			defer closeAll()
			// The disks a killed server kept ready first: their owners'
			// lock files are removed with the boxes' (owner.Prune).
			drs, derr := disk.PrunePools(o.OwnersDir(), dryRun)
			rs, err := owner.Prune(ctx, o.OwnersDir(), ps, dryRun)
			rs, err = append(rs, drs...), errors.Join(err, derr)
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ACTION\tBACKEND\tBOX\tOWNER")
			failed := false
			for _, r := range rs {
				id, own := r.Box.Handle.ID, r.Box.Owner
				if r.Box.Warm {
					id += " (warm)"
				}
				if own == "" {
					own = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Action, r.Backend, id, own)
				if r.Err != nil {
					failed = true
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			stderr := cmd.ErrOrStderr()
			for _, r := range rs {
				if r.Err != nil {
					fmt.Fprintf(stderr, "harvest: %s: %v\n", r.Box.Handle.ID, r.Err)
				}
			}
			fmt.Fprintf(stderr, "harvest: %s\n", owner.Summary(rs))
			for _, r := range rs {
				if r.Action == owner.Unrecorded {
					fmt.Fprintln(stderr, "harvest: boxes that record no owner were left: remove them with harvest sandbox rm ID (see harvest sandbox ls)")
					break
				}
			}
			if err != nil {
				fmt.Fprintln(stderr, "harvest:", err)
				failed = true
			}
			if failed {
				return exitCode(1, nil)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be destroyed, and destroy nothing")
	return cmd
}
