#!/bin/sh
# A PreToolUse hook for Harvest's builtin agent (Claude Code's hook protocol):
# the tool call arrives as JSON on stdin, for example
#   {"hook_event_name":"PreToolUse","session_id":"run-...","cwd":"/workspace/app",
#    "tool_name":"bash","tool_input":{"command":"rm -rf /workspace"}}
# Exit 0 lets the call run; exit 2 blocks it and stderr is the reason the
# model sees. Hooks run inside the sandbox, like the agent's own commands.
input=$(cat)
case "$input" in
  *'rm -rf /workspace'*|*'rm -rf /'\"*|*'mkfs'*)
    echo "blocked by guard.sh: this command would destroy the workspace" >&2
    exit 2 ;;
esac
exit 0
