package terminal

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
)

// The hook channel (Claude Code). Every hook Harvest configures runs
//
//	f=$(mktemp DIR/h.XXXXXXXX) && cat >"$f" && printf '%s %s %s\n' NONCE EVENT "$f" >>DIR/log
//
// so the hook's JSON input lands whole in a file of its own, and one short
// line — written with a single write(2) on an O_APPEND file, so lines of
// hooks running at once never interleave — says which. A `tail -F` in the
// box streams the log to Harvest; the turn reads each payload, deletes it,
// and acts on it. See the package doc for why a file and not the terminal.

// hookEvent is the part of Claude Code's hook input the agent uses.
type hookEvent struct {
	Event          string `json:"hook_event_name"`
	SessionID      string `json:"session_id"`
	TranscriptPath string `json:"transcript_path"`
	Source         string `json:"source"`    // SessionStart: startup | resume | clear | compact
	PromptID       string `json:"prompt_id"` // UserPromptSubmit, Stop, ...
	Prompt         string `json:"prompt"`    // UserPromptSubmit

	LastAssistantMessage string          `json:"last_assistant_message"` // Stop, StopFailure
	Error                json.RawMessage `json:"error"`                  // StopFailure, PostToolUseFailure
	ErrorDetails         string          `json:"error_details"`          // StopFailure
	IsInterrupt          bool            `json:"is_interrupt"`           // PostToolUseFailure

	ToolName     string          `json:"tool_name"`
	ToolInput    json.RawMessage `json:"tool_input"`
	ToolResponse json.RawMessage `json:"tool_response"`
	ToolUseID    string          `json:"tool_use_id"`
	DurationMS   int64           `json:"duration_ms"`
}

// Hook events Harvest listens to.
const (
	hookSessionStart       = "SessionStart"
	hookUserPromptSubmit   = "UserPromptSubmit"
	hookPreToolUse         = "PreToolUse"
	hookPostToolUse        = "PostToolUse"
	hookPostToolUseFailure = "PostToolUseFailure"
	hookStop               = "Stop"
	hookStopFailure        = "StopFailure"
)

var hookEvents = []string{hookSessionStart, hookUserPromptSubmit, hookPreToolUse, hookPostToolUse, hookPostToolUseFailure, hookStop, hookStopFailure}

// watcher follows the hook log with a `tail -F` in the box. Write is the
// tail's stdout (called by the sandbox's output copier); the turn takes
// the complete lines.
type watcher struct {
	sb     *sandbox.Sandbox
	dir    string
	nonce  string
	logger *slog.Logger

	notify chan struct{}

	mu      sync.Mutex
	lines   []string
	partial []byte
	seen    int // lines of the log delivered (by the tail or by poll)
	tailPos int // complete lines the running tail printed (it starts at line 1)
	proc    *sandbox.Process
}

func newWatcher(sb *sandbox.Sandbox, dir, nonce string, logger *slog.Logger) *watcher {
	return &watcher{sb: sb, dir: dir, nonce: nonce, logger: logger, notify: make(chan struct{}, 1)}
}

func (w *watcher) logPath() string { return w.dir + "/log" }

// start starts the tail (again, if it ended: the lines already delivered
// are skipped).
func (w *watcher) start(ctx context.Context) error {
	w.mu.Lock()
	w.tailPos, w.partial = 0, nil
	w.mu.Unlock()
	p, err := w.sb.Start(ctx, &sandbox.Cmd{
		Args:   []string{"tail", "-F", "-n", "+1", "-s", "0.2", w.logPath()},
		Stdout: w,
	})
	if err != nil {
		return fmt.Errorf("following Claude Code's hook log with tail in the box (the box needs tail, from coreutils or busybox): %w", err)
	}
	w.mu.Lock()
	w.proc = p
	w.mu.Unlock()
	return nil
}

// running reports whether the tail is running.
func (w *watcher) running() bool {
	w.mu.Lock()
	p := w.proc
	w.mu.Unlock()
	if p == nil {
		return false
	}
	select {
	case <-p.Done():
		return false
	default:
		return true
	}
}

// stop kills the tail and waits for it.
func (w *watcher) stop(ctx context.Context) {
	w.mu.Lock()
	p := w.proc
	w.proc = nil
	w.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.Kill(ctx)
	_, _ = p.Wait(ctx)
}

func (w *watcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	data := append(w.partial, p...)
	w.partial = nil
	got := false
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		line := string(data[:i])
		data = data[i+1:]
		w.tailPos++
		if w.tailPos <= w.seen {
			continue // delivered already (by poll, or before a restart)
		}
		w.seen = w.tailPos
		w.lines = append(w.lines, line)
		got = true
	}
	if len(data) > 0 {
		w.partial = append([]byte(nil), data...)
	}
	w.mu.Unlock()
	if got {
		select {
		case w.notify <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// poll reads the log itself and delivers the complete lines the tail has
// not: a backstop for a tail that lags (a loaded machine) or died, so a
// hook that ran is never missed.
func (w *watcher) poll(ctx context.Context) bool {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	data, err := w.sb.ReadFile(rctx, w.logPath())
	if err != nil {
		return false // not written yet, or the box is going: the tail or the next poll
	}
	if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
		data = data[:i]
	} else {
		return false
	}
	lines := strings.Split(string(data), "\n")
	w.mu.Lock()
	got := false
	for ; w.seen < len(lines); w.seen++ {
		w.lines = append(w.lines, lines[w.seen])
		got = true
	}
	w.mu.Unlock()
	if got {
		w.logger.Warn("the hook log's tail lagged: read the log directly")
		select {
		case w.notify <- struct{}{}:
		default:
		}
	}
	return got
}

// take returns the lines received since the last take.
func (w *watcher) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.lines
	w.lines = nil
	return l
}

// read turns one log line into the hook's event: the line must carry this
// session's nonce and name a payload file in the hook directory. The
// payload is deleted once read.
func (w *watcher) read(ctx context.Context, line string) (hookEvent, error) {
	f := strings.SplitN(line, " ", 3)
	if len(f) != 3 || f[0] != w.nonce {
		return hookEvent{}, fmt.Errorf("a line in the hook log without this session's nonce: %.80q", line)
	}
	path := f[2]
	if !strings.HasPrefix(path, w.dir+"/h.") || strings.Contains(path[len(w.dir):], "..") {
		return hookEvent{}, fmt.Errorf("hook log names a payload outside %s: %.80q", w.dir, path)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	data, err := w.sb.ReadFile(rctx, path)
	if err != nil {
		return hookEvent{}, fmt.Errorf("reading the %s hook's input: %w", f[1], err)
	}
	_ = w.sb.Remove(rctx, path)
	var ev hookEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		return hookEvent{}, fmt.Errorf("the %s hook's input is not JSON: %w", f[1], err)
	}
	if ev.Event != f[1] {
		return hookEvent{}, fmt.Errorf("the hook log says %s but the hook's input says %q", f[1], ev.Event)
	}
	return ev, nil
}
