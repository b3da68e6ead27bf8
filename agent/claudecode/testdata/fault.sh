#!/bin/sh
# A fault injector standing in for claude in the fault tests: the mode file
# next to it (written by the test on the host, read-only in the box) says how
# it misbehaves; with no mode it runs the real Claude Code.
dir=$(dirname "$0")
mode=$(cat "$dir/mode" 2>/dev/null)
init='{"type":"system","subtype":"init","session_id":"fault","model":"fault"}'
case "$mode" in
hang-after-result)
	IFS= read -r _
	echo "$init"
	echo '{"type":"assistant","message":{"id":"msg_f1","role":"assistant","model":"fault","content":[{"type":"text","text":"All done."}]},"parent_tool_use_id":null}'
	echo '{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"All done.","total_cost_usd":0.25,"usage":{"input_tokens":10,"output_tokens":5}}'
	exec sleep 1000001
	;;
silent)
	IFS= read -r _
	exec sleep 1000002
	;;
crash)
	IFS= read -r _
	echo "$init"
	echo '{"type":"assistant","message":{"id":"msg_f2","role":"assistant","model":"fault","content":[{"type":"text","text":"Starting."}]},"parent_tool_use_id":null}'
	echo 'fault injector: simulated crash' >&2
	exit 3
	;;
garbage)
	IFS= read -r _
	echo "$init"
	echo 'Segmentation fault: this line is not JSON'
	exec sleep 1000003
	;;
deaf)
	# Ignores the interrupt request and SIGINT (an ignored signal stays
	# ignored across exec): only a kill ends it.
	trap '' INT
	IFS= read -r _
	echo "$init"
	echo '{"type":"assistant","message":{"id":"msg_f3","role":"assistant","model":"fault","content":[{"type":"tool_use","id":"toolu_f3","name":"Bash","input":{"command":"sleep 1000004"}}]},"parent_tool_use_id":null}'
	exec sleep 1000004
	;;
esac
exec /opt/harvest/npm/node_modules/.bin/claude "$@"
