// Command harvest is Harvest's single binary: the CLI, the server (harvest
// serve) and, as a fallback for harvest-agent, the in-box agent and shim.
package main

import (
	"os"

	"github.com/harvest-dev/harvest/internal/cli"
	"github.com/harvest-dev/harvest/sandbox/agentd"
	"github.com/harvest-dev/harvest/sandbox/local/shim"
)

func main() {
	// The in-box roles skip cobra: they are exec'd per box and should start
	// as fast as they can.
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "sandbox-agent":
			os.Exit(agentd.Main(os.Args[2:]))
		case "sandbox-shim":
			os.Exit(shim.Main(os.Args[2:]))
		}
	}
	os.Exit(cli.Main(os.Args[1:]))
}
