package cli

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

func newUserCmd() *cobra.Command {
	var conn connFlags
	cmd := &cobra.Command{
		Use:   "user",
		Short: "Manage the users of a Harvest server (admin)",
		Long: `A user is a person: their API tokens (harvest token create --user) act for
them, and what they do is recorded as theirs, whatever the channel (API, web
UI, CLI, a GitHub comment: a GitHub account becomes a user the first time it
starts a session). A role says what they may do: admin (everything),
member (start and steer sessions) or viewer (read). A disabled user's tokens
and sign-ins are refused from the next request on; users are never deleted,
so what they did keeps naming them.

Like harvest token, these commands work on the local server's data directory
directly, or with --server through its API with an admin token.`,
	}
	conn.adminFlags(cmd, "users")
	cmd.AddCommand(newUserLsCmd(&conn), newUserAddCmd(&conn), newUserSetRoleCmd(&conn),
		newUserDisableCmd(&conn, "disable", true), newUserDisableCmd(&conn, "enable", false), newBudgetCmd(&conn, store.QuotaUser))
	return cmd
}

func newUserLsCmd(conn *connFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List users",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, ctx, done, err := conn.openAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			var us []*wire.User
			if a.c != nil {
				us, err = a.c.ListUsers(ctx)
			} else {
				var stored []*store.User
				stored, err = a.store.ListUsers(ctx)
				for _, u := range stored {
					us = append(us, server.UserView(u, nil))
				}
			}
			if err != nil {
				return apiErr(err)
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), us)
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tROLE\tDISABLED\tCREATED")
			for _, u := range us {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\n", u.ID, u.Name, u.Role, u.Disabled, u.CreatedAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the users as JSON")
	return cmd
}

func newUserAddCmd(conn *connFlags) *cobra.Command {
	var role string
	cmd := &cobra.Command{
		Use:   "add NAME [--role admin|member|viewer]",
		Short: "Make a user; give them a token with harvest token create NAME --user ID",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || strings.TrimSpace(args[0]) == "" {
				return errors.New(`give the person's name, like: harvest user add "Alice Martin" --role member`)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if !store.Role(role).Valid() {
				return exitCode(2, fmt.Errorf("--role %q: give admin, member or viewer", role))
			}
			a, ctx, done, err := conn.openAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			var u *wire.User
			if a.c != nil {
				if u, err = a.c.CreateUser(ctx, wire.UserRequest{Name: args[0], Role: role}); err != nil {
					return apiErr(err)
				}
			} else {
				su := &store.User{ID: store.NewUserID(), Name: args[0], Role: store.Role(role), CreatedAt: time.Now().UTC()}
				if err := a.store.CreateUser(localAudit(ctx, "user.create", su.ID), su); err != nil {
					return exitCode(exitRequestFailed, fmt.Errorf("storing the user: %w", err))
				}
				u = server.UserView(su, nil)
			}
			fmt.Fprintln(cmd.OutOrStdout(), u.ID)
			fmt.Fprintf(cmd.ErrOrStderr(), "harvest: user %s (%s, %s) created; give them a token: harvest token create NAME --user %s\n", u.ID, u.Name, u.Role, u.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&role, "role", wire.RoleMember, "admin, member or viewer")
	return cmd
}

// updateUser applies p to user id, through the API or the local store.
func updateUser(cmd *cobra.Command, conn *connFlags, id string, p wire.UserPatch) error {
	a, ctx, done, err := conn.openAdmin(cmd)
	if err != nil {
		return err
	}
	defer done()
	var u *wire.User
	if a.c != nil {
		if u, err = a.c.UpdateUser(ctx, id, p); err != nil {
			return apiErr(err)
		}
	} else {
		su, err := a.store.UpdateUser(localAudit(ctx, "user.update", id), id, func(u *store.User) error {
			if p.Role != nil {
				u.Role = store.Role(*p.Role)
			}
			if p.Disabled != nil {
				u.Disabled = *p.Disabled
			}
			return nil
		})
		if err != nil {
			return exitCode(exitRequestFailed, fmt.Errorf("user %s: %w (harvest user ls lists them)", id, err))
		}
		u = server.UserView(su, nil)
	}
	state := "enabled"
	if u.Disabled {
		state = "disabled"
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\t%s\t%s\n", u.ID, u.Name, u.Role, state)
	return nil
}

func newUserSetRoleCmd(conn *connFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "set-role USER admin|member|viewer",
		Short: "Change a user's role (at once, for every token of theirs)",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return errors.New("give the user's id and the role: harvest user set-role usr-0123456789ab member")
			}
			if !store.Role(args[1]).Valid() {
				return fmt.Errorf("role %q: give admin, member or viewer", args[1])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return updateUser(cmd, conn, args[0], wire.UserPatch{Role: &args[1]})
		},
	}
}

func newUserDisableCmd(conn *connFlags, verb string, disabled bool) *cobra.Command {
	short := "Disable users: their tokens and sign-ins are refused from the next request on"
	if !disabled {
		short = "Enable disabled users again"
	}
	return &cobra.Command{
		Use:   verb + " USER...",
		Short: short,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("give user ids (harvest user ls lists them)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var failed error
			for _, id := range args {
				if err := updateUser(cmd, conn, id, wire.UserPatch{Disabled: &disabled}); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "harvest: %s: %v\n", id, err)
					failed = cmp.Or(failed, exitCode(exitRequestFailed, nil))
				}
			}
			return failed
		},
	}
}
