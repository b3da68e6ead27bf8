package terminal

import (
	"sync"
	"time"
)

// Output chunking: bytes are handed to terminal.output events at most
// flushDelay after the first of them arrived, or at once when chunkSize have
// piled up; one event never carries more than chunkSize.
const (
	chunkSize  = 16 << 10
	flushDelay = 20 * time.Millisecond
	// maxIdlePending bounds what is kept between turns (when nobody can
	// emit it). An idle CLI prints next to nothing; beyond this the oldest
	// bytes go, and the next turn's log says how many.
	maxIdlePending = 8 << 20
)

// output is the PTY's writer: the sandbox's output copier calls Write with
// every piece of the terminal's bytes. It keeps them for the turn to emit,
// applies them to a screen model (render.go), and wakes the turn. Write never blocks on the turn,
// so a slow consumer never stalls the CLI.
type output struct {
	mu      sync.Mutex
	notify  chan struct{} // capacity 1: "something changed"
	pending []byte
	firstAt time.Time // when pending's first byte arrived
	last    time.Time // when the last byte arrived
	version uint64    // counts writes, so the turn re-reads text only when it changed
	dropped int64
	s       *screen
	inTurn  bool
}

func newOutput(rows, cols uint16) *output {
	return &output{notify: make(chan struct{}, 1), s: newScreen(int(rows), int(cols))}
}

// resize follows the terminal's size.
func (o *output) resize(rows, cols uint16) {
	o.mu.Lock()
	o.s.resize(int(rows), int(cols))
	o.mu.Unlock()
}

func (o *output) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	now := time.Now()
	o.mu.Lock()
	if len(o.pending) == 0 {
		o.firstAt = now
	}
	o.pending = append(o.pending, p...)
	if !o.inTurn && len(o.pending) > maxIdlePending {
		cut := len(o.pending) - maxIdlePending
		o.dropped += int64(cut)
		o.pending = append(o.pending[:0:0], o.pending[cut:]...)
	}
	o.last = now
	o.version++
	o.s.write(p)
	o.mu.Unlock()
	select {
	case o.notify <- struct{}{}:
	default:
	}
	return len(p), nil
}

// take returns the bytes to emit now, in chunks of at most chunkSize: all
// of them when force is set or flushDelay has passed since the first one
// arrived, else only whole chunks. due is when to call again (zero: nothing
// pending).
func (o *output) take(now time.Time, force bool) (chunks [][]byte, due time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	all := force || now.Sub(o.firstAt) >= flushDelay
	for len(o.pending) >= chunkSize || (all && len(o.pending) > 0) {
		n := min(len(o.pending), chunkSize)
		chunks = append(chunks, o.pending[:n:n])
		o.pending = o.pending[n:]
	}
	if len(o.pending) == 0 {
		o.pending = nil
		return chunks, time.Time{}
	}
	if len(chunks) > 0 {
		o.firstAt = now // the rest arrived with what went; give it its own delay
	}
	return chunks, o.firstAt.Add(flushDelay)
}

// setInTurn says whether a turn is emitting: between turns pending bytes
// are bounded by maxIdlePending. It returns the bytes dropped since the
// last call.
func (o *output) setInTurn(in bool) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.inTurn = in
	d := o.dropped
	o.dropped = 0
	return d
}

// mark makes text start at the cursor: text then holds what came after.
func (o *output) mark() {
	o.mu.Lock()
	o.s.mark()
	o.mu.Unlock()
}

// lastOutput is when the last byte arrived (zero if none ever did).
func (o *output) lastOutput() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.last
}

// text returns the text shown since the last mark (its last n lines, when
// n > 0) and the version it corresponds to.
func (o *output) text(n int) (string, uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.s.text(n), o.version
}

// changed reports whether anything was written since version v.
func (o *output) changed(v uint64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.version != v
}

// tail returns the last n non-blank rendered lines.
func (o *output) tail(n int) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.s.tail(n)
}
