package cli

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strings"

	"github.com/harvest-dev/harvest/egress"
)

const mcpAllowHelp = "let sessions' and repositories' remote MCP servers be dialed at this internal address, which is otherwise refused: a host name, an IP, or a CIDR network, each optionally with :PORT (mcp.internal, 127.0.0.1:3000, 10.0.0.0/8, [fd00::5]:8080; repeatable)"

const egressHelp = "let the agents' commands reach these hosts through an allowlisting proxy: a comma-separated list of names and *.suffix wildcards, \"registries\" for the common package registries (default: no way out of the box)"

const internalHelp = "NAME=IP:PORT: a package registry on your own network (a company's PyPI or npm mirror) the agents' commands may reach at exactly that private address, which --egress-allow never dials (repeatable; not loopback: that is this host)"

// openEgress makes the egress proxy of --egress-allow and
// --egress-internal, or nil without either.
func openEgress(allow string, internal []string, logger *slog.Logger, obs egress.Observer) (*egress.Proxy, error) {
	if strings.TrimSpace(allow) == "" && len(internal) == 0 {
		return nil, nil
	}
	cfg := egress.Config{Allow: egress.Expand(strings.Split(allow, ",")), Logger: logger, Observer: obs}
	for _, s := range internal {
		name, ap, err := egress.ParseInternal(s)
		if err != nil {
			return nil, fmt.Errorf("--egress-internal %w", err)
		}
		if cfg.Internal == nil {
			cfg.Internal = map[string]netip.AddrPort{}
		}
		cfg.Internal[name] = ap
	}
	p, err := egress.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("--egress-allow/--egress-internal: %w", err)
	}
	return p, nil
}
