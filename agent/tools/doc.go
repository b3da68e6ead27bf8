// Package tools is the builtin agent's toolbox: read, write, edit, bash (with
// bash_output and bash_kill for background processes), glob, grep,
// git_status, git_diff, git_log and todo, and the permission policy checked
// before each of them runs.
//
// # Where tools run
//
// The builtin loop runs in the Harvest process, so model keys never enter the
// sandbox; the tools it calls act inside the sandbox only, through the
// *sandbox.Sandbox API: files through the in-box agent (ReadAt, WriteFile,
// Stat, Lstat, ReadDir, Glob, Grep) and commands through Start and Run. No
// tool ever opens a host path of a workspace, so a symlink an agent wrote
// resolves in the box's view and cannot make Harvest read or write a host
// file, and git runs in the box, never on the host, where an agent-written
// .git (hooks, core.fsmonitor, filters) would run code.
//
// # Shape
//
//	Registry ── Run(ctx, env, name, input) ──► Tool.Run(ctx, env, input) ──► Result
//	   │  unknown tool, plan mode, panics          │ decode + schema check
//	   │  → error Result                           │ Env.resolve (path policy)
//	   │                                           │ Policy.checkBash (bash rules)
//	Env: the sandbox, workspace root, workdir, Policy, Limits, and the state
//	that lives across calls (todo list, background processes, files read).
//
// A Tool never returns a Go error. Whatever goes wrong — malformed JSON, a
// schema violation, a denied path, a missing file, a failing command, a lost
// sandbox, even a panic — becomes a Result with IsError set and a message
// that says what was wrong and what to do instead, because the loop sends it
// back to the model as the tool's result. Denials by the policy also set
// Denied. The input schemas are built from the same field lists that the
// input is checked against, and a test checks them against the Go input
// types, so what the model is told cannot drift from what is enforced.
//
// The Env is safe for concurrent use: the loop may run ReadOnly tools (read,
// bash_output, glob, grep, the git tools, todo) of one step in parallel;
// tools that change the workspace run one at a time, in order.
//
// # Permissions (Policy)
//
//   - Paths: file tools act only below the workspace root (/workspace) and
//     Policy.AllowPaths, unless Policy.AllowExternal. The check is made on the
//     cleaned path and again after resolving every symlink in it inside the
//     box (one Lstat per component), so "../../etc" and a symlink to /etc are
//     both refused, and the denial names the symlink. The tool then acts on
//     the resolved path. write and edit refuse anything inside a .git
//     directory. write refuses to replace a file the model has not read in
//     this session or that changed since it did.
//   - Bash rules: ordered glob patterns on the command, in the style of seed
//     004's permissions.bash; deny wins over allow, whatever the order; the
//     denial names the rule and the part of the command it matched. The
//     command line is split like a shell would (lists, pipelines, subshells,
//     $( ), bash -c and eval strings, wrappers like sudo and env), so "cd x &&
//     rm -rf /workspace" and "bash -c 'rm -rf /workspace'" are caught by the
//     rule "rm -rf /workspace*". Rules are a guard rail, not a boundary: the
//     sandbox is what confines the agent.
//   - Plan mode: only ReadOnly tools run; the others answer that the agent is
//     in plan mode. Env.SetMode leaves it.
//
// # Caps and defaults (Limits; the model's context is precious)
//
//	read          2,000 lines by default (offset/limit for more), 64 KiB of
//	              output, lines clipped at 2,000 bytes, scans at most 64 MiB to
//	              reach an offset; binary files (a NUL in the first 8,000
//	              bytes) are described, not shown. Every cut says how to read on.
//	write, edit   files and content up to 10 MiB.
//	bash          timeout 2 min by default, 10 min at most; 30,000 bytes of
//	              output: the first 12,000 and the last 18,000, cut on line
//	              boundaries, with a marker saying how many bytes were cut; at
//	              most 64 MiB per stream leaves the box (the rest is dropped
//	              there, and the result says so).
//	background    8 running at once; 1 MiB of unread output each (oldest
//	              dropped, counted); bash_output returns 30,000 bytes at most
//	              (head and tail) and waits up to 5 min when asked to; finished
//	              processes are remembered for bash_output (the last 16).
//	glob          200 paths, sorted, .gitignore respected.
//	grep          200 matching lines (or files), lines clipped at 500 bytes,
//	              files over 4 MiB and binary files skipped, .gitignore respected.
//	git_*         30,000 bytes (git_diff keeps the beginning), 1 min per git
//	              command; git_log 20 commits by default, 200 at most.
//	todo          100 items of at most 500 bytes.
//	directory     reading a directory lists at most 100 entries.
//
// # Processes
//
// A foreground bash command runs with the sandbox's in-box timeout (it holds
// even if Harvest dies); when the context is cancelled (the user cancels the
// turn) the whole process tree is killed through Process.Kill, and bash
// returns once it is gone — well within a second. Background processes are
// sandbox processes this package does not wait for: the in-box agent keeps
// them running between calls, the sandbox client delivers their output into a
// bounded buffer, and Env.Close kills whatever still runs when the session
// ends. This package starts no goroutines of its own.
//
// Commands run in a fresh non-login bash (sh when the image has no bash):
// a login shell would source /etc/profile, which resets the PATH the box was
// given. Stdin is empty, GIT_TERMINAL_PROMPT=0 and pagers are cat, so nothing
// waits for a terminal that is not there. Terminal escape sequences are
// stripped from output.
package tools
