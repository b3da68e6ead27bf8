package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-dev/harvest/client"
	"github.com/harvest-dev/harvest/server"
	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/wire"
)

func newTokenCmd() *cobra.Command {
	var conn connFlags
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Manage the API tokens of a Harvest server",
		Long: `API tokens authenticate the session commands and the HTTP API. Every token
belongs to a user (harvest user): made with --user, it is that user's; made
without, it is a new user's of its own (a member, or an admin for --admin),
as every token became when users came. A token sees only the sessions it
created; an admin token of an admin sees all and manages tokens and users.

These commands work on the data directory of the local server (--data, else
$HARVEST_HOME, else ~/.harvest) directly, whether or not it is running;
with --server (or $HARVEST_SERVER) they go through that server's API with an
admin token instead.`,
	}
	conn.adminFlags(cmd, "tokens")
	cmd.AddCommand(newTokenCreateCmd(&conn), newTokenLsCmd(&conn), newTokenRmCmd(&conn))
	return cmd
}

// localAudit is the audit entry of a change made on the data directory's
// store directly (no server, so no token, user or address: the channel
// says it was the command).
func localAudit(ctx context.Context, action, target string) context.Context {
	return store.WithAudit(ctx, &store.AuditEntry{Channel: store.ChannelCLI, Action: action, Target: target,
		Detail: json.RawMessage(`{"via":"the data directory"}`)})
}

// tokenAdmin is where the token commands act: a server's API, or the store
// in the local data directory.
type tokenAdmin struct {
	c     *client.Client
	store store.Store
}

func (conn *connFlags) tokenAdmin() (*tokenAdmin, error) {
	if conn.server != "" || os.Getenv("HARVEST_SERVER") != "" {
		c, err := conn.client()
		if err != nil {
			return nil, err
		}
		return &tokenAdmin{c: c}, nil
	}
	data, err := serverDataDir(conn.data)
	if err != nil {
		return nil, err
	}
	db := filepath.Join(data, "harvest.db")
	if _, err := os.Stat(db); err != nil {
		return nil, fmt.Errorf("no Harvest database at %s: start harvest serve there first, or pass --data DIR or --server URL", db)
	}
	st, err := openStore(db)
	if err != nil {
		return nil, err
	}
	return &tokenAdmin{store: st}, nil
}

// adminFlags gives an admin command (token, user, team) and its
// subcommands --server and --data; what names what they manage.
func (conn *connFlags) adminFlags(cmd *cobra.Command, what string) {
	cmd.PersistentFlags().StringVar(&conn.server, "server", "", "manage the "+what+" of this server through its API (default: the local data directory)")
	cmd.PersistentFlags().StringVar(&conn.data, "data", "", "data directory of the local server (default $HARVEST_HOME, else ~/.harvest)")
}

// openAdmin opens where an admin command acts (tokenAdmin) and the
// command's context, cancelled by SIGINT/SIGTERM; done releases both. Its
// error is ready to return from RunE.
func (conn *connFlags) openAdmin(cmd *cobra.Command) (*tokenAdmin, context.Context, func(), error) {
	a, err := conn.tokenAdmin()
	if err != nil {
		return nil, nil, nil, exitCode(exitRequestFailed, err)
	}
	ctx, cancel := signalContext(cmd.Context())
	return a, ctx, func() { cancel(); a.close() }, nil
}

func (a *tokenAdmin) close() {
	if a.store != nil {
		a.store.Close()
	}
}

func newTokenCreateCmd(conn *connFlags) *cobra.Command {
	var admin, asJSON bool
	var user string
	cmd := &cobra.Command{
		Use:   "create NAME [--admin] [--user USER]",
		Short: "Make a token; its secret is printed once",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || strings.TrimSpace(args[0]) == "" {
				return errors.New(`give the token a name, after who uses it, like: harvest token create ci`)
			}
			return server.CheckTokenName(args[0])
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			a, ctx, done, err := conn.openAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			var created *server.TokenCreated
			if a.c != nil {
				if created, err = a.c.NewToken(ctx, wire.TokenRequest{Name: args[0], Admin: admin, User: user}); err != nil {
					return apiErr(err)
				}
			} else {
				if user != "" {
					u, err := a.store.GetUser(ctx, user)
					if err != nil {
						return exitCode(exitRequestFailed, fmt.Errorf("--user %s: %w (harvest user ls lists them)", user, err))
					}
					if admin && u.Role != store.RoleAdmin {
						return exitCode(exitRequestFailed, fmt.Errorf("--admin: user %s is a %s: only an admin's token may be an admin token", u.ID, u.Role))
					}
				}
				secret, t := server.NewToken(args[0], admin, time.Now())
				t.User = user
				if err := a.store.CreateToken(localAudit(ctx, "token.create", t.ID), t); err != nil {
					return exitCode(exitRequestFailed, fmt.Errorf("storing the token: %w", err))
				}
				created = &server.TokenCreated{Token: server.TokenView(t), Secret: secret}
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), created)
				return nil
			}
			fmt.Fprintln(cmd.OutOrStdout(), created.Secret)
			kind := "token"
			if created.Admin {
				kind = "admin token"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "harvest: %s %s (%s) of user %s created; the secret above is shown only now: use it as HARVEST_TOKEN\n", kind, created.ID, created.Name, created.User)
			return nil
		},
	}
	cmd.Flags().BoolVar(&admin, "admin", false, "an admin token: sees every session, manages tokens (for an admin user)")
	cmd.Flags().StringVar(&user, "user", "", "the user it is for (harvest user ls); default: a new user of the token's name")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the token as JSON")
	return cmd
}

func newTokenLsCmd(conn *connFlags) *cobra.Command {
	var user string
	cmd := &cobra.Command{
		Use:   "ls [--user USER]",
		Short: "List tokens (never their secrets), every one or a user's",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, ctx, done, err := conn.openAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			var ts []*wire.Token
			switch {
			case a.c != nil && user != "":
				ts, err = a.c.UserTokens(ctx, user)
			case a.c != nil:
				ts, err = a.c.ListTokens(ctx)
			default:
				var stored []*store.Token
				if user != "" {
					stored, err = a.store.UserTokens(ctx, user)
				} else {
					stored, err = a.store.ListTokens(ctx)
				}
				for _, t := range stored {
					ts = append(ts, server.TokenView(t))
				}
			}
			if err != nil {
				return apiErr(err)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tADMIN\tUSER\tCREATED")
			for _, t := range ts {
				fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\n", t.ID, t.Name, t.Admin, cmp.Or(t.User, "-"), t.CreatedAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "only this user's tokens")
	return cmd
}

func newTokenRmCmd(conn *connFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "rm ID...",
		Short: "Delete tokens (their sessions stay, visible to admins)",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("give token ids (harvest token ls lists them)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			a, ctx, done, err := conn.openAdmin(cmd)
			if err != nil {
				return err
			}
			defer done()
			var failed error
			for _, id := range args {
				if a.c != nil {
					err = a.c.DeleteToken(ctx, id)
				} else {
					err = a.store.DeleteToken(localAudit(ctx, "token.delete", id), id)
				}
				if err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "harvest: %s: %v\n", id, err)
					failed = exitCode(exitRequestFailed, nil)
					continue
				}
				fmt.Fprintln(cmd.OutOrStdout(), id)
			}
			return failed
		},
	}
}
