// Package demo holds the scripted model `harvest run` uses when no model key
// is configured: a harvest sim script that fixes the bundled examples/calc
// repository. It is a script for the real sim server, played over real HTTP
// through the same provider code a real model uses.
package demo

import (
	_ "embed"

	"github.com/harvest-dev/harvest/sim"
)

//go:embed script.yaml
var script []byte

// ScriptName names the script in errors and logs.
const ScriptName = "demo script (internal/demo/script.yaml)"

// Model is the model name the demo is served under: a real model id, so that
// the demo shows what a run costs with it.
const Model = "anthropic/claude-sonnet-4-5"

// Script returns the parsed demo script.
func Script() (*sim.Script, error) { return sim.ParseScript(ScriptName, script) }
