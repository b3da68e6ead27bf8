package memory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// CommandHookTimeout bounds one run of a CommandHook.
const CommandHookTimeout = 10 * time.Second

// CommandHook is a Hook that runs argv on the host (the server's command,
// never the agent's) for every write, with the Write as JSON on its stdin
// (Claude Code's hooks take their event the same way). Exit status 0
// allows the write; any other status, or no answer within
// CommandHookTimeout, refuses it, and the first line of its stderr
// (capped) is the reason the writer is told. It fails closed: a hook that
// cannot run refuses every write.
func CommandHook(argv []string) (Hook, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, errors.New("memory hook: no command: give the program and its arguments")
	}
	prog, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, fmt.Errorf("memory hook %q: %w", argv[0], err)
	}
	args := append([]string(nil), argv[1:]...)
	return func(ctx context.Context, w Write) error {
		in, err := json.Marshal(w)
		if err != nil {
			return fmt.Errorf("encoding the write: %w", err)
		}
		ctx, cancel := context.WithTimeout(ctx, CommandHookTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, prog, args...)
		cmd.Stdin = bytes.NewReader(in)
		var stderr bytes.Buffer
		cmd.Stderr = &limited{b: &stderr, n: 4096}
		// Its own process group, killed whole when the time is up, and a
		// bound on waiting for its output once it is gone.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = time.Second
		err = cmd.Run()
		if err == nil {
			return nil
		}
		reason, _, _ := strings.Cut(strings.TrimSpace(stderr.String()), "\n")
		reason = clipBytes(clean(reason), 300)
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("the hook %s did not answer within %s", argv[0], CommandHookTimeout)
		case reason == "":
			return fmt.Errorf("the hook %s refused it (%v) without saying why", argv[0], err)
		}
		return errors.New(reason)
	}, nil
}

// limited keeps the first n bytes written to it and drops the rest.
type limited struct {
	b *bytes.Buffer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
