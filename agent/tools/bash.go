package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/harvest-dev/harvest/sandbox"
)

type bashInput struct {
	Command         string `json:"command"`
	Timeout         int    `json:"timeout"`
	Description     string `json:"description"`
	RunInBackground bool   `json:"run_in_background"`
	Workdir         string `json:"workdir"`
}

var bashTool = &builtin[bashInput]{
	name: "bash",
	description: `Run a shell command (bash -c) in the sandbox and return its output (stdout and stderr together) and exit code.
Each call is a fresh shell starting in the working directory (or workdir): cd, variables and aliases do not carry over to the next call; chain commands with && instead. Stdin is empty, so interactive programs get EOF; pass flags like -y.
The default timeout is 2 minutes, the maximum 10 minutes (timeout, in milliseconds); on timeout the command and every process it started are killed.
Long output keeps its beginning and end (30,000 bytes in all) with a marker saying how much was cut from the middle: filter it (grep, tail) when you need a specific part.
For servers, watchers and other long-running commands set run_in_background: the call returns an id at once, the process keeps running between calls; read its output with bash_output and stop it with bash_kill.
Prefer the read, edit, write, glob and grep tools for files, and the git_* tools to inspect the repository.`,
	schema: schema(
		field{name: "command", typ: "string", required: true, desc: "The command line to run."},
		field{name: "timeout", typ: "integer", min: ptr(1), desc: "Time limit in milliseconds. Default 120000 (2 minutes), at most 600000 (10 minutes)."},
		field{name: "description", typ: "string", desc: "What the command does, in 5-10 words, for the people watching."},
		field{name: "run_in_background", typ: "boolean", desc: "Start the command in the background and return its id at once. Default false."},
		field{name: "workdir", typ: "string", desc: "Directory to run in, inside the workspace. Default: the working directory."},
	),
	run: runBash,
}

func (in *bashInput) validate(env *Env) string {
	if strings.TrimSpace(in.Command) == "" {
		return "command is empty"
	}
	if max := env.Limits().BashMaxTimeout; time.Duration(in.Timeout)*time.Millisecond > max {
		return fmt.Sprintf("timeout %d ms is over the maximum of %d ms; for longer work use run_in_background and check on it with bash_output", in.Timeout, max.Milliseconds())
	}
	return ""
}

// OutputFunc receives a running command's output as it arrives, for a live
// view: stream is "stdout" or "stderr". It is called from the sandbox's
// output goroutines (concurrently for the two streams), must not keep p,
// and blocks the command while it blocks.
type OutputFunc func(stream string, p []byte)

type outputKey struct{}

// WithOutput returns a context under which a foreground bash command also
// passes its output to f as it arrives. What the model gets is unchanged.
func WithOutput(ctx context.Context, f OutputFunc) context.Context {
	return context.WithValue(ctx, outputKey{}, f)
}

func outputFunc(ctx context.Context) OutputFunc {
	f, _ := ctx.Value(outputKey{}).(OutputFunc)
	return f
}

type liveWriter struct {
	stream string
	f      OutputFunc
}

func (w liveWriter) Write(p []byte) (int, error) {
	w.f(w.stream, p)
	return len(p), nil
}

// commandEnv is added to every command's environment: nothing may wait for
// a terminal that is not there.
var commandEnv = []string{"GIT_TERMINAL_PROMPT=0", "GIT_PAGER=cat", "PAGER=cat"}

// killGrace bounds how long a kill (and the delivery of the last output)
// may take after a cancellation.
const killGrace = 5 * time.Second

func runBash(ctx context.Context, env *Env, in *bashInput) Result {
	if d := env.Policy().checkBash(in.Command); !d.allowed {
		return bashDenied(env, d)
	}
	dir := env.Workdir()
	if in.Workdir != "" {
		p, denied := env.resolve(ctx, in.Workdir, accessRead)
		if denied != nil {
			return *denied
		}
		dir = p
	}
	if fi, err := env.sb.Stat(ctx, dir); err != nil || !fi.IsDir() {
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return errorf("the working directory %s does not exist or is not a directory; give an existing directory as workdir.", dir)
		}
		return fileError(ctx, "stat", dir, err)
	}
	shell, err := env.shellArgs(ctx)
	if err != nil {
		return errorf("could not find a shell in the sandbox: %v", err)
	}
	lim := env.Limits()
	timeout := lim.BashTimeout
	if in.Timeout > 0 {
		timeout = time.Duration(in.Timeout) * time.Millisecond
	}
	cmd := &sandbox.Cmd{
		Args:        append(shell, in.Command),
		Env:         env.cmdEnv,
		Dir:         dir,
		OutputLimit: lim.BashTransferBytes,
	}
	if in.RunInBackground {
		if in.Timeout > 0 {
			cmd.Timeout = timeout
		}
		return env.bg.start(ctx, in.Command, cmd)
	}
	cmd.Timeout = timeout
	out := newHeadTail(lim.MaxOutputBytes)
	cmd.Stdout, cmd.Stderr = out, out
	if f := outputFunc(ctx); f != nil {
		cmd.Stdout = io.MultiWriter(out, liveWriter{"stdout", f})
		cmd.Stderr = io.MultiWriter(out, liveWriter{"stderr", f})
	}
	proc, err := env.sb.Start(ctx, cmd)
	if err != nil {
		if ctx.Err() != nil {
			return errorf("the command was not started: the turn was cancelled.")
		}
		return errorf("could not start the command: %v", err)
	}
	st, err := proc.Wait(ctx)
	if err != nil && ctx.Err() != nil {
		// Cancelled: kill the whole process tree, then report what it said.
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killGrace)
		defer cancel()
		kerr := proc.Kill(kctx)
		_, _ = proc.Wait(kctx)
		text, cut := out.String()
		msg := "[cancelled: the command and every process it started were killed]"
		if kerr != nil {
			msg = fmt.Sprintf("[cancelled, but killing the command failed: %v]", kerr)
		}
		return Result{Output: joinOutput(stripANSI(text), msg), IsError: true, Truncated: cut}
	}
	if err != nil {
		return errorf("lost track of the command: %v", err)
	}
	text, cut := out.String()
	code := st.ShellCode()
	return Result{Output: joinOutput(stripANSI(text), statusLine(st, timeout, lim.BashMaxTimeout)), Truncated: cut, ExitCode: &code, IsError: !st.Success()}
}

func bashDenied(env *Env, d bashDecision) Result {
	if d.rule != nil {
		return deniedf("the command was not run: the bash rule %s matches %q in it. Do not try to get around the rule with a different spelling; find another way to reach your goal, or explain why you cannot.",
			d.rule, d.segment)
	}
	if strings.HasPrefix(d.segment, "(") {
		return deniedf("the command was not run: it is %s to check against the bash rules. Write it more simply.", strings.Trim(d.segment, "()"))
	}
	var allowed []string
	for _, r := range env.Policy().Bash {
		if r.Action == Allow {
			allowed = append(allowed, fmt.Sprintf("%q", r.Pattern))
		}
	}
	list := "none"
	if len(allowed) > 0 {
		list = strings.Join(allowed, ", ")
	}
	return deniedf("the command was not run: %q matches no allow rule, and commands no rule allows are denied. The allowed patterns are: %s.", d.segment, list)
}

// statusLine describes how a command ended.
func statusLine(st sandbox.ExitStatus, timeout, maxTimeout time.Duration) string {
	var parts []string
	switch {
	case st.TimedOut:
		parts = append(parts, fmt.Sprintf("timed out after %s: the command and every process it started were killed (exit code %d). Give a larger timeout (at most %s), or use run_in_background and check on it with bash_output", timeout, st.ShellCode(), maxTimeout))
	case st.OOMKilled:
		parts = append(parts, fmt.Sprintf("killed: out of memory, the sandbox hit its memory limit (exit code %d)", st.ShellCode()))
	case st.Signal != 0:
		parts = append(parts, fmt.Sprintf("killed by %s (exit code %d)", signalName(st.Signal), st.ShellCode()))
	default:
		parts = append(parts, fmt.Sprintf("exit code %d", st.Code))
	}
	if st.Dropped > 0 {
		parts = append(parts, fmt.Sprintf("%d more bytes of output were discarded in the sandbox (over the transfer cap), so the end shown above is not the end of the output", st.Dropped))
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

func signalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return fmt.Sprintf("signal %d", int(s))
}

func joinOutput(text, status string) string {
	if text == "" {
		return "(no output)\n" + status
	}
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	return text + status
}

var ansiRE = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)`)

// stripANSI removes terminal colour and cursor sequences: noise to a model.
func stripANSI(s string) string {
	if !strings.Contains(s, "\x1b") {
		return s
	}
	return ansiRE.ReplaceAllString(s, "")
}

// shellArgs returns the shell that runs commands, finding it on first use.
func (e *Env) shellArgs(ctx context.Context) ([]string, error) {
	e.mu.Lock()
	sh := e.shell
	e.mu.Unlock()
	if len(sh) > 0 {
		return append([]string(nil), sh...), nil
	}
	for _, cand := range [][]string{{"/bin/bash", "-c"}, {"/usr/bin/bash", "-c"}, {"/bin/sh", "-c"}} {
		fi, err := e.sb.Stat(ctx, cand[0])
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			continue
		}
		if fi.Mode.IsRegular() {
			e.mu.Lock()
			e.shell = cand
			e.mu.Unlock()
			return append([]string(nil), cand...), nil
		}
	}
	return nil, errors.New("neither bash nor sh is installed in the sandbox image")
}
