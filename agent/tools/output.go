package tools

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// headTail is an io.Writer that keeps the first headCap and the last tailCap
// bytes written and counts the rest: a command's output can be gigabytes,
// what the model needs is how it began and how it ended. Safe for concurrent
// writes (stdout and stderr share one).
type headTail struct {
	mu      sync.Mutex
	headCap int
	tailCap int
	head    []byte
	tail    []byte // the last bytes past head; trimmed to tailCap lazily
	total   int64
}

func newHeadTail(limit int) *headTail {
	h := limit * 2 / 5 // the tail usually matters more: errors come last
	return &headTail{headCap: h, tailCap: limit - h}
}

func (w *headTail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	w.total += int64(n)
	if room := w.headCap - len(w.head); room > 0 {
		k := min(room, len(p))
		w.head = append(w.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return n, nil
	}
	if len(p) >= w.tailCap {
		w.tail = append(w.tail[:0], p[len(p)-w.tailCap:]...)
		return n, nil
	}
	w.tail = append(w.tail, p...)
	if len(w.tail) > 2*w.tailCap {
		w.tail = append(w.tail[:0], w.tail[len(w.tail)-w.tailCap:]...)
	}
	return n, nil
}

// String renders what was kept, with a marker where bytes were cut, and
// reports whether anything was.
func (w *headTail) String() (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	tail := w.tail
	if len(tail) > w.tailCap {
		tail = tail[len(tail)-w.tailCap:]
	}
	kept := int64(len(w.head) + len(tail))
	if kept == w.total {
		return clean(string(w.head) + string(tail)), false
	}
	head, tail := cutHead(w.head), cutTail(tail)
	cut := w.total - int64(len(head)) - int64(len(tail))
	return clean(string(head)) + fmt.Sprintf("\n\n[... %d bytes of output cut here; %d bytes in all ...]\n\n", cut, w.total) + clean(string(tail)), true
}

// lineSnap is how far a cut may move to land on a line boundary.
const lineSnap = 256

// cutHead ends the head at a line boundary when one is near, and never
// inside a UTF-8 sequence.
func cutHead(b []byte) []byte {
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 && len(b)-i <= lineSnap {
		return b[:i+1]
	}
	for k := 0; k < utf8.UTFMax && len(b) > 0; k++ {
		if r, size := utf8.DecodeLastRune(b); r != utf8.RuneError || size > 1 {
			break
		}
		b = b[:len(b)-1]
	}
	return b
}

// cutTail starts the tail after a line boundary when one is near, and never
// inside a UTF-8 sequence.
func cutTail(b []byte) []byte {
	if i := bytes.IndexByte(b, '\n'); i >= 0 && i < lineSnap && i+1 < len(b) {
		return b[i+1:]
	}
	for k := 0; k < utf8.UTFMax && len(b) > 0 && !utf8.RuneStart(b[0]); k++ {
		b = b[1:]
	}
	return b
}

// clean makes text safe to hand to a model API: valid UTF-8, no NULs.
func clean(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\\0")
}

// capLines joins lines until max bytes and says how many lines were left
// out and what to do about it.
func capLines(lines []string, max int, hint string) (string, bool) {
	var b strings.Builder
	for i, l := range lines {
		if b.Len()+len(l)+1 > max && i > 0 {
			fmt.Fprintf(&b, "\n[... %d more lines not shown (output capped at %d bytes). %s]", len(lines)-i, max, hint)
			return b.String(), true
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		if len(l) > max {
			l = clip(l, max)
		}
		b.WriteString(l)
	}
	return b.String(), false
}

// clip shortens s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… [%d more bytes on this line]", len(s)-cut)
}
