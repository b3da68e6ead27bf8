// Command harvest-agent is the small static binary Harvest runs inside every
// box: `harvest-agent sandbox-agent` is the in-box agent (PID 1), and
// `harvest-agent sandbox-shim` is the local backend's per-box supervisor.
//
// It links only the standard library and a few small packages, so it starts in
// about a millisecond and stays at a few MB resident. The full `harvest` binary
// has the same two subcommands and works as a fallback when harvest-agent is
// not installed next to it.
package main

import (
	"fmt"
	"os"

	"github.com/harvest-dev/harvest/sandbox/agentd"
	"github.com/harvest-dev/harvest/sandbox/local/shim"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: harvest-agent sandbox-agent|sandbox-shim [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "sandbox-agent":
		os.Exit(agentd.Main(os.Args[2:]))
	case "sandbox-shim":
		os.Exit(shim.Main(os.Args[2:]))
	default:
		fmt.Fprintf(os.Stderr, "harvest-agent: unknown command %q (want sandbox-agent or sandbox-shim)\n", os.Args[1])
		os.Exit(2)
	}
}
