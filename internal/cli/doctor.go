package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-dev/harvest/sandbox/backends"
)

func newDoctorCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check which sandbox backends work on this machine, and how to fix the others",
		Long: `Check every sandbox backend on this machine. For each one that cannot run,
say why and how to fix it. Exits 0 when at least one isolating backend works.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			reports := backends.Doctor(ctx, backends.Options{})
			ok := false
			for _, r := range reports {
				if r.Available && r.Isolating {
					ok = true
				}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(map[string]any{"backends": reports, "ok": ok}); err != nil {
					return err
				}
			} else {
				tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "BACKEND\tSTATUS\tISOLATION\tNOTES")
				for _, r := range reports {
					status := "ok"
					if !r.Available {
						status = "unavailable"
					}
					iso := "isolated"
					if !r.Isolating {
						iso = "NONE (unsafe, needs --unsafe-host)"
					}
					name := r.Backend
					if r.IsDefault {
						name += " (default)"
					}
					note := r.Describe
					if !r.Available {
						note = r.Reason
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, status, iso, note)
				}
				tw.Flush()
				for _, r := range reports {
					if !r.Available && r.Fix != "" {
						fmt.Fprintf(out, "\nto fix %s: %s\n", r.Backend, r.Fix)
					}
				}
				if len(reports) > 0 && reports[0].Agent != "" {
					fmt.Fprintf(out, "\nin-box agent: %s\n", reports[0].Agent)
				}
			}
			if !ok {
				return exitCode(1, errors.New("no isolating sandbox backend works on this machine (see above)"))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}
