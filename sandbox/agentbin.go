package sandbox

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// EnvAgentBinary overrides where the in-box agent binary is found.
const EnvAgentBinary = "HARVEST_AGENT_BINARY"

// AgentBinaryName is the small static in-box agent, installed next to harvest.
const AgentBinaryName = "harvest-agent"

// AgentBinary finds the binary every backend runs as PID 1 in a box, in order:
//
//  1. explicit (a config value), then $HARVEST_AGENT_BINARY;
//  2. harvest-agent next to the running executable;
//  3. the running executable itself, if it is harvest (it has the same
//     sandbox-agent subcommand, but starts slower and uses more memory).
//
// Both binaries accept `sandbox-agent ...` and `sandbox-shim ...`.
func AgentBinary(explicit string) (string, error) {
	if explicit == "" {
		explicit = os.Getenv(EnvAgentBinary)
	}
	if explicit != "" {
		p, err := filepath.Abs(explicit)
		if err != nil {
			return "", err
		}
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("agent binary %s: %w", p, err)
		}
		return p, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding the harvest executable: %w", err)
	}
	self, _ = filepath.EvalSymlinks(self)
	sibling := filepath.Join(filepath.Dir(self), AgentBinaryName)
	if checkExecutable(sibling) == nil {
		return sibling, nil
	}
	if base := filepath.Base(self); base == "harvest" || base == AgentBinaryName {
		return self, nil
	}
	return "", fmt.Errorf("no in-box agent binary: install %s next to %s (CGO_ENABLED=0 go install ./cmd/...) or set %s", AgentBinaryName, self, EnvAgentBinary)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}

// IsStatic reports whether an ELF binary needs no dynamic loader, so it runs in
// any image (a box whose userland is not the host's).
func IsStatic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}
