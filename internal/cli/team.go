package cli

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

func newTeamCmd() *cobra.Command {
	var conn connFlags
	cmd := &cobra.Command{
		Use:   "team",
		Short: "Manage the teams of a Harvest server (admin)",
		Long: `A team is a named group of users. A repository root's policy may name it
(harvest serve --repo-root '/srv/repos?read=team:qa&write=team:backend'), so
who sees and steers whose sessions there follows the team: a change here
takes effect from each member's next request. Deleting a team removes its
memberships; its users stay. Every change is in the audit log.

Like harvest user, these commands work on the local server's data directory
directly, or with --server through its API with an admin token.`,
	}
	conn.adminFlags(cmd, "teams")
	cmd.AddCommand(newTeamLsCmd(&conn), newTeamAddCmd(&conn), newTeamRmCmd(&conn),
		newTeamMembersCmd(&conn, "add-member", true), newTeamMembersCmd(&conn, "rm-member", false), newBudgetCmd(&conn, store.QuotaTeam))
	return cmd
}

func newTeamLsCmd(conn *connFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List teams and their members",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, ctx, done, err := conn.openAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			var ts []*wire.Team
			if a.c != nil {
				if ts, err = a.c.ListTeams(ctx); err != nil {
					return apiErr(err)
				}
			} else {
				stored, err := a.store.ListTeams(ctx)
				if err != nil {
					return exitCode(exitRequestFailed, err)
				}
				for _, t := range stored {
					m, err := a.store.TeamMembers(ctx, t.Name)
					if err != nil && !errors.Is(err, store.ErrNotFound) {
						return exitCode(exitRequestFailed, err)
					}
					ts = append(ts, &wire.Team{Name: t.Name, CreatedAt: t.CreatedAt, Members: append([]string{}, m...)})
				}
			}
			if asJSON {
				if ts == nil {
					ts = []*wire.Team{}
				}
				printJSON(cmd.OutOrStdout(), ts)
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TEAM\tMEMBERS\tCREATED")
			for _, t := range ts {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, cmp.Or(strings.Join(t.Members, ","), "-"), t.CreatedAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the teams as JSON")
	return cmd
}

// oneTeam checks a command's one argument, a team's name.
func oneTeam(_ *cobra.Command, args []string) error {
	if len(args) != 1 {
		return errors.New("give the team's name, like: backend")
	}
	return store.CheckTeamName(args[0])
}

func newTeamAddCmd(conn *connFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "add NAME",
		Short: "Make a team; put users in it with harvest team add-member NAME USER...",
		Args:  oneTeam,
		RunE: func(cmd *cobra.Command, args []string) error {
			a, ctx, done, err := conn.openAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			if a.c != nil {
				if _, err := a.c.CreateTeam(ctx, args[0]); err != nil {
					return apiErr(err)
				}
			} else if err := a.store.CreateTeam(localAudit(ctx, "team.create", args[0]), &store.Team{Name: args[0], CreatedAt: time.Now().UTC()}); err != nil {
				return exitCode(exitRequestFailed, fmt.Errorf("storing the team: %w", err))
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "harvest: team %s created; a --repo-root's policy names it team:%s\n", args[0], args[0])
			return nil
		},
	}
}

func newTeamRmCmd(conn *connFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Delete a team and its memberships (its users stay)",
		Args:  oneTeam,
		RunE: func(cmd *cobra.Command, args []string) error {
			a, ctx, done, err := conn.openAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			if a.c != nil {
				err = a.c.DeleteTeam(ctx, args[0])
				if err != nil {
					return apiErr(err)
				}
				return nil
			}
			if err := a.store.DeleteTeam(localAudit(ctx, "team.delete", args[0]), args[0]); err != nil {
				return exitCode(exitRequestFailed, err)
			}
			return nil
		},
	}
}

func newTeamMembersCmd(conn *connFlags, verb string, add bool) *cobra.Command {
	short := "Put users in a team: what they see follows from their next request"
	if !add {
		short = "Take users out of a team"
	}
	return &cobra.Command{
		Use:   verb + " TEAM USER...",
		Short: short,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return fmt.Errorf("give the team and user ids: harvest team %s backend usr-0123456789ab (harvest user ls lists them)", verb)
			}
			return store.CheckTeamName(args[0])
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			a, ctx, done, err := conn.openAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			team := args[0]
			var failed error
			for _, user := range args[1:] {
				switch {
				case a.c != nil && add:
					err = a.c.AddTeamMember(ctx, team, user)
				case a.c != nil:
					err = a.c.RemoveTeamMember(ctx, team, user)
				case add:
					err = a.store.AddTeamMember(localAudit(ctx, "team.add_member", team), team, user)
				default:
					err = a.store.RemoveTeamMember(localAudit(ctx, "team.remove_member", team), team, user)
				}
				if err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "harvest: %s: %v\n", user, err)
					failed = cmp.Or(failed, exitCode(exitRequestFailed, nil))
				}
			}
			return failed
		},
	}
}
