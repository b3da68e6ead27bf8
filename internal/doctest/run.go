package doctest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// A Runner runs blocks: in Dir, with Env as their whole environment.
type Runner struct {
	Dir string
	Env []string
	// Shell is bash's path (default: bash on PATH).
	Shell string
	// Out, when set, is where each block's output goes as well (a test's log).
	Out func(b Block, output string)
}

// outputTail is how much of a failed block's output its error carries.
const outputTail = 8 << 10

// groupGrace is how long a block's leftover processes get between SIGTERM
// and SIGKILL.
const groupGrace = 10 * time.Second

// Run runs b and returns nil when it exits 0 within its deadline. Any
// other end is an error that starts with the block's file:line and ends
// with the tail of its output (stdout and stderr, interleaved).
func (r *Runner) Run(ctx context.Context, b Block) error {
	shell := r.Shell
	if shell == "" {
		shell = "bash"
	}
	out, err := os.CreateTemp("", "doctest-out-*")
	if err != nil {
		return fmt.Errorf("%s: %w", b.Where(), err)
	}
	defer os.Remove(out.Name())
	defer out.Close()

	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, b.Timeout)
	defer cancel()
	// -e and pipefail: the first command that fails fails the block. The
	// script's name in bash's own messages is the block's place.
	cmd := exec.CommandContext(ctx, shell, "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", b.Script, b.Where())
	cmd.Dir = r.Dir
	cmd.Env = r.Env
	cmd.Stdin = nil
	// A file, not a pipe: a process the block leaves in the background
	// holds no pipe that Wait would wait for.
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	if cmd.Process != nil {
		endGroup(cmd.Process.Pid)
	}
	output := readAll(out.Name())
	if r.Out != nil {
		r.Out(b, output)
	}
	if runErr == nil {
		return nil
	}
	why := runErr.Error()
	if parent.Err() != nil {
		why = fmt.Sprintf("was stopped before its end: %v", context.Cause(parent))
	} else if ctx.Err() == context.DeadlineExceeded {
		why = fmt.Sprintf("was still running after its deadline, %s (killed; give it longer with ```sh test timeout=D)", b.Timeout)
	} else if ee := (*exec.ExitError)(nil); errors.As(runErr, &ee) {
		why = fmt.Sprintf("exited %d", ee.ExitCode())
	}
	if len(output) > outputTail {
		output = "[...]\n" + output[len(output)-outputTail:]
	}
	return fmt.Errorf("%s: the block %s\n--- its script:\n%s--- its output:\n%s", b.Where(), why, b.Script, output)
}

// endGroup ends what is left of the process group pgid: SIGTERM, and
// SIGKILL if it is still there after groupGrace.
func endGroup(pgid int) {
	if syscall.Kill(-pgid, syscall.SIGTERM) != nil {
		return // no process left
	}
	deadline := time.Now().Add(groupGrace)
	for time.Now().Before(deadline) {
		if syscall.Kill(-pgid, 0) != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

func readAll(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(reading the output: %v)", err)
	}
	return string(b)
}

// Mirror makes dir a mirror of root for the blocks to run in: a symbolic
// link to each of root's top-level entries, so paths such as examples/calc
// resolve while what a block writes stays in dir.
func Mirror(root, dir string) error {
	entries, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".git") {
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// Files lists the documentation whose blocks TestDocs runs: README.md,
// docs/getting-started.md (the walk a newcomer takes first), then every
// other .md file under docs/ by name.
func Files(root string) ([]string, error) {
	first := []string{filepath.Join(root, "README.md"), filepath.Join(root, "docs", "getting-started.md")}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	files := first
	for _, f := range more {
		if !slices.Contains(first, f) {
			files = append(files, f)
		}
	}
	return files, nil
}
