package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/harvest-dev/harvest/secrets"
)

func newSecretCmd() *cobra.Command {
	var conn connFlags
	cmd := &cobra.Command{
		Use:   "secret",
		Short: "Manage the secrets given to setup scripts and sessions",
		Long: `Secrets are values a session's environment needs and nobody should read back:
an npm token, a deploy key. The server stores them encrypted with its key
(DATA/secret.key) and never shows a value again: not in ls, not in the API.

A secret belongs to a repository (--repo owner/name, as GitHub names it:
every session on it gets it; an admin token sets these) or to you (--user:
the sessions you start get it; any token sets its own). Setup scripts get
every secret of their session; the session's own environment only those
set with --session. Your secret overrides the repository's of the same
name.

The value is read from standard input (one trailing newline removed), or
asked for without echo when standard input is a terminal; never from the
command line, where ps and the shell's history would show it.

These commands go through the server's API (--server, else $HARVEST_SERVER,
else http://` + DefaultListen + `) with $HARVEST_TOKEN, else the admin token of
the local data directory.`,
		Example: `  harvest secret set --repo octo/hello NPM_TOKEN < token.txt
  printf %s "$TOKEN" | harvest secret set --user --session GH_TOKEN
  harvest secret ls
  harvest secret rm --repo octo/hello NPM_TOKEN`,
	}
	conn.register(cmd)
	cmd.AddCommand(newSecretSetCmd(&conn), newSecretLsCmd(&conn), newSecretRmCmd(&conn))
	return cmd
}

// scopeFlags choose a secret's scope.
type scopeFlags struct {
	repo string
	user bool
}

func (f *scopeFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.repo, "repo", "", "a repository's secret: owner/name, as GitHub names it (admin tokens)")
	cmd.Flags().BoolVar(&f.user, "user", false, "your own secret (the token's)")
}

// scope is the scope the flags name; required says one must be given.
func (f *scopeFlags) scope(required bool) (string, error) {
	switch {
	case f.repo != "" && f.user:
		return "", errors.New("give --repo owner/name or --user, not both")
	case f.repo != "":
		sc, err := secrets.RepoScope(f.repo)
		if err != nil {
			return "", fmt.Errorf("--repo: %w", err)
		}
		return sc.String(), nil
	case f.user:
		return secrets.KindUser + ":" + secrets.Me, nil
	case required:
		return "", errors.New("say whose secret: --repo owner/name (a repository's) or --user (your own)")
	}
	return "", nil
}

func newSecretSetCmd(conn *connFlags) *cobra.Command {
	var (
		sf      scopeFlags
		session bool
	)
	cmd := &cobra.Command{
		Use:   "set (--repo OWNER/NAME | --user) NAME [--session]",
		Short: "Set a secret; its value is read from stdin, or asked for without echo",
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return exitCode(2, errors.New("give the secret's name, like: harvest secret set --user NPM_TOKEN (the value is read from stdin)"))
			case len(args) > 1:
				return exitCode(2, errors.New("give only the secret's name: its value is read from stdin or asked for, never taken from the command line (ps and the shell's history would show it)"))
			}
			if err := secrets.CheckName(args[0]); err != nil {
				return exitCode(2, err)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			scope, err := sf.scope(true)
			if err != nil {
				return exitCode(2, err)
			}
			value, err := readSecretValue(cmd, args[0])
			if err != nil {
				return exitCode(2, err)
			}
			c, ctx, cancel, err := conn.open(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			x, err := c.PutSecret(ctx, scope, args[0], value, session)
			if err != nil {
				return apiErr(err)
			}
			where := "setup scripts"
			if x.Session {
				where = "setup scripts and sessions"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "harvest: secret %s set in %s (for %s)\n", x.Name, x.Scope, where)
			return nil
		},
	}
	sf.add(cmd)
	cmd.Flags().BoolVar(&session, "session", false, "also give it to the sessions' environments (default: only setup scripts get it)")
	return cmd
}

// readSecretValue reads a value: asked for without echo when stdin is a
// terminal, else all of stdin less one trailing newline.
func readSecretValue(cmd *cobra.Command, name string) (string, error) {
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(cmd.ErrOrStderr(), "Value of %s (not shown): ", name)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(cmd.ErrOrStderr())
		if err != nil {
			return "", fmt.Errorf("reading the value: %w", err)
		}
		return checkedValue(string(b))
	}
	b, err := io.ReadAll(io.LimitReader(in, secrets.MaxValue+3))
	if err != nil {
		return "", fmt.Errorf("reading the value from stdin: %w", err)
	}
	b, _ = bytes.CutSuffix(b, []byte("\n"))
	b, _ = bytes.CutSuffix(b, []byte("\r"))
	return checkedValue(string(b))
}

func checkedValue(v string) (string, error) {
	if v == "" {
		return "", errors.New("the value is empty: pipe it in (harvest secret set ... < FILE) or type it at the prompt")
	}
	if err := secrets.CheckValue(v); err != nil {
		return "", err
	}
	return v, nil
}

func newSecretLsCmd(conn *connFlags) *cobra.Command {
	var (
		sf     scopeFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "ls [--repo OWNER/NAME | --user]",
		Short: "List secrets: names, scopes and times, never values",
		Long: `List secrets, never their values: an admin token's lists every secret, a
user token's its own. --repo or --user narrows the list.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			scope, err := sf.scope(false)
			if err != nil {
				return exitCode(2, err)
			}
			c, ctx, cancel, err := conn.open(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			var scopes []string
			if scope != "" {
				scopes = append(scopes, scope)
			}
			xs, err := c.ListSecrets(ctx, scopes...)
			if err != nil {
				return apiErr(err)
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), xs)
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SCOPE\tNAME\tFOR\tUPDATED\tSET BY")
			for _, x := range xs {
				use := "setup"
				if x.Session {
					use = "setup+session"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", x.Scope, x.Name, use, x.UpdatedAt.Local().Format(time.DateTime), x.SetBy)
			}
			return tw.Flush()
		},
	}
	sf.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}

func newSecretRmCmd(conn *connFlags) *cobra.Command {
	var sf scopeFlags
	cmd := &cobra.Command{
		Use:   "rm (--repo OWNER/NAME | --user) NAME...",
		Short: "Delete secrets",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return exitCode(2, errors.New("give the names of the secrets to delete (harvest secret ls lists them)"))
			}
			for _, n := range args {
				if err := secrets.CheckName(n); err != nil {
					return exitCode(2, err)
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			scope, err := sf.scope(true)
			if err != nil {
				return exitCode(2, err)
			}
			c, ctx, cancel, err := conn.open(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			var failed error
			for _, n := range args {
				if err := c.DeleteSecret(ctx, scope, n); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "harvest: %s: %v\n", n, strings.TrimSpace(err.Error()))
					failed = exitCode(exitRequestFailed, nil)
					continue
				}
				fmt.Fprintln(cmd.OutOrStdout(), n)
			}
			return failed
		},
	}
	sf.add(cmd)
	return cmd
}
