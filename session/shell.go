package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/sandbox"
)

// A shell is a person's interactive terminal in a session's live box
// (borrowed as box.go says): a login-less bash (sh without it) on a PTY,
// in the first repository's workspace, run by the in-box agent like any
// command, so it ends with the box. It is journaled as shell.opened and
// shell.closed (who, when, how it ended), never what is typed or shown:
// the session's events are read by everyone who may see the session, and
// a terminal carries whatever its user types, passwords included.

// ShellIO is a shell's terminal and who opens it.
type ShellIO struct {
	// Stdin is what is typed; Stdout gets what the terminal shows. Stdout
	// is written by one goroutine; a slow one holds the shell back (the
	// box's flow control), never the server.
	Stdin  io.Reader
	Stdout io.Writer
	Size   sandbox.TTYSize
	// By and ByName are who opens it (a token's id and name).
	By, ByName string
}

// Shell is an open shell. Close it when its terminal goes away.
type Shell struct {
	m       *Manager
	session string
	id, by  string
	p       *sandbox.Process
	opened  time.Time

	once   sync.Once
	closed chan struct{}
	end    event.ShellClosed
}

// shellCmd runs bash when the box has it, else sh, interactive.
const shellCmd = `if command -v bash >/dev/null 2>&1; then exec bash -i; fi; exec sh -i`

// OpenShell opens a shell in the live box of a session the owner may see
// ("" is an admin) and journals shell.opened. ErrNoBox when it has none.
func (m *Manager) OpenShell(ctx context.Context, owner, id string, sio ShellIO) (*Shell, error) {
	sb, s, err := m.Box(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	if sio.Size.Rows == 0 || sio.Size.Cols == 0 {
		sio.Size = sandbox.TTYSize{Rows: 24, Cols: 80}
	}
	var repo, dir string
	if len(s.Repos) > 0 {
		repo = s.Repos[0].Name
		dir = sb.WorkspacePath(repo)
	}
	p, err := sb.Start(ctx, &sandbox.Cmd{
		Args: []string{"sh", "-c", shellCmd}, Dir: dir, Env: []string{"TERM=xterm-256color"},
		Stdin: sio.Stdin, Stdout: sio.Stdout, TTY: &sio.Size,
	})
	if err != nil {
		if !sb.Alive() {
			return nil, fmt.Errorf("session %s: %w", id, noBoxHint(""))
		}
		return nil, fmt.Errorf("starting a shell in session %s's box: %w", id, err)
	}
	var b [4]byte
	rand.Read(b[:])
	sh := &Shell{m: m, session: id, id: "sh-" + hex.EncodeToString(b[:]), by: sio.By, p: p, opened: m.clock.Now(), closed: make(chan struct{})}
	m.journalShell(ctx, sh.session, event.ShellOpened{Shell: sh.id, By: sio.By, ByName: sio.ByName, Repo: repo})
	return sh, nil
}

// ID names the shell in its events.
func (sh *Shell) ID() string { return sh.id }

// Done is closed when the shell's process has exited and its output was
// delivered.
func (sh *Shell) Done() <-chan struct{} { return sh.p.Done() }

// Resize changes the terminal's size.
func (sh *Shell) Resize(ctx context.Context, size sandbox.TTYSize) error {
	if size.Rows == 0 || size.Cols == 0 {
		return fmt.Errorf("a terminal of %d rows and %d columns: give both, at least 1", size.Rows, size.Cols)
	}
	return sh.p.Resize(ctx, size.Rows, size.Cols)
}

// Close ends the shell (its process tree is killed if it still runs),
// waits for it, and journals shell.closed with reason ("exited" when it had
// exited by itself), which it returns. Only the first call does anything;
// Stdout must keep accepting writes until it returns.
func (sh *Shell) Close(reason string) event.ShellClosed {
	sh.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(sh.m.base), 30*time.Second)
		defer cancel()
		select {
		case <-sh.p.Done():
			reason = "exited"
		default:
			if err := sh.p.Kill(ctx); err != nil {
				sh.m.log.Warn("killing a shell", "session", sh.session, "shell", sh.id, "err", err)
			}
		}
		st, err := sh.p.Wait(ctx)
		code := st.ShellCode()
		if err != nil {
			code, reason = -1, "box gone"
		}
		sh.end = event.ShellClosed{Shell: sh.id, By: sh.by, Code: code, DurationMS: sh.m.clock.Now().Sub(sh.opened).Milliseconds(), Reason: reason}
		sh.m.journalShell(ctx, sh.session, sh.end)
		close(sh.closed)
	})
	<-sh.closed
	return sh.end
}

// journalShell journals a shell's event before returning, so a client
// that reads the log after its terminal closed finds it.
func (m *Manager) journalShell(ctx context.Context, id string, p event.Payload) {
	if _, err := m.j.AppendSync(context.WithoutCancel(ctx), event.Event{Session: id, Time: m.clock.Now().UTC(), Data: p}); err != nil {
		m.log.Warn("journaling a shell's event", "session", id, "type", p.EventType(), "err", err)
	}
}
