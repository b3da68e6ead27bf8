// Package cli is the harvest command line. Commands parse flags, handle
// signals and print; the work happens in the packages they call.
//
// # harvest run and sessions
//
// `harvest run` builds its agent where sessions do, through agent/agents
// (runagent.go): every concern wired there (the model proxy, egress, and
// what later issues add: git identity, instructions, MCP) reaches a run as
// it reaches a session. It is not yet a session on an in-process Manager,
// though the design asks for one runtime path, because a run has options a
// session does not (yet): an agent definition chosen by name, a per-turn
// --timeout and --max-output-tokens, a docker --image, --cpus, an audit log,
// the unsafe host backend, and workspaces kept under runs/ for the user to
// read after the box is gone. Making the run a session means giving
// sessions those first. Until then the box side of a run (the copies, the
// disk, starting the box, recording a non-git workspace's state) is a
// second, smaller copy of the session's provisioning (session/provision.go):
// a change to how boxes are prepared (prepared environments, setup
// scripts) must be made in both, or this gap closed first.
package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// Version is set at build time with -ldflags "-X .../internal/cli.Version=...".
var Version = "dev"

// exitError carries a process exit code through cobra.
type exitError struct {
	code int
	err  error // printed unless nil
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

// exitCode wraps err so Main exits with code; a nil err prints nothing.
func exitCode(code int, err error) error { return &exitError{code: code, err: err} }

// Main runs the CLI with args and returns the process exit code.
func Main(args []string) int {
	return run(args, os.Stdin, os.Stdout, os.Stderr)
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(stderr, "harvest:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "harvest:", err)
	return 2
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "harvest",
		Short: "Run coding agents in the background, each in its own sandbox",
		Long: `Harvest runs coding agents on git repositories, each session in its own sandbox.

Start here:
  harvest run --repo DIR "PROMPT"    run the agent on a copy of DIR, in a fresh sandbox
  harvest doctor                     which sandbox backends work on this machine
  harvest serve                      the server: durable sessions over an HTTP API
  harvest session new --repo DIR "PROMPT"
                                     start a session on a running server (see harvest session -h)
  harvest sandbox run -- CMD [ARGS]  run a command in a fresh, isolated box`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       Version,
	}
	root.AddCommand(newRunCmd(), newSandboxCmd(), newDoctorCmd(), newVersionCmd())
	root.AddCommand(newAgentCmds()...)
	root.AddCommand(newSimCmd())
	root.AddCommand(newServeCmd(), newSessionCmd(), newTokenCmd(), newUserCmd(), newTeamCmd(), newAuditCmd(), newSecretCmd(), newPrepareCmd())
	root.AddCommand(newMemoryCmd(), newStoreCmd(), newGitHubCmd())
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "harvest", Version)
			return nil
		},
	}
}

// newAgentCmds documents the in-box roles; main dispatches them before cobra.
func newAgentCmds() []*cobra.Command {
	agent := &cobra.Command{
		Use:                "sandbox-agent",
		Short:              "The in-box agent (PID 1 in every box; started by backends)",
		DisableFlagParsing: true,
		Hidden:             false,
		RunE: func(cmd *cobra.Command, args []string) error {
			return exitCode(2, errors.New("sandbox-agent is started by sandbox backends, not by hand"))
		},
	}
	shim := &cobra.Command{
		Use:                "sandbox-shim",
		Short:              "The local backend's per-box supervisor (started by harvest)",
		DisableFlagParsing: true,
		Hidden:             true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return exitCode(2, errors.New("sandbox-shim is started by the local backend, not by hand"))
		},
	}
	return []*cobra.Command{agent, shim}
}
