package cli

import (
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
		Long: `API tokens authenticate the session commands and the HTTP API. A token sees
only the sessions it created; an admin token sees all and manages tokens.

These commands work on the data directory of the local server (--data, else
$HARVEST_HOME, else ~/.harvest) directly, whether or not it is running;
with --server (or $HARVEST_SERVER) they go through that server's API with an
admin token instead.`,
	}
	cmd.PersistentFlags().StringVar(&conn.server, "server", "", "manage the tokens of this server through its API (default: the local data directory)")
	cmd.PersistentFlags().StringVar(&conn.data, "data", "", "data directory of the local server (default $HARVEST_HOME, else ~/.harvest)")
	cmd.AddCommand(newTokenCreateCmd(&conn), newTokenLsCmd(&conn), newTokenRmCmd(&conn))
	return cmd
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

func (a *tokenAdmin) close() {
	if a.store != nil {
		a.store.Close()
	}
}

func newTokenCreateCmd(conn *connFlags) *cobra.Command {
	var admin, asJSON bool
	cmd := &cobra.Command{
		Use:   "create NAME [--admin]",
		Short: "Make a token; its secret is printed once",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || strings.TrimSpace(args[0]) == "" {
				return errors.New(`give the token a name, after who uses it, like: harvest token create ci`)
			}
			return server.CheckTokenName(args[0])
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := conn.tokenAdmin()
			if err != nil {
				return exitCode(exitRequestFailed, err)
			}
			defer a.close()
			ctx, cancel := signalContext(cmd.Context())
			defer cancel()
			var created *server.TokenCreated
			if a.c != nil {
				if created, err = a.c.CreateToken(ctx, args[0], admin); err != nil {
					return apiErr(err)
				}
			} else {
				secret, t := server.NewToken(args[0], admin, time.Now())
				if err := a.store.CreateToken(ctx, t); err != nil {
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
			fmt.Fprintf(cmd.ErrOrStderr(), "harvest: %s %s (%s) created; the secret above is shown only now: use it as HARVEST_TOKEN\n", kind, created.ID, created.Name)
			return nil
		},
	}
	cmd.Flags().BoolVar(&admin, "admin", false, "an admin token: sees every session, manages tokens")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the token as JSON")
	return cmd
}

func newTokenLsCmd(conn *connFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List tokens (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := conn.tokenAdmin()
			if err != nil {
				return exitCode(exitRequestFailed, err)
			}
			defer a.close()
			ctx, cancel := signalContext(cmd.Context())
			defer cancel()
			var ts []*wire.Token
			if a.c != nil {
				ts, err = a.c.ListTokens(ctx)
			} else {
				var stored []*store.Token
				stored, err = a.store.ListTokens(ctx)
				for _, t := range stored {
					ts = append(ts, server.TokenView(t))
				}
			}
			if err != nil {
				return apiErr(err)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tADMIN\tCREATED")
			for _, t := range ts {
				fmt.Fprintf(tw, "%s\t%s\t%v\t%s\n", t.ID, t.Name, t.Admin, t.CreatedAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
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
			a, err := conn.tokenAdmin()
			if err != nil {
				return exitCode(exitRequestFailed, err)
			}
			defer a.close()
			ctx, cancel := signalContext(cmd.Context())
			defer cancel()
			var failed error
			for _, id := range args {
				if a.c != nil {
					err = a.c.DeleteToken(ctx, id)
				} else {
					err = a.store.DeleteToken(ctx, id)
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
