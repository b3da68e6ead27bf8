// Package clis holds the end-to-end tests that prove `harvest sim` against
// the real agent CLIs: Claude Code (npm @anthropic-ai/claude-code) and
// OpenCode (npm opencode-ai), at the versions testbin pins.
//
// Why real CLIs: Harvest runs these agents in sandboxes and points them at a
// model through their base-URL settings. A sim that only our own client has
// talked to proves little; these tests show that the agents' own HTTP clients
// accept what the sim sends (SSE framing, event order, tool-call streaming,
// usage) and that the sim understands what they send (betas, side requests,
// mid-conversation system messages). Each test starts the real harvest
// binary as `harvest sim --script sim/examples/<agent>.yaml` on a loopback
// port, runs the CLI as an unprivileged user (uid 1000 when the tests run as
// root: Claude Code refuses to skip permission prompts as root) with a dummy
// key, lets it complete a scripted task of three tool calls over four turns,
// and checks the files and command output the tools really produced, the
// CLI's final answer and usage, and the requests in the sim's log.
//
// The CLIs are installed by scripts/setup under /opt/harvest/npm (or found
// through $HARVEST_CLAUDE_BIN / $HARVEST_OPENCODE_BIN). Without them the tests
// skip, saying why; where the CLIs are required they fail (internal/testreq:
// CI=true, HARVEST_REQUIRE=clis, or HARVEST_REQUIRE_CLIS=1).
package clis
