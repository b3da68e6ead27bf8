package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-dev/harvest/store"
	"github.com/harvest-dev/harvest/store/postgres"
	"github.com/harvest-dev/harvest/store/sqlite"
	"github.com/harvest-dev/harvest/store/storecopy"
)

func newStoreCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Manage where a Harvest server keeps its state",
	}
	cmd.AddCommand(newStoreMigrateCmd())
	return cmd
}

const exitMigrateMismatch = 1 // the copy was made but does not verify

func newStoreMigrateCmd() *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:   "migrate --from STORE --to STORE",
		Short: "Copy a server's state to another store, and verify the copy",
		Long: `Copy everything a Harvest server keeps — sessions with their messages and
events (same seqs), API tokens (their hashes: every token keeps working),
environments, secrets (still sealed), the repositories' memory, webhook
deliveries, web sign-ins and sessions' leases — from one store to another,
then compare both: a count and a SHA-256 of every kind of row, and of every
session's events and messages. The summary says what matched; the exit
status is 1 when anything differs.

A store is sqlite:PATH (a server's is DATA/harvest.db) or a postgres:// URL.
The destination must be empty (a new PostgreSQL database, or a SQLite file
that does not exist yet). Stop the server first: a SQLite file a harvest
serve runs on, or a PostgreSQL database a live node shares, is refused.

Secrets stay sealed with the server's key, which is in its data directory,
not in the store: start the server on the new store with the same --data.

  harvest store migrate --from sqlite:$HOME/.harvest/harvest.db --to postgres://harvest@db:5432/harvest
  harvest serve --store postgres://harvest@db:5432/harvest`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" || to == "" {
				return exitCode(2, errors.New("store migrate: give both --from and --to (sqlite:PATH or a postgres:// URL)"))
			}
			return migrateStore(cmd.Context(), from, to, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the store to copy: sqlite:PATH or a postgres:// URL")
	cmd.Flags().StringVar(&to, "to", "", "the empty store to copy into: sqlite:PATH or a postgres:// URL")
	return cmd
}

// migrateStore copies from into to and verifies the copy.
func migrateStore(ctx context.Context, from, to string, out io.Writer) error {
	src, closeSrc, err := openMigrateStore(ctx, "--from", from, true)
	if err != nil {
		return exitCode(exitHarvestError, err)
	}
	defer closeSrc()
	dst, closeDst, err := openMigrateStore(ctx, "--to", to, false)
	if err != nil {
		return exitCode(exitHarvestError, err)
	}
	defer closeDst()

	now := time.Now()
	if err := storecopy.Copy(ctx, src, dst, now, out); err != nil {
		return exitCode(exitHarvestError, fmt.Errorf("store migrate: %w", err))
	}
	fi, err := storecopy.Take(ctx, src, now)
	if err != nil {
		return exitCode(exitHarvestError, fmt.Errorf("store migrate: verifying: reading the source: %w", err))
	}
	ti, err := storecopy.Take(ctx, dst, now)
	if err != nil {
		return exitCode(exitHarvestError, fmt.Errorf("store migrate: verifying: reading the destination: %w", err))
	}
	r := storecopy.Compare(fi, ti)
	r.Print(out)
	if !r.OK() {
		return exitCode(exitMigrateMismatch, errors.New("store migrate: the copy differs from the source (above); do not use it: drop it and migrate again"))
	}
	fmt.Fprintln(out, "the copy verifies: every count and checksum matches")
	return nil
}

// openMigrateStore opens one side of a migration. The source is made
// still: a SQLite file is claimed (refused if a harvest serve has it) and
// its write lock held until closed; a PostgreSQL database with a live
// node is refused. A SQLite source must exist.
func openMigrateStore(ctx context.Context, flag, v string, source bool) (store.Store, func(), error) {
	if isPostgresURL(v) {
		st, err := postgres.Open(ctx, v)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", flag, err)
		}
		if source {
			nodes, err := st.ListNodes(ctx)
			if err != nil {
				st.Close()
				return nil, nil, fmt.Errorf("%s: %w", flag, err)
			}
			if len(nodes) > 0 {
				st.Close()
				return nil, nil, fmt.Errorf("%s: %d harvest servers still use this database (node %s at %s for one): stop them first", flag, len(nodes), nodes[0].ID, nodes[0].Addr)
			}
		}
		return st, func() { st.Close() }, nil
	}
	path, ok := strings.CutPrefix(v, "sqlite:")
	if !ok || path == "" {
		return nil, nil, fmt.Errorf("%s: give sqlite:PATH (e.g. sqlite:$HOME/.harvest/harvest.db) or a postgres:// URL", flag)
	}
	if _, err := os.Stat(path); source && err != nil {
		return nil, nil, fmt.Errorf("%s: %w", flag, err)
	}
	release, err := sqlite.Claim(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", flag, err)
	}
	st, err := sqlite.Open(path)
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("%s: %w", flag, err)
	}
	unhold := func() error { return nil }
	if source {
		if unhold, err = st.HoldWrites(ctx); err != nil {
			st.Close()
			release()
			return nil, nil, fmt.Errorf("%s: %w", flag, err)
		}
	}
	return st, func() { unhold(); st.Close(); release() }, nil
}
