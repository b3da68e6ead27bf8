package tools

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/harvest-dev/harvest/sandbox"
)

// Background processes are sandbox processes started without waiting. The
// in-box agent keeps them running between tool calls; the sandbox client
// delivers their output to a bgBuffer, which keeps what the model has not
// read yet (bounded: the oldest unread bytes go first). No goroutine of this
// package is involved: the sandbox.Process owns its copiers and they end with
// the process, so a background process costs nothing while it is quiet.

// maxFinished bounds how many finished processes are remembered for
// bash_output before the oldest are forgotten.
const maxFinished = 16

type background struct {
	env *Env

	mu     sync.Mutex
	next   int
	procs  map[string]*bgProc
	order  []string // ids, oldest first
	closed bool     // Env.Close was called: no new processes
}

type bgProc struct {
	id      string
	command string
	started time.Time
	proc    *sandbox.Process
	out     *bgBuffer
}

func (b *bgProc) running() bool {
	select {
	case <-b.proc.Done():
		return false
	default:
		return true
	}
}

func newBackground(e *Env) *background {
	return &background{env: e, procs: map[string]*bgProc{}}
}

// BackgroundProcess describes a background process, for the loop and UI.
type BackgroundProcess struct {
	ID      string
	Command string
	PID     int
	Started time.Time
	Running bool
}

// Background lists the background processes the session knows about.
func (e *Env) Background() []BackgroundProcess {
	b := e.bg
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []BackgroundProcess
	for _, id := range b.order {
		p := b.procs[id]
		out = append(out, BackgroundProcess{ID: p.id, Command: p.command, PID: p.proc.PID(), Started: p.started, Running: p.running()})
	}
	return out
}

func (b *background) start(ctx context.Context, command string, cmd *sandbox.Cmd) Result {
	lim := b.env.Limits()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return errorf("the session is ending; no new background processes can start.")
	}
	var running []string
	for _, id := range b.order {
		if b.procs[id].running() {
			running = append(running, id)
		}
	}
	if len(running) >= lim.MaxBackground {
		b.mu.Unlock()
		return errorf("%d background processes are already running (%s), the most allowed. Stop one with bash_kill first.", len(running), strings.Join(running, ", "))
	}
	b.next++
	id := fmt.Sprintf("bash_%d", b.next)
	b.mu.Unlock()

	buf := newBgBuffer(lim.BackgroundBufferBytes)
	cmd.Stdout, cmd.Stderr = buf, buf
	proc, err := b.env.sb.Start(ctx, cmd)
	if err != nil {
		if ctx.Err() != nil {
			return errorf("the command was not started: the turn was cancelled.")
		}
		return errorf("could not start the command: %v", err)
	}
	p := &bgProc{id: id, command: command, started: time.Now(), proc: proc, out: buf}
	b.mu.Lock()
	if b.closed {
		// Close ran while this one started: it must not outlive the session.
		b.mu.Unlock()
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killGrace)
		defer cancel()
		_ = proc.Kill(kctx)
		_, _ = proc.Wait(kctx)
		return errorf("the session is ending; the background process was stopped.")
	}
	b.procs[id] = p
	b.order = append(b.order, id)
	b.forgetOldLocked()
	b.mu.Unlock()
	return Result{
		Output:       fmt.Sprintf("Started %s in the background (pid %d). Read its output with bash_output {\"id\": %q}; stop it with bash_kill {\"id\": %q}.", id, proc.PID(), id, id),
		BackgroundID: id,
	}
}

// forgetOldLocked drops the oldest finished processes beyond maxFinished.
func (b *background) forgetOldLocked() {
	var finished []string
	for _, id := range b.order {
		if !b.procs[id].running() {
			finished = append(finished, id)
		}
	}
	for _, id := range finished[:max(0, len(finished)-maxFinished)] {
		b.removeLocked(id)
	}
}

func (b *background) removeLocked(id string) {
	delete(b.procs, id)
	b.order = slices.DeleteFunc(b.order, func(x string) bool { return x == id })
}

func (b *background) lookup(id string) (*bgProc, *Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.procs[id]; ok {
		return p, nil
	}
	known := "there are none"
	if len(b.order) > 0 {
		known = "known ids: " + strings.Join(b.order, ", ")
	}
	r := errorf("there is no background process %q (%s). Start one with bash and run_in_background: true.", id, known)
	return nil, &r
}

// killAll kills every running background process, waits until each is gone
// (or ctx ends), and refuses new ones from then on.
func (b *background) killAll(ctx context.Context) error {
	b.mu.Lock()
	procs := make([]*bgProc, 0, len(b.procs))
	for _, id := range b.order {
		procs = append(procs, b.procs[id])
	}
	b.procs, b.order, b.closed = map[string]*bgProc{}, nil, true
	b.mu.Unlock()
	var errs []error
	for _, p := range procs {
		if !p.running() {
			continue
		}
		if err := p.proc.Kill(ctx); err != nil {
			errs = append(errs, fmt.Errorf("killing background process %s: %w", p.id, err))
			continue
		}
		if _, err := p.proc.Wait(ctx); err != nil && ctx.Err() != nil {
			errs = append(errs, fmt.Errorf("waiting for background process %s: %w", p.id, err))
		}
	}
	return errors.Join(errs...)
}

// bgBuffer holds a background process's unread output.
type bgBuffer struct {
	mu      sync.Mutex
	cap     int
	unread  []byte
	dropped int64 // unread bytes dropped since the last take
	total   int64
	changed chan struct{} // closed at the next write
}

func newBgBuffer(cap int) *bgBuffer {
	return &bgBuffer{cap: cap, changed: make(chan struct{})}
}

func (b *bgBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total += int64(len(p))
	b.unread = append(b.unread, p...)
	if over := len(b.unread) - b.cap; over > 0 {
		b.dropped += int64(over)
		b.unread = append(b.unread[:0], b.unread[over:]...)
	}
	close(b.changed)
	b.changed = make(chan struct{})
	return len(p), nil
}

// take returns the unread output and marks it read.
func (b *bgBuffer) take() (data []byte, dropped, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	data, dropped, total = b.unread, b.dropped, b.total
	b.unread, b.dropped = nil, 0
	return data, dropped, total
}

// pending reports whether there is unread output, and a channel closed at
// the next write.
func (b *bgBuffer) pending() (bool, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.unread) > 0, b.changed
}

type bashOutputInput struct {
	ID     string `json:"id"`
	Filter string `json:"filter"`
	Wait   int    `json:"wait"`
}

// maxOutputWait bounds bash_output's wait.
const maxOutputWait = 5 * time.Minute

var bashOutputTool = &builtin[bashOutputInput]{
	name: "bash_output",
	description: `Read the output a background process (started by bash with run_in_background) produced since the last bash_output call, and whether it is still running.
With wait (milliseconds), wait up to that long for new output or for the process to end before returning, instead of polling with sleep.
With filter (a regular expression, RE2 syntax), return only the new lines that match it; the others are discarded.`,
	schema: schema(
		field{name: "id", typ: "string", required: true, desc: "The id bash returned, like bash_1."},
		field{name: "filter", typ: "string", desc: "Only return lines matching this regular expression."},
		field{name: "wait", typ: "integer", min: ptr(0), max: ptr(int(maxOutputWait / time.Millisecond)), desc: "Wait up to this many milliseconds for new output or the end of the process. Default 0: return at once."},
	),
	readOnly: true,
	run:      runBashOutput,
}

func runBashOutput(ctx context.Context, env *Env, in *bashOutputInput) Result {
	var re *regexp.Regexp
	if in.Filter != "" {
		var err error
		if re, err = regexp.Compile(in.Filter); err != nil {
			return errorf("filter is not a valid regular expression (RE2 syntax): %v", err)
		}
	}
	p, res := env.bg.lookup(in.ID)
	if res != nil {
		return *res
	}
	if in.Wait > 0 {
		has, changed := p.out.pending()
		if !has && p.running() {
			t := time.NewTimer(time.Duration(in.Wait) * time.Millisecond)
			select {
			case <-changed:
			case <-p.proc.Done():
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
	}
	return bgReport(env, p, re, "")
}

// bgReport renders a background process's status and unread output.
func bgReport(env *Env, p *bgProc, re *regexp.Regexp, prefix string) Result {
	running := p.running()
	var status string
	var exit *int
	if running {
		status = fmt.Sprintf("[%s is running (pid %d, for %s): %s]", p.id, p.proc.PID(), time.Since(p.started).Round(time.Second), clip(p.command, 200))
	} else {
		st, err := p.proc.Wait(context.Background()) // Done is closed: returns at once
		if err != nil {
			status = fmt.Sprintf("[%s: lost track of it: %v]", p.id, err)
		} else {
			code := st.ShellCode()
			exit = &code
			status = fmt.Sprintf("[%s has finished: %s]", p.id, strings.TrimPrefix(strings.TrimSuffix(statusLine(st, 0, env.Limits().BashMaxTimeout), "]"), "["))
		}
	}
	data, dropped, total := p.out.take()
	text := stripANSI(string(data))
	var notes []string
	if re != nil && text != "" {
		lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
		var kept []string
		for _, l := range lines {
			if re.MatchString(l) {
				kept = append(kept, l)
			}
		}
		if len(kept) < len(lines) {
			notes = append(notes, fmt.Sprintf("%d of %d new lines did not match the filter and were discarded", len(lines)-len(kept), len(lines)))
		}
		text = strings.Join(kept, "\n")
	}
	ht := newHeadTail(env.Limits().MaxOutputBytes)
	_, _ = ht.Write([]byte(text))
	text, cut := ht.String()
	if dropped > 0 {
		notes = append(notes, fmt.Sprintf("%d older bytes were dropped before you read them (at most %d unread bytes are kept); call bash_output more often or filter", dropped, env.Limits().BackgroundBufferBytes))
	}
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteString(status)
	b.WriteByte('\n')
	if text == "" {
		fmt.Fprintf(&b, "(no new output; %d bytes in all so far)\n", total)
	} else {
		b.WriteString(text)
		if !strings.HasSuffix(text, "\n") {
			b.WriteByte('\n')
		}
	}
	if len(notes) > 0 {
		b.WriteString("[" + strings.Join(notes, "; ") + "]\n")
	}
	return Result{Output: b.String(), Truncated: cut || dropped > 0, ExitCode: exit}
}

type bashKillInput struct {
	ID string `json:"id"`
}

var bashKillTool = &builtin[bashKillInput]{
	name:        "bash_kill",
	description: `Stop a background process (started by bash with run_in_background) and every process it started. Returns its last unread output.`,
	schema: schema(
		field{name: "id", typ: "string", required: true, desc: "The id bash returned, like bash_1."},
	),
	run: runBashKill,
}

func runBashKill(ctx context.Context, env *Env, in *bashKillInput) Result {
	p, res := env.bg.lookup(in.ID)
	if res != nil {
		return *res
	}
	prefix := ""
	if p.running() {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killGrace)
		defer cancel()
		if err := p.proc.Kill(kctx); err != nil {
			return errorf("killing %s failed: %v", p.id, err)
		}
		if _, err := p.proc.Wait(kctx); err != nil {
			return errorf("%s was sent a kill but has not ended: %v", p.id, err)
		}
		prefix = fmt.Sprintf("Killed %s and every process it started.\n", p.id)
	} else {
		prefix = fmt.Sprintf("%s had already finished; it is now forgotten.\n", p.id)
	}
	r := bgReport(env, p, nil, prefix)
	env.bg.mu.Lock()
	env.bg.removeLocked(p.id)
	env.bg.mu.Unlock()
	return r
}
