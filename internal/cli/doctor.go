package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-dev/harvest/agent/agents"
	"github.com/harvest-dev/harvest/sandbox/backends"
	"github.com/harvest-dev/harvest/session"
)

// agentReport says whether an external agent's CLI is installed.
type agentReport struct {
	Agent     string `json:"agent"`
	Available bool   `json:"available"`
	CLI       string `json:"cli"`
	Version   string `json:"version,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// checkAgents reports each external agent's CLI under the CLI prefix, with
// its version (run on this machine, with a throwaway HOME).
func checkAgents(ctx context.Context) []agentReport {
	home, err := os.MkdirTemp("", "harvest-doctor-*")
	if err == nil {
		defer os.RemoveAll(home)
	}
	var out []agentReport
	for _, k := range agents.Kinds() {
		if k.Caps.CLI == "" {
			continue
		}
		r := agentReport{Agent: k.Name, CLI: agents.CLIPath(cliPrefix(), k.Caps.CLI)}
		if err := agents.CheckCLI(cliPrefix(), k); err != nil {
			r.Reason = err.Error()
			out = append(out, r)
			continue
		}
		vctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		cmd := exec.CommandContext(vctx, r.CLI, "--version")
		cmd.Env = append(os.Environ(), "HOME="+home)
		b, err := cmd.Output()
		cancel()
		if err != nil {
			r.Reason = fmt.Sprintf("%s --version: %v", r.CLI, err)
		} else {
			r.Available = true
			r.Version = strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
		}
		out = append(out, r)
	}
	return out
}

func newDoctorCmd() *cobra.Command {
	var asJSON bool
	var data, minFreeFlag string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check which sandbox backends and agent CLIs work on this machine, and how to fix the others",
		Long: `Check every sandbox backend on this machine. For each one that cannot run,
say why and how to fix it. Then the external agents' CLIs (--agent claudecode,
terminal, opencode): installed under $HARVEST_CLI_PREFIX (default
/opt/harvest/npm, where scripts/setup puts them) and their versions. Then
whether disk limits (--disk) can be enforced here: a small disk is made,
mounted and removed in the data directory; and the data directory's free
space against its floor (harvest serve --min-free) and against the disk
limits promised to its live sessions. Exits 0
when at least one isolating backend works; the CLIs are optional.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			minFree, err := session.ParseMinFree(minFreeFlag)
			if err != nil {
				return exitCode(2, err)
			}
			reports := backends.Doctor(ctx, backends.Options{})
			agents := checkAgents(ctx)
			disks := checkDisks(ctx, data, minFree)
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
				if err := enc.Encode(map[string]any{"backends": reports, "agents": agents, "disk_limits": disks, "ok": ok}); err != nil {
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
					if r.Runtime != "" {
						name += " --runtime " + r.Runtime
					}
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
						name := r.Backend
						if r.Runtime != "" {
							name += " --runtime " + r.Runtime
						}
						fmt.Fprintf(out, "\nto fix %s: %s\n", name, r.Fix)
					}
				}
				for _, r := range reports {
					if len(r.Caveats) > 0 {
						fmt.Fprintf(out, "\nunder %s --runtime %s, boxes cannot rely on this:\n", r.Backend, r.Runtime)
						for _, c := range r.Caveats {
							fmt.Fprintf(out, "  - %s\n", c)
						}
					}
				}
				if len(reports) > 0 && reports[0].Agent != "" {
					fmt.Fprintf(out, "\nin-box agent: %s\n", reports[0].Agent)
				}
				printDiskReport(out, disks, minFree)
				fmt.Fprintln(out)
				tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "AGENT\tSTATUS\tCLI")
				for _, a := range agents {
					if a.Available {
						fmt.Fprintf(tw, "%s\tok\t%s (%s)\n", a.Agent, a.CLI, a.Version)
					} else {
						fmt.Fprintf(tw, "%s\tunavailable\t%s\n", a.Agent, a.Reason)
					}
				}
				tw.Flush()
			}
			if !ok {
				return exitCode(1, errors.New("no isolating sandbox backend works on this machine (see above)"))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().StringVar(&data, "data", "", "the server's data directory (default $HARVEST_HOME, else ~/.harvest)")
	cmd.Flags().StringVar(&minFreeFlag, "min-free", "", "the floor of free space the server keeps there, as harvest serve --min-free (default: 10% of the filesystem, at least 1g, at most 5g)")
	return cmd
}
