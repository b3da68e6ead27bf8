package cli

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/harvest-dev/harvest/wire"
	"github.com/harvest-dev/harvest/workspace"
)

type prepareFlags struct {
	repo, ref, backend, name string
	force, detach, json      bool
}

func newPrepareCmd() *cobra.Command {
	var conn connFlags
	var f prepareFlags
	cmd := &cobra.Command{
		Use:   "prepare --repo SOURCE [flags]",
		Short: "Prepare a repository's environment so its sessions start warm",
		Long: `Build a repository's environment on the Harvest server: its checkout, its
setup run once (.harvest/setup.sh; else what the repository is: go.work or
go.mod → go mod download and a build of the test binaries;
package-lock.json → npm ci, pnpm-lock.yaml or yarn.lock → pnpm or yarn
through corepack, package.json alone → npm install writing no lockfile;
uv.lock → uv sync, poetry.lock → poetry install (each else pip),
requirements.txt or pyproject.toml → a virtualenv in .venv; Cargo.lock →
cargo fetch; Gemfile.lock → bundle install into vendor/bundle), with
egress to the server's allowlist, and HOME with its caches, kept. The log
says what was found; a repository with nothing to install is ready at once.
New sessions on the repository start from its newest ready environment:
warm caches, installed dependencies, and .harvest/start.sh run at every box
start.

--repo is a source as for sessions (a directory on the server, a git URL,
or OWNER/NAME on the server's GitHub). The build's log is shown until it
ends (--detach: only its id). An environment whose fingerprint (repository,
commit, scripts, backend, image, Harvest's version) has not changed is not
built again unless --force. Exit status 0 when it is ready, 1 when the
setup failed.`,
		Example: `  harvest prepare --repo ~/src/api
  harvest prepare --repo acme/web --ref main --backend docker`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.repo == "" {
				return exitCode(2, errors.New("--repo is required: a directory on the server, a git URL or OWNER/NAME"))
			}
			spec := wire.RepoSpec{Ref: f.ref, Name: f.name}
			if repo, ok := githubRepo(f.repo); ok {
				spec.GitHub = repo
			} else if workspace.IsURL(f.repo) {
				spec.Source = f.repo
			} else {
				abs, err := filepath.Abs(f.repo)
				if err != nil {
					return exitCode(2, fmt.Errorf("--repo %s: %w", f.repo, err))
				}
				spec.Source = abs
			}
			c, ctx, cancel, err := conn.open(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			e, err := c.PrepareEnvironment(ctx, wire.PrepareRequest{Repo: spec, Backend: f.backend, Force: f.force})
			if err != nil {
				return apiErr(err)
			}
			out, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
			if e.State == wire.EnvReady {
				fmt.Fprintf(stderr, "harvest: %s is ready and up to date (built %s); --force builds it again\n", e.ID, e.BuiltAt.Local().Format("2006-01-02 15:04"))
			}
			if f.detach || e.State != wire.EnvBuilding {
				return printEnv(out, e, f.json)
			}
			log, err := c.EnvironmentLog(ctx, e.ID, true)
			if err != nil {
				return apiErr(err)
			}
			io.Copy(stderr, log)
			log.Close()
			if e, err = c.GetEnvironment(ctx, e.ID); err != nil {
				return apiErr(err)
			}
			if err := printEnv(out, e, f.json); err != nil {
				return err
			}
			if e.State != wire.EnvReady {
				return exitCode(1, fmt.Errorf("environment %s is %s: %s", e.ID, e.State, e.Error))
			}
			return nil
		},
	}
	conn.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.repo, "repo", "", "the repository: a directory on the server, a git URL, or OWNER/NAME on its GitHub")
	fl.StringVar(&f.ref, "ref", "", "the branch to prepare (default: the repository's)")
	fl.StringVar(&f.name, "name", "", "its workspace name (default: the repository's)")
	fl.StringVar(&f.backend, "backend", "", "the sandbox backend it is for (default: the server's)")
	fl.BoolVar(&f.force, "force", false, "build even when nothing changed")
	fl.BoolVar(&f.detach, "detach", false, "print the environment's id and return; the build goes on")
	fl.BoolVar(&f.json, "json", false, "print the environment as JSON")
	return cmd
}

func printEnv(w io.Writer, e *wire.Environment, asJSON bool) error {
	if asJSON {
		printJSON(w, e)
		return nil
	}
	fmt.Fprintln(w, e.ID)
	return nil
}
