package terminal

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harvest-dev/harvest/agent"
	"github.com/harvest-dev/harvest/event"
	"github.com/harvest-dev/harvest/internal/testbin"
)

// The tests run the real thing: real local boxes (network none) as the
// box user, real interactive CLIs on the box's PTY — bash and python3 for
// the generic path, the pinned Claude Code for the hook path — and, for
// Claude Code, harvest sim served on a box listener.

func testLogger(t *testing.T) *slog.Logger { return testbin.Logger().With("test", t.Name()) }

// recorder collects a turn's events; tests may wait on them while the turn
// runs.
type recorder struct {
	mu     sync.Mutex
	events []event.Payload
	notify chan struct{}
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{}, 1)} }

func (r *recorder) emit(p event.Payload) {
	r.mu.Lock()
	r.events = append(r.events, p)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *recorder) snapshot() []event.Payload {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// wait waits until cond holds (checked after each event), or ctx ends.
func (r *recorder) wait(ctx context.Context, cond func() bool) bool {
	for !cond() {
		select {
		case <-r.notify:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// raw is the concatenated terminal output.
func (r *recorder) raw() []byte {
	var b []byte
	for _, e := range r.snapshot() {
		if o, ok := e.(event.TerminalOutput); ok {
			b = append(b, o.Data...)
		}
	}
	return b
}

// screenText is the terminal output replayed on a screen of the default
// size (what a web terminal shows, with its scrollback).
func (r *recorder) screenText() string {
	s := newScreen(DefaultRows, DefaultCols)
	s.write(r.raw())
	return s.text(0)
}

func summarize(evs []event.Payload) string {
	var out []string
	n, size := 0, 0
	for _, e := range evs {
		if o, ok := e.(event.TerminalOutput); ok {
			n++
			size += len(o.Data)
			continue
		}
		if n > 0 {
			out = append(out, fmt.Sprintf("terminal.output×%d(%dB)", n, size))
			n, size = 0, 0
		}
		out = append(out, fmt.Sprintf("%s%+v", e.EventType(), e))
	}
	if n > 0 {
		out = append(out, fmt.Sprintf("terminal.output×%d(%dB)", n, size))
	}
	return strings.Join(out, "\n  ")
}

// checkShape checks what every turn must look like: turn.started first, the
// outcome last and nowhere else, terminal.output chunks of at most
// chunkSize.
func checkShape(t *testing.T, evs []event.Payload, out agent.Outcome) {
	t.Helper()
	if len(evs) < 2 {
		t.Fatalf("%d events: %s", len(evs), summarize(evs))
	}
	if _, ok := evs[0].(event.TurnStarted); !ok {
		t.Errorf("first event is %s, want turn.started", evs[0].EventType())
	}
	last := evs[len(evs)-1]
	if last.EventType() != out.Payload().EventType() {
		t.Errorf("last event is %s, the outcome %s", last.EventType(), out.Payload().EventType())
	}
	for i, e := range evs[:len(evs)-1] {
		switch e.EventType() {
		case event.TypeTurnFinished, event.TypeTurnCancelled, event.TypeTurnFailed:
			t.Errorf("event %d is %s before the end", i, e.EventType())
		}
		if o, ok := e.(event.TerminalOutput); ok && (len(o.Data) == 0 || len(o.Data) > chunkSize) {
			t.Errorf("terminal.output of %d bytes", len(o.Data))
		}
	}
}

// run runs one turn and checks its shape.
func run(ctx context.Context, t *testing.T, a *Agent, prompt string) (agent.Outcome, *recorder) {
	t.Helper()
	r := newRecorder()
	start := time.Now()
	out := a.Turn(ctx, prompt, r.emit)
	t.Logf("turn %q: %s in %s", prompt, out.Payload().EventType(), time.Since(start).Round(time.Millisecond))
	checkShape(t, r.snapshot(), out)
	return out, r
}

func mustFinish(t *testing.T, out agent.Outcome, r *recorder) *event.TurnFinished {
	t.Helper()
	if out.Finished == nil {
		t.Fatalf("turn ended with %+v, want turn.finished; events:\n  %s\nscreen:\n%s", out.Payload(), summarize(r.snapshot()), r.screenText())
	}
	return out.Finished
}
